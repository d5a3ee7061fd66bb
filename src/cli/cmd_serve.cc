// `pagoda serve`: the OpenAI-compatible HTTP server (src/server/) over the
// engine thread. SIGINT/SIGTERM stop accepting, abort what runs, exit 0.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/async_engine.h"
#include "server/server.h"

namespace pagoda::cli {
namespace {

// A server's prefix cache keeps conversations for later turns, so its KV
// cache should be large; its pages cost memory only once used (KVStorage
// maps them lazily). A quarter of physical memory, 256 MiB to 8 GiB.
double default_kv_cache_mib() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double quarter = pages > 0 && page > 0 ? static_cast<double>(pages) * page / 4 / (1 << 20) : 256.0;
  return std::clamp(quarter, 256.0, 8192.0);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app("OpenAI-compatible HTTP server", "serve");
  std::string model = default_model_path();
  server::ServerConfig sc;
  double kv_mib = 256, swap_mib = 0;
  int32_t block_size = 16, threads = 0, ctx = 0, max_queue = 256;
  std::string policy = "fcfs", preemption = "recompute", template_file;
  bool no_prefix_cache = false;
  SchedulerConfig sched;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("--host", sc.host, "address to listen on")->capture_default_str();
  app.add_option("--port", sc.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--api-key", sc.api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  app.add_option("--served-model-name", sc.served_model_name, "model id in the API (default: the file's stem)");
  app.add_option("--chat-template", template_file, "Jinja chat template file (overrides the model's)");
  app.add_option("--kv-cache-mem", kv_mib,
                 "KV cache memory in MiB (default: a quarter of physical memory, 256 MiB to 8 GiB; "
                 "pages are touched only as blocks are first used)")
      ->check(CLI::Range(0.001, 1e7));
  std::string kv_type = "f32";
  add_kv_dtype_option(app, &kv_type);
  WeightOptions weights;
  add_weight_options(app, &weights);
  KvTierOptions tiers;
  add_kv_tier_options(app, &tiers);
  int32_t tp = 1, pp = 1;
  add_tp_option(app, &tp, &pp);
  KvPolicyOptions kv_policy;
  add_kv_policy_options(app, &kv_policy);
  SpecOptions spec_opts;
  add_spec_options(app, &spec_opts);
  app.add_option("--swap-space", swap_mib, "host swap space for preempted KV in MiB")->check(CLI::Range(0.0, 1e7));
  app.add_option("--block-size", block_size, "tokens per KV block")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--max-num-seqs", sched.max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", sched.max_num_batched_tokens, "token budget per engine step")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--policy", policy, "scheduling policy")
      ->check(CLI::IsMember({"fcfs", "priority", "sjf", "lpm", "slo"}))
      ->capture_default_str();
  app.add_option("--preemption", preemption, "preemption mode")
      ->check(CLI::IsMember({"recompute", "swap"}))
      ->capture_default_str();
  app.add_flag("--no-prefix-cache", no_prefix_cache, "disable prefix caching");
  bool swa_full = false;
  app.add_flag("--swa-full", swa_full,
               "sliding-window models (gemma3, gpt-oss): keep the KV of every position in the sliding layers instead "
               "of freeing blocks past the window");
  app.add_option("--slo-ttft-ms", sc.slo_ttft_ms, "time-to-first-token target of requests that set none (0: none)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--slo-tpot-ms", sc.slo_tpot_ms, "time-per-output-token target of requests that set none (0: none)")
      ->check(CLI::Range(0.0, 1e9));
  bool slo_reject = false;
  app.add_flag("--slo-reject", slo_reject,
               "answer 429 at once to a request whose predicted TTFT already exceeds its target");
  app.add_option("-t,--threads", threads, "compute threads (default: physical cores)")->check(CLI::Range(0, 1024));
  app.add_option("-c,--ctx-size", ctx, "context length (default: the model's)")->check(CLI::Range(0, 1 << 24));
  app.add_option("--max-queue", max_queue, "requests waiting before 429 (0: unbounded)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--http-threads", sc.num_http_threads, "requests handled at once (slow clients hold none)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--http-request-timeout-s", sc.request_timeout_s,
                 "seconds to receive a whole request (head + body), and to write a reply")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--http-idle-timeout-s", sc.idle_timeout_s, "seconds a keep-alive connection may sit idle")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--max-connections", sc.max_connections, "open connections in total (more get 503)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-connections-per-client", sc.max_connections_per_client,
                 "open connections per client address (more get 429)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--shutdown-grace-s", sc.shutdown_grace_s,
                 "on SIGTERM/SIGINT, seconds running replies get before their connections are cut")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_flag("--metrics-require-key", sc.metrics_require_key, "/metrics needs the API key too");
  app.add_flag("--log-requests", sc.log_requests, "print one line per HTTP request");
  app.add_option("--role", sc.role,
                 "prefill/decode disaggregation behind `pagoda router`: prefill computes prompts and hands out their "
                 "KV blocks (/internal/prefill); decode fetches them from the prefill instance the router names and "
                 "decodes (a 1 GiB host KV tier unless --kv-host-size/--kv-disk-dir set one)")
      ->check(CLI::IsMember({"prefill", "decode"}));
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (sc.served_model_name.empty()) sc.served_model_name = std::filesystem::path(model).stem().string();
  if (!template_file.empty() && !read_text_file(template_file, &sc.chat_template)) {
    std::fprintf(stderr, "pagoda serve: error: cannot read --chat-template %s\n", template_file.c_str());
    return 1;
  }
  if (!template_file.empty() && sc.chat_template.empty()) {
    std::fprintf(stderr, "pagoda serve: error: --chat-template %s is empty\n", template_file.c_str());
    return 1;
  }
  sched.policy = policy == "priority" ? SchedPolicy::kPriority
                 : policy == "sjf"    ? SchedPolicy::kSjf
                 : policy == "lpm"    ? SchedPolicy::kLpm
                 : policy == "slo"    ? SchedPolicy::kSlo
                                      : SchedPolicy::kFcfs;
  sched.preempt_mode = preemption == "swap" ? PreemptMode::kSwap : PreemptMode::kRecompute;

