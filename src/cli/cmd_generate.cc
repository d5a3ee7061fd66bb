// `pagoda generate`: one prompt through the engine's step loop, streamed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/grammar_options.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"

namespace pagoda::cli {

namespace {

// A one-turn chat (optionally with a system message) through the model's
// template, as the server renders /v1/chat/completions.
Result<std::string> render_chat_prompt(const Tokenizer& tok, const std::string& system, const std::string& user) {
  const std::string& source = tok.chat_template();
  PAGODA_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source.empty() ? kChatMlTemplate : source));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  return tmpl.render(messages, true, std::string(tok.token_text(tok.bos_id())),
                     std::string(tok.token_text(tok.eos_id())));
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  CLI::App app("Generate text from a prompt", "generate");
  std::string model = default_model_path();
  std::string prompt;
  int32_t n_predict = 128;
  int32_t threads = 0;
  int32_t ctx = 0;
  double kv_mib = 256;
  bool ignore_eos = false;
  bool chat = false;
  std::string system;
  int64_t seed = -1;
  SamplingParams sp;
  sp.temperature = 0.8f;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("-p,--prompt", prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate")->check(CLI::Range(1, 1 << 24));
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  app.add_option("-c,--ctx-size", ctx, "context length (default: the model's)")->check(CLI::Range(0, 1 << 24));
  app.add_option("--kv-cache-mem", kv_mib, "KV cache memory in MiB")->check(CLI::Range(0.001, 1e7));
  std::string kv_type = "f32";
  add_kv_dtype_option(app, &kv_type);
  WeightOptions weights;
  add_weight_options(app, &weights);
  KvTierOptions tiers;
  add_kv_tier_options(app, &tiers);
  int32_t tp = 1, pp = 1;
  add_tp_option(app, &tp, &pp);
  app.add_option("--temp", sp.temperature, "temperature (0 = greedy)");
  app.add_option("--top-k", sp.top_k, "top-k (0 = off)");
  app.add_option("--top-p", sp.top_p, "top-p");
  app.add_option("--min-p", sp.min_p, "min-p");
  app.add_option("--repeat-penalty", sp.repetition_penalty, "repetition penalty");
  app.add_option("--presence-penalty", sp.presence_penalty, "presence penalty");
  app.add_option("--frequency-penalty", sp.frequency_penalty, "frequency penalty");
  app.add_option("-s,--seed", seed, "random seed (-1 = random)");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating after end-of-sequence");
  app.add_flag("--chat", chat,
               "the prompt is a user message: rendered with the model's chat template (ChatML when it has none), "
               "tokenized as the server does; prints only the reply");
  app.add_option("--system", system, "with --chat: a system message before the prompt");
  KvPolicyOptions kv_policy;
  add_kv_policy_options(app, &kv_policy);
  bool swa_full = false;
  app.add_flag("--swa-full", swa_full,
               "sliding-window models (gemma3, gpt-oss): keep the KV of every position in the sliding layers instead "
               "of freeing blocks past the window");
  SpecOptions spec_opts;
  add_spec_options(app, &spec_opts);
  GrammarOptions grammar_opts;
  add_grammar_options(app, &grammar_opts);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto grammar = grammar_from_options(grammar_opts);
  if (!grammar) return fail("generate", grammar.status().message());
  if (seed >= 0) sp.seed = static_cast<uint64_t>(seed);

  EngineConfig cfg;
  cfg.num_threads = threads;
  cfg.max_model_len = ctx;
  cfg.kv_cache_bytes = static_cast<int64_t>(kv_mib * 1024 * 1024);
  cfg.kv_cache_dtype = kv_dtype(kv_type);
  cfg.pack_cache_dir = weights.pack_cache;
  cfg.bf16_dot = weights.bf16_dot;
  apply_kv_tier_options(tiers, &cfg);
  TpSession tp_session;  // MPI ends after the engine
  auto comm = start_tensor_parallel(tp, pp);
  if (!comm) return fail("generate", comm.status().message());
  cfg.comm = *comm;
  cfg.pp = pp;
  cfg.swa_full = swa_full;
  cfg.sched.kv_policy = kv_policy_from_options(kv_policy);
  apply_spec_options(spec_opts, &cfg);
  auto engine = Engine::create(model, cfg);
  if (!engine) {
    std::fprintf(stderr, "pagoda generate: error: %s\n", engine.status().message().c_str());
    return 1;
  }
  if (cfg.comm && cfg.comm->rank() != 0) {  // a tensor-parallel worker: rank 0 prints and decides
    const Status st = (*engine)->run_tensor_parallel_worker();
    return st.is_ok() ? 0 : fail("generate", st.message());
  }
  Engine& e = **engine;
  RequestSpec spec;
  if (chat) {
    auto rendered = render_chat_prompt(e.tokenizer(), system, prompt);
    if (!rendered) return fail("generate", rendered.status().message());
    spec.prompt = e.tokenizer().encode(*rendered, false, true);
  } else {
    if (!system.empty()) return fail("generate", "--system needs --chat");
    spec.prompt = e.tokenizer().encode(prompt, true, false);
  }
  spec.max_tokens = n_predict;
  spec.sampling = sp;
  spec.ignore_eos = ignore_eos;
  spec.grammar = *grammar;
  auto id = e.add_request(std::move(spec));
  if (!id) {
    std::fprintf(stderr, "pagoda generate: error: %s\n", id.status().message().c_str());
    return 1;
  }
  if (!chat) std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  int64_t n_generated = 0;
  int32_t peak_blocks = 0;  // KV blocks held by the sequence (and not evictable), at most
  const auto t0 = std::chrono::steady_clock::now();
  double first_token_s = -1;
  while (e.has_unfinished()) {
    const auto outputs = e.step();
    peak_blocks = std::max(peak_blocks, e.kv_manager().num_blocks() - e.kv_manager().num_available_blocks());
    for (const auto& o : outputs) {
      if (first_token_s < 0 && !o.new_tokens.empty())
        first_token_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      n_generated += static_cast<int64_t>(o.new_tokens.size());
      std::fwrite(o.text.data(), 1, o.text.size(), stdout);
    }
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& st = e.stats();
  std::fprintf(stderr, "\nprefill: %lld tokens in %.3f s (%.2f tok/s)\n",
               static_cast<long long>(st.num_prompt_tokens_computed), st.prefill_seconds,
               st.prefill_seconds > 0 ? st.num_prompt_tokens_computed / st.prefill_seconds : 0.0);
  std::fprintf(stderr, "decode:  %lld tokens in %.3f s (%.2f tok/s)\n",
               static_cast<long long>(st.num_decode_tokens_computed), st.decode_seconds,
               st.decode_seconds > 0 ? st.num_decode_tokens_computed / st.decode_seconds : 0.0);
  std::fprintf(stderr, "total:   %lld tokens generated in %.3f s (%.2f tok/s)\n", static_cast<long long>(n_generated),
               total, total > 0 ? n_generated / total : 0.0);
  std::fprintf(stderr, "first token after %.3f s (%lld of %lld prompt tokens from the prefix cache)\n", first_token_s,
               static_cast<long long>(st.num_cached_prompt_tokens), static_cast<long long>(st.num_prompt_tokens));
  if (!cfg.kv_disk_dir.empty() || cfg.kv_host_tier_bytes > 0) {
    const KVTierStats ts = e.kv_tier_stats();
    std::fprintf(stderr,
                 "KV tiers: %lld blocks loaded (%lld from host memory, %lld from disk), %lld spilled, %lld damaged "
                 "files rejected, disk holds %lld blocks\n",
                 static_cast<long long>(ts.host_hits + ts.disk_hits), static_cast<long long>(ts.host_hits),
                 static_cast<long long>(ts.disk_hits), static_cast<long long>(ts.spills),
                 static_cast<long long>(ts.disk_corrupt), static_cast<long long>(ts.disk_blocks));
  }
  // With KV groups (sliding-window freeing) the pool counts pages of one group's layers.
  const int32_t groups = e.kv_manager().num_kv_groups();
  const double peak_mib = peak_blocks * cfg.block_size * e.kv_bytes_per_token() / groups / (1024.0 * 1024.0);
  const int64_t context = st.num_prompt_tokens + n_generated;
  std::fprintf(
      stderr,
      "KV cache: at most %d %s of %d tokens held (%.2f MiB = %.1f KiB per context token, %s, --kv-policy %s%s)\n",
      peak_blocks, groups > 1 ? "pages" : "blocks", cfg.block_size, peak_mib,
      context > 0 ? peak_mib * 1024.0 / static_cast<double>(context) : 0.0, kv_type.c_str(), kv_policy.policy.c_str(),
      groups > 1 ? ", sliding-window blocks freed" : "");
  if (cfg.spec_method != SpecMethod::kNone) {
    std::fprintf(stderr, "speculative (%s): %s\n", spec_method_name(cfg.spec_method), spec_summary(st).c_str());
    if (e.draft_model())
      std::fprintf(stderr, "draft passes on %d thread(s), %d of %d layers\n", e.draft_model()->num_threads(),
                   e.draft_model()->num_layers_run(), e.draft_model()->config().num_layers);
    if (!e.step_cost_model().empty())
      std::fprintf(stderr, "auto draft lengths planned with step times: %s\n",
                   step_cost_summary(e.step_cost_model()).c_str());
  }
  return 0;
}

}  // namespace pagoda::cli
