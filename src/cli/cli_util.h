// Helpers shared by the subcommands: CLI11 parsing with clear errors, and
// the default model location.
#pragma once

#include <CLI/CLI.hpp>
#include <csignal>
#include <string>

#include "core/dtype.h"
#include "dist/comm.h"
#include "engine/engine.h"

namespace pagoda::cli {

// Parses argv; on error or --help prints and returns the exit code to use
// (0 for --help), otherwise returns -1 to continue.
int parse_or_exit(CLI::App& app, int argc, char** argv);

// Prints "pagoda <command>: error: <message>" to stderr; returns `code`.
int fail(const char* command, const std::string& message, int code = 1);

// A server's signals: blocks SIGINT and SIGTERM in this thread (and every
// thread started after it), to be taken with sigtimedwait by one waiting
// thread; ignores SIGPIPE. Returns the blocked set.
sigset_t block_shutdown_signals();

// Reads a whole file into *out; false if it cannot be opened.
bool read_text_file(const std::string& path, std::string* out);

// models/pagoda-small.gguf next to the binary's source tree or the cwd.
std::string default_model_path();

// --kv-cache-dtype f32|f16|q8|q4 (default f32) into *name; kv_dtype(name) maps it.
void add_kv_dtype_option(CLI::App& app, std::string* name);
DType kv_dtype(const std::string& name);

// How the weights are prepared at load: --pack-cache DIR (default
// $PAGODA_PACK_CACHE, else none) keeps the packed weights there so the next
// start maps them instead of packing; --bf16-dot runs F16/BF16 weights on
// the BF16 dot-product path (not exact).
struct WeightOptions {
  std::string pack_cache;
  bool bf16_dot = false;
};
void add_weight_options(CLI::App& app, WeightOptions* opts);

// Tiered KV below the prefix cache: --kv-host-size GiB (a host-memory
// tier), --kv-disk-dir DIR and --kv-disk-size GiB (a disk tier that
// survives restarts).
struct KvTierOptions {
  double host_gib = 0;
  std::string disk_dir;
  double disk_gib = 10;
};
void add_kv_tier_options(CLI::App& app, KvTierOptions* opts);
void apply_kv_tier_options(const KvTierOptions& opts, EngineConfig* cfg);

// --tp N: tensor parallelism over the ranks of `mpirun -np N pagoda ...`.
// start_tensor_parallel(N) returns null for N <= 1; otherwise initializes
// MPI and checks that the job has exactly N processes. TpSession finalizes
// MPI when it goes out of scope: declare it before the engine.
// --pp M: pipeline stages (layers split in M contiguous parts), with --tp
// N inside each: mpirun -np N*M.
void add_tp_option(CLI::App& app, int32_t* tp, int32_t* pp);
Result<dist::Comm*> start_tensor_parallel(int32_t tp, int32_t pp = 1);
struct TpSession {
  ~TpSession() { dist::Comm::finalize(); }
};

// --kv-policy full|streaming|snapkv|h2o, --kv-sinks S, --kv-window W,
// --kv-budget B: which tokens a sequence keeps in the KV cache
// (sched/kv_policy.h).
struct KvPolicyOptions {
  std::string policy = "full";
  int32_t sinks = 4;
  int32_t window = 0;  // 0: the policy's default (streaming 1024; snapkv 32, h2o 64, at most budget / 2)
  int32_t budget = 1024;
};
void add_kv_policy_options(CLI::App& app, KvPolicyOptions* opts);
// The policy of the flags, its window defaulted (CLI11 checked the name).
KvPolicy kv_policy_from_options(const KvPolicyOptions& opts);

// --spec none|ngram|retrieval, --num-spec-tokens K, --spec-datastore FILE:
// speculative decoding.
struct SpecOptions {
  std::string method = "none";
  std::string num_spec_tokens = "auto";  // or 1..64
  std::string datastore;
  std::string draft_model;
  std::string skip_layers;
  std::string lookahead = "1,5,2";  // W,N,G
  std::string medusa_heads;
};
void add_spec_options(CLI::App& app, SpecOptions* opts);
void apply_spec_options(const SpecOptions& opts, EngineConfig* cfg);
// One line for a summary: acceptance rate and mean accepted length.
std::string spec_summary(const EngineStats& st);
// The step times auto speculation plans with: "1 tok 0.41 ms, 2 tok ...".
std::string step_cost_summary(const StepCostModel& m);

}  // namespace pagoda::cli
