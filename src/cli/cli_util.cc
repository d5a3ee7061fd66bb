#include "cli/cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace pagoda::cli {

int fail(const char* command, const std::string& message, int code) {
  std::fprintf(stderr, "pagoda %s: error: %s\n", command, message.c_str());
  return code;
}

bool read_text_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

int parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "pagoda %s: error: %s\nRun 'pagoda %s --help' for usage.\n", app.get_name().c_str(), e.what(),
                 app.get_name().c_str());
    return 2;
  }
  return -1;
}

std::string default_model_path() {
  namespace fs = std::filesystem;
  const char* rel = "models/pagoda-small.gguf";
  std::error_code ec;
  // Next to the executable's repository (build/pagoda -> ../models), then cwd.
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      if (fs::exists(dir / rel, ec)) return (dir / rel).string();
    }
  }
  return rel;
}

void add_kv_dtype_option(CLI::App& app, std::string* name) {
  app.add_option("--kv-cache-dtype", *name,
                 "KV cache element type: f32; f16 (half the memory); q8 (= q8_0, 8-bit with a scale per 32: 1/3.8 "
                 "of f32); q4 (= q4_0, 4-bit: 1/7 of f32)")
      ->check(CLI::IsMember({"f32", "f16", "q8", "q8_0", "q4", "q4_0"}))
      ->capture_default_str();
}

void add_weight_options(CLI::App& app, WeightOptions* opts) {
  if (const char* env = std::getenv("PAGODA_PACK_CACHE")) opts->pack_cache = env;
  app.add_option("--pack-cache", opts->pack_cache,
                 "directory for packed weight copies: the first start writes one per model file (as large as the "
                 "weights), later starts map it instead of repacking (default $PAGODA_PACK_CACHE, else off)");
  app.add_flag("--bf16-dot", opts->bf16_dot,
               "F16/BF16 weights: round weights and activations to BF16 and use the BF16 dot-product instruction "
               "(AVX-512 BF16; about 2x the F16 prefill rate; logits drift, see the README)");
}

sigset_t block_shutdown_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

void add_kv_tier_options(CLI::App& app, KvTierOptions* opts) {
  app.add_option("--kv-host-size", opts->host_gib,
                 "host-memory KV tier in GiB: blocks the prefix cache evicts are kept there (and move on to "
                 "--kv-disk-dir when it fills); a prompt with that prefix loads them back (default 0: none)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--kv-disk-dir", opts->disk_dir,
                 "disk KV tier: evicted prefix-cache blocks (and, at exit, the cached ones) are written there, "
                 "one file per block keyed by its tokens and the model file, and loaded back by later prompts, "
                 "also after a restart");
  app.add_option("--kv-disk-size", opts->disk_gib, "the disk KV tier's size in GiB (default 10)")
      ->check(CLI::Range(0.0, 1e6));
}

void apply_kv_tier_options(const KvTierOptions& opts, EngineConfig* cfg) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  cfg->kv_host_tier_bytes = static_cast<int64_t>(opts.host_gib * kGiB);
  cfg->kv_disk_dir = opts.disk_dir;
  cfg->kv_disk_bytes = static_cast<int64_t>(opts.disk_gib * kGiB);
}

void add_tp_option(CLI::App& app, int32_t* tp, int32_t* pp) {
  app.add_option("--tp", *tp,
                 "tensor parallelism over N MPI processes (mpirun -np N pagoda ...): each holds 1/N of the heads, "
                 "FFN and vocabulary; rank 0 prints/serves (default 1)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--pp", *pp,
                 "pipeline parallelism: M stages of contiguous layers, hidden states passed stage to stage in "
                 "micro-batches (with --tp N: mpirun -np N*M; default 1)")
      ->check(CLI::Range(1, 1024));
}

Result<dist::Comm*> start_tensor_parallel(int32_t tp, int32_t pp) {
  const int32_t np = tp * pp;
  if (np <= 1) return static_cast<dist::Comm*>(nullptr);
  const std::string flags = (tp > 1 ? "--tp " + std::to_string(tp) : std::string()) + (tp > 1 && pp > 1 ? " " : "") +
                            (pp > 1 ? "--pp " + std::to_string(pp) : std::string());
  if (!dist::Comm::launched_by_mpirun())
    return invalid_argument(flags + " runs under MPI: mpirun -np " + std::to_string(np) + " pagoda ... " + flags);
  PAGODA_ASSIGN_OR_RETURN(dist::Comm * comm, dist::Comm::world());
  if (comm->size() != np)
    return invalid_argument(flags + " needs " + std::to_string(np) + " MPI processes; this job has " +
                            std::to_string(comm->size()) + " (mpirun -np " + std::to_string(np) + ")");
  return comm;
}

DType kv_dtype(const std::string& name) {
  if (name == "f16") return DType::kF16;
  if (name == "q8" || name == "q8_0") return DType::kQ8_0;
  if (name == "q4" || name == "q4_0") return DType::kQ4_0;
  return DType::kF32;
}

