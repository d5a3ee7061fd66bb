// `pagoda perplexity`: llama.cpp-style perplexity of a text file. The file is
// tokenized (with BOS), cut into non-overlapping windows of --ctx-size tokens
// whose first token is set to BOS, and the second half of every window is
// scored (each position predicting the next token).
//
// With --kv-policy streaming (or --stream) the text instead runs as one
// sequence through the scheduler, as generation would (StreamingLLM's
// evaluation): a first chunk fills the cache, then one token per step, the
// policy evicting as it goes, and every position is scored.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/model_runner.h"
#include "gguf/gguf_file.h"
#include "kv/kv_cache_manager.h"
#include "model/llama_model.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

int fail(const std::string& msg) { return cli::fail("perplexity", msg); }

// -log softmax(row)[target].
double nll_of(const float* row, int32_t vocab_size, int32_t target) {
  double mx = row[0];
  for (int32_t v = 1; v < vocab_size; ++v) mx = std::max<double>(mx, row[v]);
  double sum = 0;
  for (int32_t v = 0; v < vocab_size; ++v) sum += std::exp(row[v] - mx);
  return mx + std::log(sum) - row[target];
}

struct StreamResult {
  double nll = 0;
  int64_t count = 0;
  int32_t peak_cache_tokens = 0;
  int32_t num_evicted = 0;
};

