// `pagoda perplexity`: llama.cpp-style perplexity of a text file. The file is
// tokenized (with BOS), cut into non-overlapping windows of --ctx-size tokens
// whose first token is set to BOS, and the second half of every window is
// scored (each position predicting the next token).
//
// With --kv-policy streaming (or --stream) the text instead runs as one
// sequence through the scheduler, as generation would (StreamingLLM's
// evaluation): a first chunk fills the cache, then one token per step, the
// policy evicting as it goes, and every position is scored. With
// --kv-policy snapkv or h2o every window's last quarter is decoded token by
// token and scored (SnapKV compresses the first three quarters as a prompt,
// H2O evicts as it reads), next to the same positions with the full cache
// and their top-1 agreement.
//
// --save-logits FILE keeps the log-probabilities of every scored position
// (a baseline, usually the F32 model); --kl-divergence FILE compares a
// model with such a baseline on the same text: mean KL(base || model), its
// 99th percentile and maximum, and how often the top token agrees (as
// llama.cpp's --kl-divergence).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

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

// Baseline log-probabilities for --save-logits / --kl-divergence: a header
// (magic, vocab size, window, windows, the tokens of every window), then
// float32 log-softmax rows, one per scored position in order.
constexpr char kLogitsMagic[8] = {'P', 'G', 'L', 'O', 'G', 'P', '0', '1'};

struct LogitsHeader {
  int32_t vocab_size = 0, n_ctx = 0;
  int64_t n_chunks = 0;
};

void log_softmax(const float* row, int32_t n, std::vector<float>* out) {
  out->resize(static_cast<size_t>(n));
  double mx = row[0];
  for (int32_t v = 1; v < n; ++v) mx = std::max<double>(mx, row[v]);
  double sum = 0;
  for (int32_t v = 0; v < n; ++v) sum += std::exp(row[v] - mx);
  const double lse = mx + std::log(sum);
  for (int32_t v = 0; v < n; ++v) (*out)[v] = static_cast<float>(row[v] - lse);
}

// KL(base || model) of one position, both as log-probabilities.
double kl_of(const float* base, const float* model, int32_t n) {
  double kl = 0;
  for (int32_t v = 0; v < n; ++v) {
    const double p = std::exp(static_cast<double>(base[v]));
    if (p > 0) kl += p * (static_cast<double>(base[v]) - model[v]);
  }
  return std::max(0.0, kl);
}

struct SequenceEval {
  double nll = 0;
  int64_t count = 0;
  int32_t peak_cache_tokens = 0;
  int32_t num_evicted = 0;
  std::vector<int32_t> top1;  // argmax at each scored position
};

// `tokens` as one sequence through a scheduler with `sched`'s policy, as in
// generation: the first prompt_len tokens are its prompt; the first step
// computes up to first_budget tokens, every later one up to then_budget,
// the policy compressing or evicting as it would. Positions >= score_from are scored (each
// predicting the next token).
Result<SequenceEval> run_sequence(ModelRunner& runner, SchedulerConfig sched, std::span<const int32_t> tokens,
                                  int32_t prompt_len, int32_t first_budget, int32_t then_budget, int32_t score_from,
                                  bool quiet) {
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t vocab_size = runner.config().vocab_size;
  KVCacheManager kv(runner.num_kv_blocks(), runner.block_size());
  sched.max_num_batched_tokens = first_budget;
  Scheduler scheduler(sched, kv);
  Sequence seq;
  seq.seq_id = SeqId{0};
  seq.tokens.assign(tokens.begin(), tokens.end());
  seq.num_prompt_tokens = prompt_len;
  seq.max_total_tokens = n;
  scheduler.add(&seq);
  SequenceEval r;
  while (seq.num_computed_tokens < n) {
    SchedulerOutput out = scheduler.schedule();
    if (out.scheduled.size() != 1) return internal_error("the sequence was not scheduled (KV cache too small?)");
    ScheduledSeq& s = out.scheduled[0];
    s.num_logits = s.num_new_tokens;  // every position
    const int32_t first = seq.num_computed_tokens;
    const std::span<const float> logits = runner.execute(out, kv);
    for (int32_t j = std::max(0, score_from - first); j < s.num_new_tokens && first + j + 1 < n; ++j) {
      const float* row = &logits[static_cast<size_t>(j) * vocab_size];
      r.nll += nll_of(row, vocab_size, tokens[first + j + 1]);
      r.top1.push_back(static_cast<int32_t>(std::max_element(row, row + vocab_size) - row));
      ++r.count;
    }
    scheduler.on_step_done(out);
    r.peak_cache_tokens = std::max(r.peak_cache_tokens, seq.num_cache_tokens());
    scheduler.set_max_num_batched_tokens(then_budget);
    if (!quiet && seq.num_computed_tokens / 1024 != first / 1024)
      std::fprintf(stderr, "[%d/%d] %.4f\n", seq.num_computed_tokens, n,
                   std::exp(r.nll / std::max<int64_t>(1, r.count)));
  }
  r.num_evicted = seq.num_evicted;
  return r;
}

