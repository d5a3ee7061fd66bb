// `pagoda spec build-datastore`: tokenizes a text corpus with a model's
// tokenizer and writes the suffix-array datastore that `--spec retrieval`
// proposes drafts from. `pagoda spec tune-skip`: searches the layers
// `--spec layer-skip` skips and stores them beside the model. `pagoda spec
// dump-hidden`: the model's final hidden states over a text, the training
// data of Medusa heads (tools/train/train_medusa.py).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/prompt_logits.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "spec/datastore.h"
#include "spec/layer_skip.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

int fail(const std::string& msg) { return cli::fail("spec build-datastore", msg); }

// What every tool here starts from: a text, and the model's file, tokenizer
// and shape.
struct ModelAndText {
  std::string text;
  std::unique_ptr<gguf::GGUFFile> file;
  std::unique_ptr<Tokenizer> tok;
  ModelConfig config;
};

Result<ModelAndText> open_model_and_text(const std::string& model, const std::string& path) {
  ModelAndText m;
  if (!read_text_file(path, &m.text)) return invalid_argument("cannot read '" + path + "'");
  PAGODA_ASSIGN_OR_RETURN(m.file, gguf::GGUFFile::open(model));
  PAGODA_ASSIGN_OR_RETURN(m.tok, Tokenizer::from_gguf(*m.file));
  PAGODA_ASSIGN_OR_RETURN(m.config, model_config_from_gguf(*m.file));
  return m;
}

int build_datastore(int argc, char** argv) {
  CLI::App app("Build a retrieval datastore (suffix array over a tokenized corpus) for --spec retrieval",
               "spec build-datastore");
  std::string model = default_model_path(), path, out;
  app.add_option("-m,--model", model, "GGUF model whose tokenizer is used")->capture_default_str();
  app.add_option("-f,--file", path, "corpus text file")->required();
  app.add_option("-o,--output", out, "datastore file to write")->required();
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto m = open_model_and_text(model, path);  // ids are checked against the model's vocabulary at load
  if (!m) return fail(m.status().message());
  auto store = Datastore::build(m->tok->encode(m->text, false, false), m->config.vocab_size);
  if (!store) return fail(store.status().message());
  if (Status st = (*store)->save(out); !st.is_ok()) return fail(st.message());
  std::fprintf(stderr, "datastore: %lld tokens -> %s\n", static_cast<long long>((*store)->num_tokens()), out.c_str());
  return 0;
}