// The whole token stream as one sequence: the scheduler evicts by `sched`'s
// policy exactly as in generation; every position's logits are scored.
Result<StreamResult> stream_perplexity(std::unique_ptr<LlamaModel> lm, RunnerConfig rc, SchedulerConfig sched,
                                       const std::vector<int32_t>& tokens, bool quiet) {
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t bs = rc.block_size;
  const StreamingConfig& st = sched.streaming;
  // Sinks, a window, a step and a block of slack; everything for a full cache.
  const int64_t room = st.enabled ? (st.sink_blocks + 3) * int64_t{bs} + 2 * int64_t{st.window} : n + bs;
  rc.num_blocks = (room + bs - 1) / bs;
  KVCacheManager kv(static_cast<int32_t>(rc.num_blocks), bs);
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, ModelRunner::create(std::move(lm), rc));
  const int32_t vocab_size = runner->config().vocab_size;
  // The first chunk fills the cache (sinks and window); then token by token.
  const int32_t first_chunk = st.enabled ? st.sink_blocks * bs + st.window : 512;
  sched.max_num_batched_tokens = first_chunk;
  Scheduler scheduler(sched, kv);
  Sequence seq;
  seq.seq_id = SeqId{0};
  seq.tokens = tokens;
  seq.num_prompt_tokens = n;
  seq.max_total_tokens = n;
  scheduler.add(&seq);
  StreamResult r;
  while (seq.num_computed_tokens < n) {
    SchedulerOutput out = scheduler.schedule();
    if (out.scheduled.size() != 1) return internal_error("the stream was not scheduled");
    ScheduledSeq& s = out.scheduled[0];
    s.num_logits = s.num_new_tokens;  // every position
    const int32_t first = seq.num_computed_tokens;
    const std::span<const float> logits = runner->execute(out, kv);
    for (int32_t j = 0; j < s.num_new_tokens && first + j + 1 < n; ++j) {
      r.nll += nll_of(&logits[static_cast<size_t>(j) * vocab_size], vocab_size, tokens[first + j + 1]);
      ++r.count;
    }
    scheduler.on_step_done(out);
    r.peak_cache_tokens = std::max(r.peak_cache_tokens, seq.num_cache_tokens());
    if (st.enabled) scheduler.set_max_num_batched_tokens(1);
    if (!quiet && seq.num_computed_tokens / 1024 != first / 1024)
      std::fprintf(stderr, "[%d/%d] %.4f\n", seq.num_computed_tokens, n,
                   std::exp(r.nll / std::max<int64_t>(1, r.count)));
  }
  r.num_evicted = seq.num_evicted;
  return r;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  CLI::App app("Perplexity of a text file (llama.cpp method)", "perplexity");
  std::string model = default_model_path(), path;
  int32_t n_ctx = 0, max_chunks = 0, threads = 0;
  bool json = false;
  std::string kv_type = "f32";
  bool stream = false;
  KvPolicyOptions kv_policy;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("-f,--file", path, "text file")->required();
  app.add_option("-c,--ctx-size", n_ctx, "window size (default: the model's context)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--chunks", max_chunks, "score at most this many windows (0 = all)")->check(CLI::Range(0, 1 << 30));
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  add_kv_dtype_option(app, &kv_type);
  add_kv_policy_options(app, &kv_policy);
  app.add_flag("--stream", stream,
               "score the whole file as one sequence, every position (implied by --kv-policy streaming); "
               "with the full policy, the dense baseline");
  app.add_flag("--json", json, "print a JSON object");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  std::string text;
  if (!read_text_file(path, &text)) return fail("cannot read '" + path + "'");
  auto file = gguf::GGUFFile::open(model);
  if (!file) return fail(file.status().message());
  auto lm = LlamaModel::load(**file);
  if (!lm) return fail(lm.status().message());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return fail(tok.status().message());
  if (n_ctx == 0) n_ctx = (*lm)->config().train_context_len;
  if (n_ctx < 4) return fail("the window must be at least 4 tokens");

  const std::vector<int32_t> tokens = (*tok)->encode(text, true, false);
  if (stream || kv_policy.policy != "full") {
    if (tokens.size() < 2) return fail("the file has fewer than two tokens");
    RunnerConfig rc;
    rc.num_threads = threads;
    rc.kv_cache_dtype = kv_dtype(kv_type);
    SchedulerConfig sc;
    apply_kv_policy_options(kv_policy, rc.block_size, &sc);
    auto r = stream_perplexity(std::move(*lm), rc, sc, tokens, json);
    if (!r) return fail(r.status().message());
    const double ppl = std::exp(r->nll / r->count);
    if (json) {
      nlohmann::json j = {{"perplexity", ppl},
                          {"nll", r->nll / r->count},
                          {"n_scored", r->count},
                          {"n_tokens", tokens.size()},
                          {"mode", "stream"},
                          {"kv_policy", kv_policy.policy},
                          {"kv_sink_tokens", sc.streaming.enabled ? sc.streaming.sink_blocks * rc.block_size : 0},
                          {"kv_window", sc.streaming.enabled ? kv_policy.window : 0},
                          {"kv_cache_dtype", kv_type},
                          {"peak_cache_tokens", r->peak_cache_tokens},
                          {"evicted_tokens", r->num_evicted}};
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf(
          "perplexity: %.4f (mean NLL %.6f over %lld predictions, one stream of %zu tokens, --kv-policy %s, "
          "at most %d tokens cached, %d evicted)\n",
          ppl, r->nll / r->count, static_cast<long long>(r->count), tokens.size(), kv_policy.policy.c_str(),
          r->peak_cache_tokens, r->num_evicted);
    }
    return 0;
  }
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (max_chunks > 0) n_chunks = std::min<int64_t>(n_chunks, max_chunks);
  if (n_chunks == 0)
    return fail("the file has " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                std::to_string(n_ctx));

  // One sequence, run through the same ModelRunner as the engine: each
  // window is one scheduled slice whose last n_ctx - first logits are kept.
  RunnerConfig rc;
  rc.num_threads = threads;
  rc.kv_cache_dtype = kv_dtype(kv_type);
  rc.num_blocks = (n_ctx + rc.block_size - 1) / rc.block_size;
  KVCacheManager kv(static_cast<int32_t>(rc.num_blocks), rc.block_size);
  auto runner = ModelRunner::create(std::move(*lm), rc);
  if (!runner) return fail(runner.status().message());
  const ModelConfig& c = (*runner)->config();
  const int32_t first = n_ctx / 2;
  double nll = 0;
  int64_t count = 0;
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    Sequence seq;
    seq.seq_id = SeqId{ch};
    seq.tokens.assign(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
    if ((*tok)->bos_id() >= 0) seq.tokens[0] = (*tok)->bos_id();
    seq.num_prompt_tokens = n_ctx;
    if (!kv.allocate_slots(seq.seq_id, n_ctx)) return fail("internal: KV allocation failed");
    SchedulerOutput step;
    step.scheduled.push_back({&seq, n_ctx, n_ctx - first});
    step.num_batched_tokens = n_ctx;
    const std::span<const float> logits = (*runner)->execute(step, kv);
    kv.free(seq.seq_id);
    // Row r holds the logits at position first + r, predicting the token after it.
    for (int32_t r = 0; first + r + 1 < n_ctx; ++r) {
      nll += nll_of(&logits[static_cast<size_t>(r) * c.vocab_size], c.vocab_size, seq.tokens[first + r + 1]);
      ++count;
    }
    if (!json) std::fprintf(stderr, "[%lld] %.4f\n", static_cast<long long>(ch + 1), std::exp(nll / count));
  }
  const double ppl = std::exp(nll / count);
  if (json) {
    nlohmann::json j = {
        {"perplexity", ppl},    {"ppl", ppl},     {"nll", nll / count},        {"n_scored", count},
        {"n_chunks", n_chunks}, {"n_ctx", n_ctx}, {"n_tokens", tokens.size()}, {"kv_cache_dtype", kv_type}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("perplexity: %.4f (mean NLL %.6f over %lld predictions, %lld windows of %d)\n", ppl, nll / count,
                static_cast<long long>(count), static_cast<long long>(n_chunks), n_ctx);
  }
  return 0;
}

}  // namespace pagoda::cli
