// `pagoda bench model` (llama-bench style pp/tg), `pagoda bench throughput`
// (vLLM's offline throughput benchmark) and `pagoda bench serve` (online, over
// HTTP; bench_serve_cmd.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/grammar_options.h"
#include "engine/engine.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace pagoda::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Token ids that are ordinary text (not control/special), for random prompts.
std::vector<int32_t> random_tokens(const Tokenizer& tok, int32_t n, std::mt19937_64& rng) {
  std::vector<int32_t> out;
  out.reserve(n);
  const int32_t v = tok.vocab_size();
  while (static_cast<int32_t>(out.size()) < n) {
    const auto id = static_cast<int32_t>(rng() % v);
    if (!tok.is_control(id) && !tok.is_eog(id)) out.push_back(id);
  }
  return out;
}

struct MeanStd {
  double mean = 0, stddev = 0;
};
MeanStd mean_std(const std::vector<double>& v) {
  MeanStd r;
  for (double x : v) r.mean += x;
  r.mean /= v.size();
  for (double x : v) r.stddev += (x - r.mean) * (x - r.mean);
  r.stddev = v.size() > 1 ? std::sqrt(r.stddev / (v.size() - 1)) : 0;
  return r;
}

// Runs every request in the engine to completion; returns seconds.
double drain(Engine& e) {
  const auto t0 = std::chrono::steady_clock::now();
  while (e.has_unfinished()) e.step();
  return seconds_since(t0);
}