// The greedy token at every position of `tokens` under the runner's current
// skip set.
Result<std::vector<int32_t>> argmax_tokens(ModelRunner& runner, std::span<const int32_t> tokens) {
  PAGODA_ASSIGN_OR_RETURN(std::vector<float> logits, prompt_logits(runner, tokens));
  const auto vocab = static_cast<size_t>(runner.config().vocab_size);
  std::vector<int32_t> out(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* row = logits.data() + t * vocab;
    out[t] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
  return out;
}

int tune_skip(int argc, char** argv) {
  CLI::App app(
      "Search the layers --spec layer-skip skips: greedily adds the layer whose skipping most raises the estimated "
      "batch-1 speed-up (greedy agreement with the full model on the calibration text, measured step times)",
      "spec tune-skip");
  std::string model = default_model_path(), path, out;
  int32_t max_tokens = 1024, threads = 0;
  app.add_option("-m,--model", model, "GGUF model")->capture_default_str();
  app.add_option("-f,--file", path, "calibration text")->required();
  app.add_option("-o,--output", out, "where to store the set (default: MODEL.skip-layers, found automatically)");
  app.add_option("--max-tokens", max_tokens, "calibration tokens used (at most the model's context)")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (0: physical cores)")->check(CLI::Range(0, 1024));
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto fail_here = [](const std::string& msg) { return cli::fail("spec tune-skip", msg); };
  if (out.empty()) out = skip_layers_path(model);
  auto m = open_model_and_text(model, path);
  if (!m) return fail_here(m.status().message());
  const ModelConfig* config = &m->config;
  const int32_t num_layers = config->num_layers;
  if (num_layers < 2) return fail_here("the model has one layer: nothing to skip");
  std::vector<int32_t> tokens = m->tok->encode(m->text, true, false);
  tokens.resize(std::min<size_t>(tokens.size(), std::min(max_tokens, config->train_context_len)));
  if (tokens.size() < 16) return fail_here("the calibration text has fewer than 16 tokens");
  auto lr = make_logits_runner(model, std::max<int32_t>(static_cast<int32_t>(tokens.size()), 128), threads);
  if (!lr) return fail_here(lr.status().message());
  ModelRunner& runner = *lr->runner;
  auto full = argmax_tokens(runner, tokens);
  if (!full) return fail_here(full.status().message());
  const std::vector<int32_t> sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const StepCostModel target(runner.profile_step_times(sizes, 32));
  const double step = target.seconds(1);
  // The speed-up each candidate's line says what agreement it would take.
  constexpr double kWorthwhile = 1.2;
  std::fprintf(stderr, "tune-skip: %zu calibration tokens, %d layers, one-token step %.3f ms\n", tokens.size(),
               num_layers, step * 1e3);

  // Greedy: each round adds the layer whose skipping gives the best
  // estimate; the best set seen wins. Stops after two rounds that did not
  // beat it (or when one layer is left).
  std::vector<int32_t> skip, best;
  SkipEstimate best_est;
  double best_agreement = 0, best_ratio = 0;
  for (int stale = 0; stale < 2 && static_cast<int32_t>(skip.size()) + 1 < num_layers;) {
    std::vector<int32_t> round_best;
    SkipEstimate round_est;
    double round_agreement = 0, round_ratio = 0;
    for (int32_t l = 0; l < num_layers; ++l) {
      if (std::find(skip.begin(), skip.end(), l) != skip.end()) continue;
      std::vector<int32_t> cand = skip;
      cand.push_back(l);
      std::sort(cand.begin(), cand.end());
      std::vector<uint8_t> mask(static_cast<size_t>(num_layers), 0);
      for (int32_t c : cand) mask[static_cast<size_t>(c)] = 1;
      runner.set_skip_layers(mask);
      auto got = argmax_tokens(runner, tokens);
      if (!got) return fail_here(got.status().message());
      int64_t same = 0;
      for (size_t t = 0; t < tokens.size(); ++t) same += (*got)[t] == (*full)[t];
      const double agreement = static_cast<double>(same) / static_cast<double>(tokens.size());
      const auto draft_times = runner.profile_step_times(std::span<const int32_t>(sizes.data(), 1), 32);
      runner.set_skip_layers({});
      const double ratio = draft_times.empty() ? 1.0 : draft_times[0].second / step;
      const SkipEstimate est = estimate_skip_speedup(agreement, ratio, target, 8);
      const double needed = agreement_for_speedup(kWorthwhile, ratio, target, 8);
      char need[64];
      if (needed > 1.0) {
        std::snprintf(need, sizeof(need), "no agreement reaches %.1fx", kWorthwhile);
      } else {
        std::snprintf(need, sizeof(need), "%.1fx needs agreement %.3f", kWorthwhile, needed);
      }
      std::fprintf(stderr, "  skip %-12s agreement %.3f  draft cost %.2f  estimated speed-up %.2fx (k=%d); %s\n",
                   format_skip_layers(cand).c_str(), agreement, ratio, est.speedup, est.num_drafts, need);
      if (round_best.empty() || est.speedup > round_est.speedup) {
        round_best = cand;
        round_est = est;
        round_agreement = agreement;
        round_ratio = ratio;
      }
    }
    skip = round_best;
    if (round_est.speedup > best_est.speedup * 1.01) {
      best = skip;
      best_est = round_est;
      best_agreement = round_agreement;
      best_ratio = round_ratio;
      stale = 0;
    } else {
      ++stale;
    }
  }
  skip = best;
  if (best_est.speedup < 1.0)
    std::fprintf(stderr,
                 "tune-skip: warning: no skip set is estimated to speed decoding up (best %.2fx): the model is "
                 "too small for verification to be nearly free, or too shallow; storing the best one, which "
                 "`--num-spec-tokens auto` will rarely draft with\n",
                 best_est.speedup);
  char comment[256];
  std::snprintf(comment, sizeof(comment),
                "pagoda spec tune-skip on %zu tokens of %s: agreement %.3f, draft cost %.2f of a step,\n"
                "estimated batch-1 speed-up %.2fx with %d drafts",
                tokens.size(), path.c_str(), best_agreement, best_ratio, best_est.speedup, best_est.num_drafts);
  if (Status st = save_skip_layers(out, skip, comment); !st.is_ok()) return fail_here(st.message());
  std::fprintf(stderr, "tune-skip: skip %s (estimated %.2fx) -> %s\n", format_skip_layers(skip).c_str(),
               best_est.speedup, out.c_str());
  return 0;
}

// File layout (little-endian): "PGMH", u32 version 1, i32 hidden, i32 vocab,
// i32 window, i32 windows; the output matrix transposed, [hidden][vocab]
// f32 (the logits of each unit vector); then per window its token ids
// [window] i32 (the first is BOS) and the final-normed hidden state of every
// position, [window][hidden] f32.
int dump_hidden(int argc, char** argv) {
  CLI::App app("Write a model's final hidden states over a text: training data for Medusa heads", "spec dump-hidden");
  std::string model = default_model_path(), path, out;
  int32_t max_tokens = 200000, threads = 0;
  app.add_option("-m,--model", model, "GGUF model")->capture_default_str();
  app.add_option("-f,--file", path, "text")->required();
  app.add_option("-o,--output", out, "file to write")->required();
  app.add_option("--max-tokens", max_tokens, "text tokens used")->check(CLI::Range(16, 1 << 26))->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (0: physical cores)")->check(CLI::Range(0, 1024));
  bool special = false;
  app.add_flag("--special", special, "control tokens written in the text (e.g. <|im_start|>) are those tokens");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto fail_here = [](const std::string& msg) { return cli::fail("spec dump-hidden", msg); };
  auto m = open_model_and_text(model, path);
  if (!m) return fail_here(m.status().message());
  const ModelConfig* config = &m->config;
  const Tokenizer* tok = m->tok.get();
  const int32_t window = std::min(config->train_context_len, 256), H = config->hidden_size, V = config->vocab_size;
  if (tok->bos_id() < 0) return fail_here("the model has no BOS token");
  std::vector<int32_t> tokens = tok->encode(m->text, false, special);
  tokens.resize(std::min<size_t>(tokens.size(), static_cast<size_t>(max_tokens)));
  const auto windows = static_cast<int32_t>(tokens.size() / static_cast<size_t>(window - 1));
  if (windows == 0) return fail_here("the text has fewer tokens than one window");
  auto lr = make_logits_runner(model, window, threads);
  if (!lr) return fail_here(lr.status().message());
  ModelRunner& runner = *lr->runner;
  std::ofstream f(out, std::ios::binary);
  auto put = [&](const void* p, size_t n) { f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); };
  const int32_t header[] = {1, H, V, window, windows};
  put("PGMH", 4);
  put(header, sizeof(header));
  std::vector<float> eye(static_cast<size_t>(H) * H, 0.0f), out_t(static_cast<size_t>(H) * V);
  for (int32_t i = 0; i < H; ++i) eye[static_cast<size_t>(i) * H + i] = 1.0f;
  runner.model().project_output(eye.data(), H, out_t.data(), runner.pool());
  put(out_t.data(), out_t.size() * sizeof(float));
  std::vector<int32_t> ids(static_cast<size_t>(window));
  for (int32_t w = 0; w < windows; ++w) {
    ids[0] = tok->bos_id();
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(w) * (window - 1), window - 1, ids.begin() + 1);
    auto logits = prompt_logits(runner, ids);
    if (!logits) return fail_here(logits.status().message());
    put(ids.data(), ids.size() * sizeof(int32_t));
    for (int32_t t = 0; t < window; ++t) put(runner.model().output_hidden(t), static_cast<size_t>(H) * sizeof(float));
  }
  f.close();
  if (!f) return fail_here("cannot write '" + out + "'");
  std::fprintf(stderr, "dump-hidden: %d windows of %d tokens, hidden %d -> %s\n", windows, window, H, out.c_str());
  return 0;
}

}  // namespace

int cmd_spec(int argc, char** argv) {
  const std::string which = argc >= 2 ? argv[1] : "";
  if (which == "build-datastore") return build_datastore(argc - 1, argv + 1);
  if (which == "tune-skip") return tune_skip(argc - 1, argv + 1);
  if (which == "dump-hidden") return dump_hidden(argc - 1, argv + 1);
  std::fprintf(stderr,
               "pagoda spec: error: %s\nusage: pagoda spec build-datastore -m MODEL -f TEXT -o FILE\n"
               "       pagoda spec tune-skip -m MODEL -f TEXT [-o FILE]\n"
               "       pagoda spec dump-hidden -m MODEL -f TEXT -o FILE\n",
               which.empty() ? "no tool given" : ("unknown tool '" + which + "'").c_str());
  return 2;
}

}  // namespace pagoda::cli
