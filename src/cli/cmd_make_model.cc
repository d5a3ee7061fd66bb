// `pagoda make-model`: write a random-weight GGUF model.
#include <CLI/CLI.hpp>
#include <chrono>
#include <climits>
#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "testing/make_model.h"

namespace pagoda::cli {
namespace {

int fail(const std::string& message, int code) { return cli::fail("make-model", message, code); }

int exit_code(const Status& st) { return st.code() == StatusCode::kInvalidArgument ? 2 : 1; }

}  // namespace

int cmd_make_model(int argc, char** argv) {
  std::string presets;
  for (const auto& n : model_preset_names()) {
    if (!presets.empty()) presets += ", ";
    presets += n;
  }

  CLI::App app{"Write a random-weight GGUF model of a real shape (for tests and benchmarks).", "pagoda make-model"};
  std::string preset, dtype_name = "f32", out, vocab_from, arch, name;
  uint64_t seed = 42;
  bool tied = false;
  int threads = 0;
  int64_t num_layers = 0, hidden_size = 0, num_heads = 0, num_kv_heads = 0, ffn_size = 0, vocab_size = 0, n_ctx = 0;
  double rope_base = 0;
  app.add_option("--preset", preset, "model shape: " + presets)->required();
  app.add_option("--dtype", dtype_name,
                 "weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q3_k q2_k iq4_nl iq4_xs")
      ->capture_default_str();
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--vocab-from", vocab_from,
                 "copy the tokenizer of this GGUF file (sets vocab_size); default: a built-in byte-level BPE");
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  std::string archs;
  for (const auto& a : supported_archs()) archs += (archs.empty() ? "" : ", ") + a;
  app.add_option("--arch", arch, "architecture instead of the preset's: " + archs);
  app.add_option("--name", name, "general.name (default: pagoda-random-<preset>)");
  app.add_flag("--tied", tied, "tied embeddings: no output.weight");
  app.add_option("--threads", threads, "worker threads (default: physical cores)");
  auto* g = app.add_option_group("shape overrides");
  g->add_option("--n-layer", num_layers, "number of layers");
  g->add_option("--n-embd", hidden_size, "embedding width");
  g->add_option("--n-head", num_heads, "attention heads");
  g->add_option("--n-head-kv", num_kv_heads, "key/value heads");
  g->add_option("--n-ff", ffn_size, "feed-forward width");
  g->add_option("--n-vocab", vocab_size, "vocabulary size (built-in vocabulary only)");
  g->add_option("--ctx", n_ctx, "context length");
  g->add_option("--rope-base", rope_base, "RoPE frequency base");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "pagoda make-model: error: %s\nRun 'pagoda make-model --help' for the options.\n", e.what());
    return 2;
  }

  auto config = model_preset(preset);
  if (!config.is_ok()) return fail(config.status().message(), 2);
  MakeModelOptions opts;
  opts.config = config.value();
  if (!arch.empty()) {
    Status st = set_model_arch(&opts.config, arch);
    if (!st.is_ok()) return fail(st.message(), 2);
  }
  auto dtype = make_model_dtype(dtype_name);
  if (!dtype.is_ok()) return fail(dtype.status().message(), 2);
  opts.dtype = dtype.value();
  const std::pair<const char*, int64_t*> overrides[] = {
      {"--n-layer", &num_layers}, {"--n-embd", &hidden_size}, {"--n-head", &num_heads}, {"--n-head-kv", &num_kv_heads},
      {"--n-ff", &ffn_size},      {"--n-vocab", &vocab_size}, {"--ctx", &n_ctx}};
  int32_t* fields[] = {&opts.config.num_layers,       &opts.config.hidden_size, &opts.config.num_heads,
                       &opts.config.num_kv_heads,     &opts.config.ffn_size,    &opts.config.vocab_size,
                       &opts.config.train_context_len};
  for (size_t k = 0; k < std::size(overrides); ++k) {
    if (!app.count(overrides[k].first)) continue;
    const int64_t v = *overrides[k].second;
    if (v < 1 || v > INT32_MAX) return fail(std::string(overrides[k].first) + " must be a positive 32-bit count", 2);
    *fields[k] = static_cast<int32_t>(v);
  }
  if (app.count("--n-vocab") && !vocab_from.empty()) {
    return fail("--n-vocab and --vocab-from conflict: the vocabulary file sets the size", 2);
  }
  if (app.count("--rope-base")) opts.config.rope_freq_base = rope_base;
  opts.seed = seed;
  opts.tied_embeddings = tied;
  opts.vocab_from = vocab_from;
  opts.name = name.empty() ? "pagoda-random-" + preset : name;
  opts.num_threads = threads;

  const auto start = std::chrono::steady_clock::now();
  auto plan = make_model(opts, out);
  if (!plan.is_ok()) return fail(plan.status().message(), exit_code(plan.status()));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& note : plan->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::printf("wrote %s: %s, %lld layers, %.2fM params, %s, %.1f MiB of weights in %.2f s\n", out.c_str(),
              opts.config.arch.c_str(), static_cast<long long>(opts.config.num_layers), plan->num_params / 1e6,
              std::string(dtype_name).c_str(), plan->num_bytes / 1048576.0, secs);
  return 0;
}

}  // namespace pagoda::cli