  // Signals go to one waiting thread; every thread started below inherits the mask.
  const sigset_t sigs = block_shutdown_signals();
  // Request bodies of several MB (and their parsed copies) must not ratchet
  // the resident size up: glibc raises its mmap threshold after each large
  // free, and a thread arena's top is never trimmed by malloc_trim. A fixed
  // threshold keeps blocks of 4 MiB and more in their own mappings (returned
  // on free) and the trim threshold at its 128 KiB default.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);

  EngineConfig cfg;
  cfg.num_threads = threads;
  cfg.max_model_len = ctx;
  if (!app.count("--kv-cache-mem")) kv_mib = default_kv_cache_mib();
  cfg.kv_cache_bytes = static_cast<int64_t>(kv_mib * 1024 * 1024);
  cfg.swap_space_bytes = static_cast<int64_t>(swap_mib * 1024 * 1024);
  cfg.kv_cache_dtype = kv_dtype(kv_type);
  cfg.pack_cache_dir = weights.pack_cache;
  cfg.bf16_dot = weights.bf16_dot;
  apply_kv_tier_options(tiers, &cfg);
  cfg.kv_export = sc.role == "prefill";
  if (sc.role == "decode" && cfg.kv_host_tier_bytes == 0 && cfg.kv_disk_dir.empty())
    cfg.kv_host_tier_bytes = int64_t{1} << 30;
  TpSession tp_session;  // MPI ends after the engine
  auto comm = start_tensor_parallel(tp, pp);
  if (!comm) return fail("serve", comm.status().message());
  cfg.comm = *comm;
  cfg.pp = pp;
  apply_spec_options(spec_opts, &cfg);
  cfg.block_size = block_size;
  cfg.sched = sched;
  cfg.sched.kv_policy = kv_policy_from_options(kv_policy);
  cfg.swa_full = swa_full;
  cfg.enable_prefix_caching = !no_prefix_cache;
  cfg.slo_reject = slo_reject;
  auto engine = Engine::create(model, cfg);
  if (!engine) {
    std::fprintf(stderr, "pagoda serve: error: %s\n", engine.status().message().c_str());
    return 1;
  }
  if (cfg.comm && cfg.comm->rank() != 0) {  // a tensor-parallel worker: rank 0 prints and decides
    const Status st = (*engine)->run_tensor_parallel_worker();
    return st.is_ok() ? 0 : fail("serve", st.message());
  }
  AsyncEngine ae(std::move(engine).value(), max_queue);
  auto srv = server::Server::create(ae, sc);
  if (!srv) {
    std::fprintf(stderr, "pagoda serve: error: %s\n", srv.status().message().c_str());
    return 1;
  }
  server::Server& server = *srv.value();
  if (!server.warning().empty()) std::fprintf(stderr, "pagoda serve: warning: %s\n", server.warning().c_str());
  auto port = server.bind();
  if (!port) {
    std::fprintf(stderr, "pagoda serve: error: %s\n", port.status().message().c_str());
    return 1;
  }
  std::fprintf(stderr, "pagoda serve: model '%s' (context %d, KV cache %.0f MiB) listening on http://%s:%d\n",
               sc.served_model_name.c_str(), ae.max_model_len(), kv_mib, sc.host.c_str(), port.value());
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&sigs, nullptr, &tick);
      if (sig != SIGINT && sig != SIGTERM) continue;
      std::fprintf(stderr, "pagoda serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      server.begin_shutdown();
      ae.shutdown();  // aborts running requests: open streams end now
      server.stop();
      return;
    }
  });
  const bool ok = server.listen();
  done = true;
  waiter.join();
  ae.shutdown();
  return ok ? 0 : 1;
}

}  // namespace pagoda::cli
