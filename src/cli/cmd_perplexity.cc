// `pagoda perplexity`: llama.cpp-style perplexity of a text file. The file is
// tokenized (with BOS), cut into non-overlapping windows of --ctx-size tokens
// whose first token is set to BOS, and the second half of every window is
// scored (each position predicting the next token).
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

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  CLI::App app("Perplexity of a text file (llama.cpp method)", "perplexity");
  std::string model = default_model_path(), path;
  int32_t n_ctx = 0, max_chunks = 0, threads = 0;
  bool json = false;
  std::string kv_type = "f32";
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("-f,--file", path, "text file")->required();
  app.add_option("-c,--ctx-size", n_ctx, "window size (default: the model's context)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--chunks", max_chunks, "score at most this many windows (0 = all)")->check(CLI::Range(0, 1 << 30));
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  add_kv_dtype_option(app, &kv_type);
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
      const float* row = &logits[static_cast<size_t>(r) * c.vocab_size];
      double mx = row[0];
      for (int32_t v = 1; v < c.vocab_size; ++v) mx = std::max<double>(mx, row[v]);
      double sum = 0;
      for (int32_t v = 0; v < c.vocab_size; ++v) sum += std::exp(row[v] - mx);
      const int32_t target = seq.tokens[first + r + 1];
      nll += mx + std::log(sum) - row[target];
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