Result<std::unique_ptr<ModelRunner>> make_runner(std::unique_ptr<LlamaModel> lm, RunnerConfig rc, int64_t tokens) {
  rc.num_blocks = (tokens + rc.block_size - 1) / rc.block_size;
  return ModelRunner::create(std::move(lm), rc);
}

// SnapKV's and H2O's quality on windows of n_ctx tokens (first token BOS),
// the last quarter scored token by token: SnapKV runs the first three
// quarters as a prompt it compresses; H2O reads the first `budget` tokens in
// one step, then one token per step, evicting as it goes. The same positions
// with the full cache give the baseline and the top-1 agreement.
int policy_perplexity(std::unique_ptr<LlamaModel> lm, const RunnerConfig& rc, const SchedulerConfig& sc,
                      std::vector<int32_t> tokens, int32_t n_ctx, int32_t max_chunks, bool json) {
  const int32_t scored_from = n_ctx - n_ctx / 4;
  const bool h2o = sc.kv_policy.h2o();
  const int32_t budget = sc.kv_policy.budget;
  const int32_t prompt_len = h2o ? n_ctx : scored_from;
  const int32_t first_chunk = h2o ? std::min(budget, scored_from) : scored_from;
  if (n_ctx < 8) return fail("the window must be at least 8 tokens");
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (max_chunks > 0) n_chunks = std::min<int64_t>(n_chunks, max_chunks);
  if (n_chunks == 0) return fail("the file has fewer tokens than one window of " + std::to_string(n_ctx));
  const int32_t bos = tokens[0];  // encode() put BOS first
  auto runner = make_runner(std::move(lm), rc, n_ctx + rc.block_size);
  if (!runner) return fail(runner.status().message());
  SchedulerConfig full;  // no policy
  double nll = 0, nll_full = 0;
  int64_t count = 0, agree = 0;
  int32_t peak = 0;
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    std::vector<int32_t> w(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
    w[0] = bos;
    auto a = run_sequence(**runner, sc, w, prompt_len, first_chunk, 1, scored_from - 1, true);
    if (!a) return fail(a.status().message());
    auto b = run_sequence(**runner, full, w, prompt_len, first_chunk, 1, scored_from - 1, true);
    if (!b) return fail(b.status().message());
    nll += a->nll;
    nll_full += b->nll;
    count += a->count;
    for (size_t i = 0; i < a->top1.size(); ++i) agree += a->top1[i] == b->top1[i];
    peak = std::max(peak, a->peak_cache_tokens);
  }
  const double ppl = std::exp(nll / count), ppl_full = std::exp(nll_full / count);
  const double agreement = static_cast<double>(agree) / count;
  if (json) {
    nlohmann::json j = {{"perplexity", ppl},
                        {"perplexity_full_cache", ppl_full},
                        {"top1_agreement", agreement},
                        {"n_scored", count},
                        {"n_chunks", n_chunks},
                        {"n_ctx", n_ctx},
                        {"scored_from", scored_from},
                        {"mode", "window-decode"},
                        {"kv_policy", h2o ? "h2o" : "snapkv"},
                        {"kv_budget", budget},
                        {"kv_window", sc.kv_policy.window},
                        {"kv_cache_dtype", std::string(dtype_name(rc.kv_cache_dtype))},
                        {"peak_cache_tokens", peak}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "perplexity: %.4f with %s (budget %d), %.4f with the full cache; top-1 agreement %.1f%% over %lld "
        "predictions (last quarter of %lld windows of %d)\n",
        ppl, h2o ? "H2O" : "SnapKV", budget, ppl_full, 100 * agreement, static_cast<long long>(count),
        static_cast<long long>(n_chunks), n_ctx);
  }
  return 0;
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
  WeightOptions weights;
  add_weight_options(app, &weights);
  add_kv_policy_options(app, &kv_policy);
  app.add_flag("--stream", stream,
               "score the whole file as one sequence, every position (implied by --kv-policy streaming); "
               "with the full policy, the dense baseline");
  app.add_flag("--json", json, "print a JSON object");
  std::string save_logits, kl_base;
  app.add_option("--save-logits", save_logits,
                 "write the log-probabilities of every scored position (a --kl-divergence baseline)");
  app.add_option("--kl-divergence", kl_base,
                 "compare with a --save-logits file of the same text: KL divergence and top-1 agreement");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!save_logits.empty() && !kl_base.empty()) return fail("--save-logits and --kl-divergence are exclusive");

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
  RunnerConfig rc;
  rc.num_threads = threads;
  rc.kv_cache_dtype = kv_dtype(kv_type);
  rc.pack_cache_dir = weights.pack_cache;
  rc.bf16_dot = weights.bf16_dot;
  SchedulerConfig sc;
  sc.kv_policy = kv_policy_from_options(kv_policy);
  const KvPolicy& st = sc.kv_policy;
  const ModelConfig& mc = (*lm)->config();
  if (Status s = validate_kv_policy(st, mc.sliding_window > 0 || mc.has_attn_sinks); !s.is_ok())
    return fail(s.message());
  rc.kv_scores = st.h2o();
  if ((!save_logits.empty() || !kl_base.empty()) && (stream || st.streaming() || st.snapkv() || st.h2o()))
    return fail("--save-logits and --kl-divergence score windows with the full cache (no --stream, no --kv-policy)");
  if (st.snapkv() || st.h2o()) return policy_perplexity(std::move(*lm), rc, sc, tokens, n_ctx, max_chunks, json);
  if (stream || st.streaming()) {
    if (tokens.size() < 2) return fail("the file has fewer than two tokens");
    const auto n = static_cast<int32_t>(tokens.size());
    // Sinks, two windows and slack for streaming; everything for a full cache.
    const int64_t room =
        st.streaming() ? (st.sink_blocks(rc.block_size) + 3) * int64_t{rc.block_size} + 2 * int64_t{st.window} : n + 1;
    auto runner = make_runner(std::move(*lm), rc, room);
    if (!runner) return fail(runner.status().message());
    // The first chunk fills the window, then one token per step (the full
    // cache may take 512 at a time: causal attention gives the same logits).
    const int32_t chunk = st.streaming() ? st.window : 512;
    auto r = run_sequence(**runner, sc, tokens, n, chunk, st.streaming() ? 1 : chunk, 0, json);
    if (!r) return fail(r.status().message());
    const double ppl = std::exp(r->nll / r->count);
    if (json) {
      nlohmann::json j = {{"perplexity", ppl},
                          {"nll", r->nll / r->count},
                          {"n_scored", r->count},
                          {"n_tokens", tokens.size()},
                          {"mode", "stream"},
                          {"kv_policy", kv_policy.policy},
                          {"kv_sink_tokens", st.streaming() ? st.sink_blocks(rc.block_size) * rc.block_size : 0},
                          {"kv_window", st.streaming() ? st.window : 0},
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
  auto runner = make_runner(std::move(*lm), rc, n_ctx);
  KVCacheManager kv((*runner)->num_kv_blocks(), rc.block_size);
  if (!runner) return fail(runner.status().message());
  const ModelConfig& c = (*runner)->config();
  const int32_t first = n_ctx / 2;
  double nll = 0;
  int64_t count = 0;
  // The windows' tokens as scored (BOS first): a baseline must match them.
  std::vector<int32_t> window_tokens(tokens.begin(), tokens.begin() + n_chunks * n_ctx);
  if ((*tok)->bos_id() >= 0)
    for (int64_t ch = 0; ch < n_chunks; ++ch) window_tokens[ch * n_ctx] = (*tok)->bos_id();
  std::ofstream save_out;
  std::ifstream base_in;
  if (!save_logits.empty()) {
    save_out.open(save_logits, std::ios::binary | std::ios::trunc);
    if (!save_out) return fail("cannot write '" + save_logits + "'");
    const LogitsHeader h{c.vocab_size, n_ctx, n_chunks};
    save_out.write(kLogitsMagic, sizeof(kLogitsMagic));
    save_out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    save_out.write(reinterpret_cast<const char*>(window_tokens.data()),
                   static_cast<std::streamsize>(window_tokens.size() * sizeof(int32_t)));
  }
  if (!kl_base.empty()) {
    base_in.open(kl_base, std::ios::binary);
    if (!base_in) return fail("cannot read '" + kl_base + "'");
    char magic[sizeof(kLogitsMagic)];
    LogitsHeader h;
    if (!base_in.read(magic, sizeof(magic)) || std::memcmp(magic, kLogitsMagic, sizeof(magic)) != 0 ||
        !base_in.read(reinterpret_cast<char*>(&h), sizeof(h)))
      return fail("'" + kl_base + "' is not a --save-logits file");
    if (h.vocab_size != c.vocab_size || h.n_ctx != n_ctx || h.n_chunks != n_chunks)
      return fail("'" + kl_base + "' was saved with vocabulary " + std::to_string(h.vocab_size) + ", window " +
                  std::to_string(h.n_ctx) + ", " + std::to_string(h.n_chunks) + " windows; this run has " +
                  std::to_string(c.vocab_size) + ", " + std::to_string(n_ctx) + ", " + std::to_string(n_chunks) +
                  " (same text, -c and --chunks needed)");
    std::vector<int32_t> base_tokens(window_tokens.size());
    if (!base_in.read(reinterpret_cast<char*>(base_tokens.data()),
                      static_cast<std::streamsize>(base_tokens.size() * sizeof(int32_t))) ||
        base_tokens != window_tokens)
      return fail("'" + kl_base + "' was saved for other tokens (another text or tokenizer)");
  }
  std::vector<float> logp, base_logp(static_cast<size_t>(c.vocab_size));
  std::vector<double> kls;
  double base_nll = 0;
  int64_t agree = 0;
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    Sequence seq;
    seq.seq_id = SeqId{ch};
    seq.tokens.assign(window_tokens.begin() + ch * n_ctx, window_tokens.begin() + (ch + 1) * n_ctx);
    seq.num_prompt_tokens = n_ctx;
    if (!kv.allocate_slots(seq.seq_id, n_ctx)) return fail("internal: KV allocation failed");
    SchedulerOutput step;
    step.scheduled.push_back({&seq, n_ctx, n_ctx - first});
    step.num_batched_tokens = n_ctx;
    const std::span<const float> logits = (*runner)->execute(step, kv);
    kv.free(seq.seq_id);
    // Row r holds the logits at position first + r, predicting the token after it.
    for (int32_t r = 0; first + r + 1 < n_ctx; ++r) {
      const float* row = &logits[static_cast<size_t>(r) * c.vocab_size];
      const int32_t next = seq.tokens[first + r + 1];
      nll += nll_of(row, c.vocab_size, next);
      ++count;
      if (save_out.is_open() || base_in.is_open()) log_softmax(row, c.vocab_size, &logp);
      if (save_out.is_open())
        save_out.write(reinterpret_cast<const char*>(logp.data()),
                       static_cast<std::streamsize>(logp.size() * sizeof(float)));
      if (base_in.is_open()) {
        if (!base_in.read(reinterpret_cast<char*>(base_logp.data()),
                          static_cast<std::streamsize>(base_logp.size() * sizeof(float))))
          return fail("'" + kl_base + "' is truncated");
        kls.push_back(kl_of(base_logp.data(), logp.data(), c.vocab_size));
        base_nll -= base_logp[next];
        agree += std::max_element(base_logp.begin(), base_logp.end()) - base_logp.begin() ==
                 std::max_element(logp.begin(), logp.end()) - logp.begin();
      }
    }
    if (!json) std::fprintf(stderr, "[%lld] %.4f\n", static_cast<long long>(ch + 1), std::exp(nll / count));
  }
  if (save_out.is_open() && !save_out.flush()) return fail("writing '" + save_logits + "' failed");
  const double ppl = std::exp(nll / count);
  nlohmann::json kl;
  if (base_in.is_open()) {
    std::vector<double> sorted = kls;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double k : kls) sum += k;
    kl = {
        {"kl_divergence", sum / count},
        {"kl_p99", sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(sorted.size())))]},
        {"kl_max", sorted.back()},
        {"top1_agreement", static_cast<double>(agree) / count},
        {"base_perplexity", std::exp(base_nll / count)}};
  }
  if (json) {
    nlohmann::json j = {
        {"perplexity", ppl},    {"ppl", ppl},     {"nll", nll / count},        {"n_scored", count},
        {"n_chunks", n_chunks}, {"n_ctx", n_ctx}, {"n_tokens", tokens.size()}, {"kv_cache_dtype", kv_type}};
    if (!kl.is_null()) j.update(kl);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("perplexity: %.4f (mean NLL %.6f over %lld predictions, %lld windows of %d)\n", ppl, nll / count,
                static_cast<long long>(count), static_cast<long long>(n_chunks), n_ctx);
    if (!kl.is_null())
      std::printf(
          "KL divergence from the baseline: mean %.6f, p99 %.6f, max %.6f; top-1 agreement %.2f%%; "
          "baseline perplexity %.4f\n",
          kl["kl_divergence"].get<double>(), kl["kl_p99"].get<double>(), kl["kl_max"].get<double>(),
          100 * kl["top1_agreement"].get<double>(), kl["base_perplexity"].get<double>());
  }
  return 0;
}

}  // namespace pagoda::cli