void add_spec_options(CLI::App& app, SpecOptions* opts) {
  app.add_option("--spec", opts->method,
                 "speculative decoding (requests with n = 1, no beam search): none; ngram (prompt lookup: drafts "
                 "copied from the sequence itself); retrieval (drafts from a corpus datastore, --spec-datastore); "
                 "draft (a smaller model with the same vocabulary drafts, --draft-model); layer-skip (the model "
                 "drafts for itself with layers skipped: --skip-layers, or the set `pagoda spec tune-skip` stored "
                 "beside the model); lookahead (Jacobi iterations and an n-gram pool, verified as a tree: "
                 "--lookahead); medusa (extra decoding heads on the model's hidden state propose a tree: "
                 "--medusa-heads, or MODEL.medusa.gguf beside the model)")
      ->check(CLI::IsMember({"none", "ngram", "retrieval", "draft", "layer-skip", "lookahead", "medusa"}))
      ->capture_default_str();
  app.add_option("--skip-layers", opts->skip_layers,
                 "layers (0-based, e.g. 1,3) the --spec layer-skip draft skips; default: FILE.skip-layers beside "
                 "the model");
  app.add_option("--lookahead", opts->lookahead,
                 "--spec lookahead sizes W,N,G: a window of W guesses per level, n-grams of N tokens, G n-grams "
                 "verified per step (default 1,5,2); each step scores (N - 1) * (W + G) <= 64 drafts")
      ->check([](const std::string& s) {
        Result<LookaheadParams> p = parse_lookahead(s, 64);
        return p ? std::string() : p.status().message();
      })
      ->capture_default_str();
  app.add_option("--medusa-heads", opts->medusa_heads,
                 "Medusa heads (GGUF) for --spec medusa; default: MODEL.medusa.gguf beside the model");
  app.add_option("--draft-model", opts->draft_model,
                 "GGUF draft model for --spec draft (the target's vocabulary; its K/V shares the target's blocks)");
  app.add_option("--spec-datastore", opts->datastore,
                 "datastore file for --spec retrieval (pagoda spec build-datastore)");
  app.add_option("--num-spec-tokens", opts->num_spec_tokens,
                 "draft tokens verified per step: 1..64, or auto (per sequence and step, from its acceptance and "
                 "the batch size, up to 8; none once the batch is compute-bound)")
      ->check(CLI::IsMember({"auto"}) | CLI::Range(1, 64))
      ->capture_default_str();
}

void add_kv_policy_options(CLI::App& app, KvPolicyOptions* opts) {
  app.add_option("--kv-policy", opts->policy,
                 "which tokens a sequence keeps in the KV cache: full (all); streaming (StreamingLLM: the first "
                 "--kv-sinks tokens, rounded up to whole KV blocks, and the last --kv-window; positions stay in the "
                 "cache, so generation runs past the model's context in bounded memory); snapkv (SnapKV: a prompt "
                 "longer than --kv-budget is compressed once, per KV head, to the --kv-budget positions its last "
                 "--kv-window queries attend to most); h2o (H2O: each KV head keeps its last --kv-window tokens "
                 "and the --kv-budget minus those with the most accumulated attention, evicting a block's worth "
                 "whenever the cache reaches the budget plus a block)")
      ->check(CLI::IsMember({"full", "streaming", "snapkv", "h2o"}))
      ->capture_default_str();
  app.add_option("--kv-sinks", opts->sinks, "streaming: attention-sink tokens kept from the start (0 = none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--kv-window", opts->window,
                 "streaming: most recent tokens kept (default 1024); snapkv: the observation window (default 32); "
                 "h2o: recent tokens every head keeps (default 64); these two at most half the budget by default")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--kv-budget", opts->budget, "snapkv, h2o: tokens per KV head the cache keeps")
      ->check(CLI::Range(2, 1 << 24))
      ->capture_default_str();
}

KvPolicy kv_policy_from_options(const KvPolicyOptions& opts) {
  KvPolicy p;
  PAGODA_CHECK(parse_kv_policy_kind(opts.policy).has_value());
  p.kind = *parse_kv_policy_kind(opts.policy);
  p.sinks = opts.sinks;
  p.window = opts.window;
  p.budget = opts.budget;
  return with_default_window(p);
}

void apply_spec_options(const SpecOptions& opts, EngineConfig* cfg) {
  PAGODA_CHECK(parse_spec_method(opts.method, &cfg->spec_method));  // CLI11 checked the name
  cfg->num_spec_tokens = opts.num_spec_tokens == "auto" ? 0 : std::stoi(opts.num_spec_tokens);  // CLI11 checked it
  cfg->spec_datastore = opts.datastore;
  cfg->draft_model = opts.draft_model;
  cfg->skip_layers = opts.skip_layers;
  cfg->medusa_heads = opts.medusa_heads;
  Result<LookaheadParams> la = parse_lookahead(opts.lookahead, 64);
  PAGODA_CHECK(la);  // CLI11 checked it
  cfg->lookahead = la.value();
}

std::string step_cost_summary(const StepCostModel& m) {
  std::string s;
  for (const auto& [n, t] : m.points()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%d tok %.3g ms", s.empty() ? "" : ", ", n, t * 1e3);
    s += buf;
  }
  if (m.per_seq_key() > 0 || m.per_token_key() > 0) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "; past %d cached tokens, %.3g ns per key per sequence + %.3g ns per key per token",
                  m.context(), m.per_seq_key() * 1e9, m.per_token_key() * 1e9);
    s += buf;
  }
  return s;
}

std::string spec_summary(const EngineStats& st) {
  char buf[300];
  std::snprintf(buf, sizeof(buf),
                "%lld drafts verified in %lld steps, acceptance %.3f, mean accepted length %.2f; drafting %.1f ms, "
                "verifying steps %.1f ms",
                static_cast<long long>(st.num_draft_tokens), static_cast<long long>(st.num_spec_verify_steps),
                st.spec_acceptance_rate(), st.spec_mean_accepted_len(), st.spec_draft_seconds * 1e3,
                st.spec_verify_seconds * 1e3);
  return buf;
}

}  // namespace pagoda::cli