int bench_model(int argc, char** argv) {
  CLI::App app("Prefill (pp) and decode (tg) speed, like llama-bench", "bench model");
  std::string model = default_model_path();
  int32_t n_prompt = 512, n_gen = 128, reps = 5, threads = 0, depth = 0;
  bool json = false;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens (0 = skip)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-n,--n-gen", n_gen, "generated tokens (0 = skip)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-r,--repetitions", reps, "repetitions")->check(CLI::Range(1, 1000));
  app.add_option("-d,--n-depth", depth,
                 "tokens already in the context before each test (rounded down to the KV block size)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--json", json, "print JSON (llama-bench field names)");
  std::string kv_type = "f32";
  add_kv_dtype_option(app, &kv_type);
  WeightOptions weights;
  add_weight_options(app, &weights);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  EngineConfig cfg;
  cfg.num_threads = threads;
  cfg.kv_cache_dtype = kv_dtype(kv_type);
  cfg.pack_cache_dir = weights.pack_cache;
  cfg.bf16_dot = weights.bf16_dot;
  cfg.sched.max_num_batched_tokens = std::max(n_prompt, 512);
  depth = depth / cfg.block_size * cfg.block_size;  // whole blocks: the prefix cache holds them exactly
  cfg.max_model_len = depth + std::max(n_prompt, n_gen) + 8;
  // The shape sizes the KV cache: read from the file, no engine (packing) needed.
  auto file = gguf::GGUFFile::open(model);
  auto shape = file ? model_config_from_gguf(**file) : Result<ModelConfig>(file.status());
  if (!shape) {
    std::fprintf(stderr, "pagoda bench model: error: %s\n", shape.status().message().c_str());
    return 1;
  }
  const ModelConfig mc = *shape;
  file->reset();
  RunnerConfig shape_rc;
  shape_rc.block_size = cfg.block_size;
  shape_rc.kv_cache_dtype = cfg.kv_cache_dtype;
  cfg.kv_cache_bytes =
      ModelRunner::bytes_per_block(mc, shape_rc) * ((cfg.max_model_len + cfg.block_size - 1) / cfg.block_size + 1);
  auto engine = Engine::create(model, cfg);
  if (!engine) {
    std::fprintf(stderr, "pagoda bench model: error: %s\n", engine.status().message().c_str());
    return 1;
  }
  Engine& e = **engine;
  std::mt19937_64 rng(1234);
  nlohmann::json results = nlohmann::json::array();
  auto run_test = [&](int32_t pp, int32_t tg) {
    std::vector<double> ts;
    for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
      RequestSpec spec;
      spec.sampling.temperature = 0;
      spec.ignore_eos = true;
      // Depth: an untimed request fills the context; the timed one repeats
      // it as a prefix (served from the prefix cache) and adds the test.
      std::vector<int32_t> ctx = random_tokens(e.tokenizer(), depth, rng);
      if (depth > 0) {
        spec.prompt = ctx;
        spec.max_tokens = 1;
        if (!e.add_request(spec).is_ok()) return false;
        drain(e);
      }
      const int64_t cached_before = e.stats().num_cached_prompt_tokens;
      spec.prompt = ctx;
      const auto add = random_tokens(e.tokenizer(), pp > 0 ? pp : 1, rng);
      spec.prompt.insert(spec.prompt.end(), add.begin(), add.end());
      spec.max_tokens = pp > 0 ? 1 : tg;
      if (!e.add_request(spec).is_ok()) return false;
      const double secs = drain(e);
      if (e.stats().num_cached_prompt_tokens - cached_before < depth) {
        std::fprintf(stderr, "pagoda bench model: error: the depth prefix was not served from the prefix cache\n");
        return false;
      }
      if (r >= 0) ts.push_back((pp > 0 ? pp : tg) / secs);
    }
    const MeanStd ms = mean_std(ts);
    nlohmann::json j = {{"model_filename", model},
                        {"model_type", mc.arch + " " + mc.name},
                        {"model_size", e.weight_bytes()},
                        {"n_threads", threads > 0 ? threads : default_num_threads()},
                        {"n_prompt", pp},
                        {"n_gen", tg},
                        {"n_depth", depth},
                        {"test", (pp > 0 ? "pp" + std::to_string(pp) : "tg" + std::to_string(tg)) +
                                     (depth > 0 ? " @ d" + std::to_string(depth) : "")},
                        {"avg_ts", ms.mean},
                        {"stddev_ts", ms.stddev},
                        {"samples_ts", ts}};
    results.push_back(j);
    if (!json)
      std::printf("| %-40s | %13s | %10.2f ± %.2f tok/s |\n", model.c_str(), j["test"].get<std::string>().c_str(),
                  ms.mean, ms.stddev);
    return true;
  };
  if (n_prompt > 0 && !run_test(n_prompt, 0)) return 1;
  if (n_gen > 0 && !run_test(0, n_gen)) return 1;
  if (json) std::printf("%s\n", results.dump(2).c_str());
  return 0;
}

