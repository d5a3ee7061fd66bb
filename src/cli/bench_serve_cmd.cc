// `pagoda bench serve`: load-tests any OpenAI-compatible server (the library
// is src/bench_client/). Exit code 0 when every request succeeded, 1 when
// some failed or the run could not start, 2 for bad flags.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "bench_client/bench_serve.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace pagoda::cli {

int bench_serve(int argc, char** argv) {
  CLI::App app("Load-test an OpenAI-compatible server (streamed requests)", "bench serve");
  bench::BenchServeConfig cfg;
  bench::WorkloadConfig& w = cfg.workload;
  std::string endpoint, dataset = "random", rate = "inf", json_path;
  bool no_progress = false;
  app.add_option("--base-url", cfg.base_url, "server URL (with or without /v1)")->capture_default_str();
  app.add_option("--api-key", cfg.api_key, "sent as 'Authorization: Bearer KEY'");
  app.add_option("--model", cfg.model, "model name (default: the first id from GET /v1/models)");
  app.add_option("--endpoint", endpoint, "completions or chat (default: chat for multi-turn, else completions)")
      ->check(CLI::IsMember({"completions", "chat"}));
  app.add_option("--num-prompts", w.num_prompts, "requests (conversations for multi-turn)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--concurrency", cfg.concurrency, "requests in flight at most (default: all, up to 256)")
      ->check(CLI::Range(1, bench::kMaxConcurrency));
  app.add_option("--request-rate", rate, "Poisson arrivals per second, or inf (all at once)")->capture_default_str();
  app.add_option("--dataset", dataset, "workload")
      ->check(CLI::IsMember({"random", "shared-prefix", "multi-turn"}))
      ->capture_default_str();
  app.add_option("--input-len", w.input_len, "prompt words (about tokens) per user message")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--output-len", w.output_len, "max_tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--range-ratio", w.range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--prefix-len", w.prefix_len, "shared-prefix: words in the shared system prompt")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--turns", w.turns, "multi-turn: user messages per conversation")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--ignore-eos", cfg.ignore_eos, "send \"ignore_eos\": true so every request yields max_tokens");
  app.add_option("--slo-ttft-ms", cfg.slo.ttft_ms, "goodput: TTFT limit in ms")->check(CLI::Range(0.0, 1e9));
  app.add_option("--slo-tpot-ms", cfg.slo.tpot_ms, "goodput: TPOT limit in ms")->check(CLI::Range(0.0, 1e9));
  app.add_option("--timeout", cfg.timeout_s, "per-request timeout in seconds")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  app.add_option("--seed", w.seed, "workload and arrival seed")->capture_default_str();
  app.add_option("--json", json_path, "write config, metrics and per-request records to FILE");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  w.dataset = dataset == "shared-prefix" ? bench::Dataset::kSharedPrefix
              : dataset == "multi-turn"  ? bench::Dataset::kMultiTurn
                                         : bench::Dataset::kRandom;
  if (endpoint.empty()) endpoint = w.dataset == bench::Dataset::kMultiTurn ? "chat" : "completions";
  cfg.endpoint = endpoint == "chat" ? bench::Endpoint::kChat : bench::Endpoint::kCompletions;
  if (rate == "inf") {
    cfg.request_rate = std::numeric_limits<double>::infinity();
  } else {
    char* end = nullptr;
    cfg.request_rate = std::strtod(rate.c_str(), &end);
    if (end == rate.c_str() || *end != '\0' || !(cfg.request_rate > 0)) {
      std::fprintf(stderr, "pagoda bench serve: error: --request-rate must be a positive number or inf\n");
      return 2;
    }
  }
  cfg.progress = !no_progress;
  if (Status s = bench::validate(cfg); !s.is_ok()) {
    std::fprintf(stderr, "pagoda bench serve: error: %s\n", s.message().c_str());
    return 2;
  }
  auto result = bench::run_bench_serve(cfg);
  if (!result) {
    std::fprintf(stderr, "pagoda bench serve: error: %s\n", result.status().message().c_str());
    return 1;
  }
  const bench::BenchReport& r = result->report;
  std::printf("%s", bench::format_report(r, "Serving Benchmark Result").c_str());
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << bench::bench_json(cfg, *result).dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "pagoda bench serve: error: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (r.failed > 0)
    std::fprintf(stderr, "pagoda bench serve: %d of %d requests failed; first error: %s\n", r.failed, r.num_requests,
                 r.first_error.c_str());
  return r.failed > 0 ? 1 : 0;
}

}  // namespace pagoda::cli