int bench_throughput(int argc, char** argv) {
  CLI::App app("Offline throughput: all requests at once, like vLLM's benchmark_throughput", "bench throughput");
  std::string model = default_model_path();
  int32_t num_prompts = 64, input_len = 128, output_len = 128, max_seqs = 256, threads = 0, shared_prefix = 0;
  int32_t max_batched = 2048, block_size = 16;
  double kv_mib = 2048, range_ratio = 0;
  bool json = false, no_prefix_cache = false;
  std::string preempt = "recompute";
  uint64_t seed = 0;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("--num-prompts", num_prompts, "requests")->check(CLI::Range(1, 1 << 20));
  app.add_option("--input-len", input_len, "prompt tokens per request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--output-len", output_len, "generated tokens per request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--range-ratio", range_ratio, "random lengths in [len*(1-r), len*(1+r)]")->check(CLI::Range(0.0, 1.0));
  app.add_option("--shared-prefix-len", shared_prefix, "tokens every prompt shares before its own input")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-seqs", max_seqs, "running sequences at once")->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-batched-tokens", max_batched, "token budget per step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--block-size", block_size, "KV block size in tokens")->check(CLI::Range(1, 1024));
  app.add_option("--kv-cache-mem", kv_mib, "KV cache memory in MiB")->check(CLI::Range(0.001, 1e7));
  std::string kv_type = "f32";
  add_kv_dtype_option(app, &kv_type);
  WeightOptions weights;
  add_weight_options(app, &weights);
  KvPolicyOptions kv_policy;
  add_kv_policy_options(app, &kv_policy);
  app.add_option("--preemption", preempt, "recompute or swap")->check(CLI::IsMember({"recompute", "swap"}));
  app.add_flag("--no-prefix-cache", no_prefix_cache, "disable prefix caching");
  SpecOptions spec_opts;
  bool swa_full = false;
  app.add_flag("--swa-full", swa_full,
               "sliding-window models (gemma3, gpt-oss): keep the KV of every position in the sliding layers instead "
               "of freeing blocks past the window");
  add_spec_options(app, &spec_opts);
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  app.add_option("--seed", seed, "seed of the random prompts");
  app.add_flag("--json", json, "print one JSON object");
  GrammarOptions grammar_opts;  // every request constrained by the same grammar
  add_grammar_options(app, &grammar_opts, "--json-object");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto grammar = grammar_from_options(grammar_opts);
  if (!grammar) return fail("bench throughput", grammar.status().message());

  EngineConfig cfg;
  cfg.num_threads = threads;
  cfg.kv_cache_bytes = static_cast<int64_t>(kv_mib * 1024 * 1024);
  cfg.kv_cache_dtype = kv_dtype(kv_type);
  cfg.pack_cache_dir = weights.pack_cache;
  cfg.bf16_dot = weights.bf16_dot;
  cfg.swap_space_bytes = preempt == "swap" ? cfg.kv_cache_bytes : 0;
  cfg.block_size = block_size;
  cfg.sched.max_num_seqs = max_seqs;
  cfg.sched.max_num_batched_tokens = max_batched;
  cfg.sched.preempt_mode = preempt == "swap" ? PreemptMode::kSwap : PreemptMode::kRecompute;
  cfg.sched.kv_policy = kv_policy_from_options(kv_policy);
  cfg.swa_full = swa_full;
  cfg.enable_prefix_caching = !no_prefix_cache;
  apply_spec_options(spec_opts, &cfg);
  auto engine = Engine::create(model, cfg);
  if (!engine) {
    std::fprintf(stderr, "pagoda bench throughput: error: %s\n", engine.status().message().c_str());
    return 1;
  }
  Engine& e = **engine;
  std::mt19937_64 rng(seed);
  const auto prefix = random_tokens(e.tokenizer(), shared_prefix, rng);
  auto vary = [&](int32_t len) {
    if (range_ratio <= 0) return len;
    const int32_t lo = std::max<int32_t>(1, static_cast<int32_t>(len * (1 - range_ratio)));
    const int32_t hi = std::max<int32_t>(lo, static_cast<int32_t>(len * (1 + range_ratio)));
    return lo + static_cast<int32_t>(rng() % (hi - lo + 1));
  };
  int64_t total_in = 0, total_out = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < num_prompts; ++i) {
    RequestSpec spec;
    spec.prompt = prefix;
    const auto own = random_tokens(e.tokenizer(), vary(input_len), rng);
    spec.prompt.insert(spec.prompt.end(), own.begin(), own.end());
    spec.max_tokens = vary(output_len);
    spec.ignore_eos = true;
    spec.sampling.temperature = 0;
    spec.grammar = *grammar;
    total_in += static_cast<int64_t>(spec.prompt.size());
    total_out += spec.max_tokens;
    auto id = e.add_request(std::move(spec));
    if (!id) {
      std::fprintf(stderr, "pagoda bench throughput: error: %s\n", id.status().message().c_str());
      return 1;
    }
  }
  drain(e);
  const double elapsed = seconds_since(t0);
  const EngineStats& st = e.stats();
  nlohmann::json j = {
      {"elapsed_s", elapsed},
      {"num_requests", num_prompts},
      {"requests_per_s", num_prompts / elapsed},
      {"input_tokens_per_s", total_in / elapsed},
      {"output_tokens_per_s", st.num_generated_tokens / elapsed},
      {"total_tokens_per_s", (total_in + st.num_generated_tokens) / elapsed},
      {"total_input_tokens", total_in},
      {"total_output_tokens", st.num_generated_tokens},
      {"kv_waste", st.num_steps ? st.kv_waste_sum / st.num_steps : 0.0},
      {"kv_cache_dtype", kv_type},
      {"kv_bytes_per_token", e.kv_bytes_per_token()},
      {"kv_cache_tokens", static_cast<int64_t>(e.kv_manager().num_blocks()) * e.kv_manager().block_size()},
      {"max_running_seqs", st.max_running_seqs},
      {"kv_policy", kv_policy.policy},
      {"kv_evicted_tokens", e.scheduler().num_evicted_tokens()},
      {"prefix_cache_hit_rate", st.prefix_cache_hit_rate()},
      {"num_preemptions", e.scheduler().num_preemptions()},
      {"num_steps", st.num_steps},
      {"max_seqs", max_seqs},
      {"spec", spec_method_name(cfg.spec_method)},
      {"spec_acceptance_rate", st.spec_acceptance_rate()},
      {"spec_mean_accepted_len", st.spec_mean_accepted_len()},
      {"spec_draft_s", st.spec_draft_seconds},
      {"grammar_masks", st.num_grammar_masks},
      {"grammar_mask_s", st.grammar_mask_seconds},
      {"spec_verify_s", st.spec_verify_seconds},
      {"execute_s", st.execute_seconds},
      {"sample_s", st.sample_seconds},
      {"num_draft_tokens", st.num_draft_tokens},
      {"num_spec_verifications", st.num_spec_verify_steps},
      {"num_decode_tokens_computed", st.num_decode_tokens_computed},
  };
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("Throughput: %.2f requests/s, %.2f input tokens/s, %.2f output tokens/s\n",
                j["requests_per_s"].get<double>(), j["input_tokens_per_s"].get<double>(),
                j["output_tokens_per_s"].get<double>());
    std::printf("elapsed %.2f s, %lld steps, KV waste %.2f%%, preemptions %lld, at most %d sequences in a step\n",
                elapsed, static_cast<long long>(st.num_steps), 100 * j["kv_waste"].get<double>(),
                static_cast<long long>(e.scheduler().num_preemptions()), st.max_running_seqs);
    std::printf("KV cache: %s, %.0f bytes per token, %lld tokens\n", kv_type.c_str(), e.kv_bytes_per_token(),
                static_cast<long long>(j["kv_cache_tokens"].get<int64_t>()));
    if (cfg.spec_method != SpecMethod::kNone) std::printf("speculative: %s\n", spec_summary(st).c_str());
    if (st.num_grammar_masks > 0)
      std::printf("grammar: %lld token masks, %.3f s (%.1f us each, %.1f%% of the run)\n",
                  static_cast<long long>(st.num_grammar_masks), st.grammar_mask_seconds,
                  1e6 * st.grammar_mask_seconds / static_cast<double>(st.num_grammar_masks),
                  100 * st.grammar_mask_seconds / elapsed);
  }
  (void)total_out;
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(argc < 2 ? stderr : stdout, "%susage: pagoda bench <model|throughput|serve|mpi> [options]\n",
                 argc < 2 ? "pagoda bench: error: no benchmark given\n" : "");
    return argc < 2 ? 2 : 0;
  }
  const std::string which = argv[1];
  if (which == "model") return bench_model(argc - 1, argv + 1);
  if (which == "throughput") return bench_throughput(argc - 1, argv + 1);
  if (which == "serve") return bench_serve(argc - 1, argv + 1);
  if (which == "mpi") return bench_mpi(argc - 1, argv + 1);
  std::fprintf(stderr, "pagoda bench: error: unknown benchmark '%s' (model, throughput, serve, mpi)\n", which.c_str());
  return 2;
}

}  // namespace pagoda::cli
