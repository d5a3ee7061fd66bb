// Speculative decoding with a draft model (spec/draft_model.h) through the
// engine, on the bundled target and its draft (same vocabulary, trained on
// the same corpus, so drafts are often right and often wrong):
//  - greedy outputs are token for token those of speculation off, alone and
//    in batches mixing chunked prefill, prefix-cache hits, preemption by
//    recompute and by swap, n > 1 requests and fixed or auto draft lengths,
//    with the KV invariants checked after every step and no block leaked;
//  - sampled outputs keep the target's distribution: the joint distribution
//    of the first 3 tokens over 20,000 requests (2,000 under a sanitizer;
//    temperature 1 and top-p 0.9, logit_bias leaving 6 tokens) matches the
//    exact one computed from the target's logits, by a chi-square test;
//  - a draft model with another vocabulary, or none, is a clear error.
// The same for self-speculation (layer skip: the target with layers 2 and 3
// skipped drafts for itself), for lookahead decoding (a tree of drafts from
// the Jacobi window and the n-gram pool, verified with tree attention: the
// accepted path's K/V rows move into place) and for Medusa (a tree from the
// bundled heads' top candidates).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <random>

#include "../build_kind.h"
#include "../chi_square.h"
#include "engine/engine.h"
#include "engine/prompt_logits.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

const std::string kModels = std::string(PAGODA_SOURCE_DIR) + "/models/";
const std::string kTarget = kModels + "pagoda-small.gguf";
const std::string kDraft = kModels + "pagoda-small-draft.gguf";

// Layer-skip cases skip the target's layers 2 and 3 (of 5).
constexpr const char* kSkip = "2,3";
// Lookahead cases: a window of 4 columns (a branchier tree than the default).
constexpr LookaheadParams kWideLookahead{.window = 4, .ngram = 3, .candidates = 4};

struct DraftCase {
  const char* name;
  int32_t budget;
  int32_t kv_blocks;  // 0: plenty
  PreemptMode mode;
  int32_t num_spec_tokens;  // 0: auto, with verification and drafting made free
  SpecMethod method = SpecMethod::kDraft;
};

ModelConfig config_of(const std::string& path) {
  auto file = gguf::GGUFFile::open(path);
  EXPECT_TRUE(file.is_ok());
  auto model = LlamaModel::load(**file);
  EXPECT_TRUE(model.is_ok());
  return (*model)->config();
}

// K + V bytes of one block of the target and its draft together.
int64_t pair_block_bytes(int32_t block_size, SpecMethod method) {
  const ModelConfig t = config_of(kTarget);
  if (method == SpecMethod::kLookahead || method == SpecMethod::kMedusa)  // no draft K/V
    return static_cast<int64_t>(KVStorage::bytes_per_block(t.num_layers, block_size, t.num_kv_heads, t.head_dim));
  const ModelConfig d = method == SpecMethod::kDraft ? config_of(kDraft) : t;
  const int32_t draft_layers = method == SpecMethod::kDraft ? d.num_layers : t.num_layers - 2;
  return static_cast<int64_t>(KVStorage::bytes_per_block(t.num_layers, block_size, t.num_kv_heads, t.head_dim) +
                              KVStorage::bytes_per_block(draft_layers, block_size, d.num_kv_heads, d.head_dim));
}

std::unique_ptr<Engine> engine(const DraftCase& c, bool spec) {
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.block_size = 4;
  cfg.sched.max_num_batched_tokens = c.budget;
  cfg.sched.max_num_seqs = 8;
  cfg.sched.preempt_mode = c.mode;
  const int64_t block_bytes = pair_block_bytes(4, c.method);
  // The same number of blocks with and without the draft: the same
  // preemptions are possible in both runs.
  cfg.kv_cache_bytes = c.kv_blocks > 0 ? block_bytes * c.kv_blocks : 64 << 20;
  cfg.swap_space_bytes = block_bytes * 256;
  if (spec) {
    cfg.spec_method = c.method;
    cfg.draft_model = kDraft;
    cfg.skip_layers = kSkip;
    cfg.num_spec_tokens = c.num_spec_tokens;
    cfg.lookahead = kWideLookahead;
  }
  auto e = Engine::create(kTarget, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (spec && c.num_spec_tokens == 0) {
    // Verification and drafting both free (not timed: a slow sanitizer
    // build must plan the same drafts).
    (*e)->set_step_cost_model(StepCostModel({{1, 1e-3}, {4096, 1e-3}}));
    (*e)->set_draft_cost_model(StepCostModel({{1, 0.0}, {4096, 0.0}}));
  }
  return std::move(e).value();
}

// Prompts: text-like ones from the target's own greedy continuations (so the
// draft, trained on the same corpus, agrees often), random ones (it agrees
// rarely), a shared stem for prefix hits, and two n = 2 requests sampled
// with a seed (parallel sampling, not speculated: its outputs must not move).
std::vector<RequestSpec> prompts(const Engine& e) {
  std::mt19937 rng(17);
  const int32_t vocab = e.model_config().vocab_size;
  const std::vector<int32_t> stem =
      e.tokenizer().encode("And the LORD said unto Moses, Go in unto Pharaoh", true, false);
  std::vector<RequestSpec> specs;
  for (int r = 0; r < 10; ++r) {
    RequestSpec s;
    if (r % 3 == 0) {
      s.prompt = stem;
    } else if (r % 3 == 1) {
      s.prompt = e.tokenizer().encode("A fool and his money are soon", true, false);
    }
    for (int i = 0; i < 1 + static_cast<int>(rng() % 6); ++i) s.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    s.max_tokens = 8 + static_cast<int32_t>(rng() % 40);
    s.sampling.temperature = 0;
    s.ignore_eos = true;
    if (r == 4 || r == 7) {
      s.n = 2;
      s.sampling.temperature = 0.8f;
      s.sampling.seed = 100 + r;
    }
    specs.push_back(s);
  }
  return specs;
}

std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> run(Engine& e, const std::vector<RequestSpec>& specs) {
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> got;
  size_t next = 0;
  for (int step = 0; step < 20000 && (next < specs.size() || e.has_unfinished()); ++step) {
    if (step % 3 == 0)
      for (int k = 0; k < 2 && next < specs.size(); ++k, ++next) {
        auto id = e.add_request(specs[next], RequestId{static_cast<int64_t>(next)});
        EXPECT_TRUE(id.is_ok()) << id.status().message();
      }
    for (const RequestOutput& o : e.step()) {
      auto& v = got[{o.id.value, o.index}];
      v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    const Status inv = e.kv_manager().check_invariants();
    EXPECT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.message();
    if (!inv.is_ok()) break;
  }
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_EQ(e.kv_manager().num_available_blocks(), e.kv_manager().num_blocks()) << "leaked blocks";
  EXPECT_EQ(e.kv_manager().num_free_host_blocks(), e.kv_manager().num_host_blocks());
  return got;
}

class DraftModelGreedy : public ::testing::TestWithParam<DraftCase> {};

TEST_P(DraftModelGreedy, OutputsEqualSpeculationOff) {
  const DraftCase& c = GetParam();
  auto off = engine(c, false);
  auto on = engine(c, true);
  const auto specs = prompts(*off);
  const auto want = run(*off, specs);
  const auto got = run(*on, specs);
  ASSERT_EQ(want.size(), specs.size() + 2);  // two requests with n = 2
  for (const auto& [key, tokens] : want) {
    ASSERT_EQ(tokens.size(), static_cast<size_t>(specs[key.first].max_tokens)) << "request " << key.first;
    EXPECT_EQ(got.at(key), tokens) << "request " << key.first << " choice " << key.second;
  }
  const EngineStats& st = on->stats();
  EXPECT_GT(st.num_accepted_draft_tokens, 0) << "no draft was ever accepted: the test exercises nothing";
  EXPECT_LT(st.num_accepted_draft_tokens, st.num_draft_tokens) << "no draft was ever rejected";
  EXPECT_GT(st.spec_draft_seconds, 0.0);
  if (c.kv_blocks > 0) {
    EXPECT_GT(on->scheduler().num_preemptions(), 0) << "the case never preempted";
  }
  if (c.budget >= 64) {
    EXPECT_LT(st.num_steps, off->stats().num_steps) << "speculation saved no step";
  }
  std::printf("%s: %lld drafts, acceptance %.2f, mean accepted length %.2f, steps %lld vs %lld\n", c.name,
              static_cast<long long>(st.num_draft_tokens), st.spec_acceptance_rate(), st.spec_mean_accepted_len(),
              static_cast<long long>(st.num_steps), static_cast<long long>(off->stats().num_steps));
}

INSTANTIATE_TEST_SUITE_P(
    Batches, DraftModelGreedy,
    ::testing::Values(DraftCase{"roomy", 256, 0, PreemptMode::kRecompute, 4},
                      DraftCase{"chunked_prefill", 7, 0, PreemptMode::kRecompute, 3},
                      DraftCase{"preempt_recompute", 32, 40, PreemptMode::kRecompute, 5},
                      DraftCase{"preempt_swap", 32, 40, PreemptMode::kSwap, 2},
                      DraftCase{"auto_free", 256, 0, PreemptMode::kRecompute, 0},
                      DraftCase{"auto_free_preempt", 32, 40, PreemptMode::kSwap, 0},
                      DraftCase{"skip_roomy", 256, 0, PreemptMode::kRecompute, 4, SpecMethod::kLayerSkip},
                      DraftCase{"skip_chunked_prefill", 7, 0, PreemptMode::kRecompute, 3, SpecMethod::kLayerSkip},
                      DraftCase{"skip_preempt_recompute", 32, 40, PreemptMode::kRecompute, 5, SpecMethod::kLayerSkip},
                      DraftCase{"skip_preempt_swap", 32, 40, PreemptMode::kSwap, 2, SpecMethod::kLayerSkip},
                      DraftCase{"skip_auto_free", 256, 0, PreemptMode::kRecompute, 0, SpecMethod::kLayerSkip},
                      // Lookahead (4,3,4): trees of up to 16 nodes.
                      DraftCase{"lookahead_roomy", 256, 0, PreemptMode::kRecompute, 16, SpecMethod::kLookahead},
                      DraftCase{"lookahead_chunked_prefill", 7, 0, PreemptMode::kRecompute, 5, SpecMethod::kLookahead},
                      DraftCase{"lookahead_preempt_recompute", 32, 40, PreemptMode::kRecompute, 0,
                                SpecMethod::kLookahead},
                      DraftCase{"lookahead_preempt_swap", 32, 40, PreemptMode::kSwap, 9, SpecMethod::kLookahead},
                      DraftCase{"lookahead_cut_tree", 256, 0, PreemptMode::kRecompute, 5, SpecMethod::kLookahead},
                      // Medusa: the bundled heads (models/pagoda-small.medusa.gguf).
                      DraftCase{"medusa_roomy", 256, 0, PreemptMode::kRecompute, 16, SpecMethod::kMedusa},
                      DraftCase{"medusa_chunked_prefill", 7, 0, PreemptMode::kRecompute, 5, SpecMethod::kMedusa},
                      DraftCase{"medusa_preempt_recompute", 32, 40, PreemptMode::kRecompute, 0, SpecMethod::kMedusa},
                      DraftCase{"medusa_preempt_swap", 32, 40, PreemptMode::kSwap, 9, SpecMethod::kMedusa}),
    [](const ::testing::TestParamInfo<DraftCase>& i) { return std::string(i.param.name); });

// The first three sampled tokens of `method`'s runs against the exact joint
// distribution, for each top_p. With `use_grammar` the six tokens are
// allowed by a grammar instead of logit_bias (structured output): the
// verifier then masks each row while the draft proposes from its own,
// unconstrained distribution.
void check_first_three_tokens(SpecMethod method, std::span<const float> top_ps, bool use_grammar = false) {
  std::vector<int32_t> prompt = {1, 412, 97, 1051};
  // logit_bias bans all but six tokens (in both models' processing: the
  // draft's sampler uses the request's parameters), so 6^3 joint outcomes.
  auto probe = make_logits_runner(kTarget, 64, 1);
  ASSERT_TRUE(probe.is_ok()) << probe.status().message();
  const int32_t vocab = probe->runner->config().vocab_size;
  std::vector<float> first_logits;
  {
    auto l = prompt_logits(*probe->runner, prompt);
    ASSERT_TRUE(l.is_ok());
    first_logits.assign(l->end() - vocab, l->end());
  }
  std::vector<int32_t> allowed(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) allowed[i] = i;
  std::sort(allowed.begin(), allowed.end(), [&](int32_t a, int32_t b) { return first_logits[a] > first_logits[b]; });
  allowed.resize(6);
  // Lookahead drafts from the context: give it the six tokens in a pattern,
  // so its n-grams are sometimes right and sometimes wrong.
  if (method == SpecMethod::kLookahead)
    for (int rep = 0; rep < 2; ++rep)
      for (size_t i = 0; i < allowed.size(); ++i) prompt.push_back(allowed[(i * (rep + 1)) % allowed.size()]);
  // The grammar variant: four of the six tokens' texts. Tokens that spell a
  // prefix of one of them are allowed too, so the exact distribution below
  // walks the grammar's masks instead of the six tokens.
  std::shared_ptr<const grammar::Grammar> g;
  std::unique_ptr<grammar::TokenVocab> gvocab;
  if (use_grammar) {
    auto tok = Engine::create(kTarget, EngineConfig{});
    ASSERT_TRUE(tok.is_ok());
    gvocab = make_grammar_vocab((*tok)->tokenizer());
    std::string gbnf = "root ::= (";
    for (size_t i = 0; i < allowed.size(); ++i)
      gbnf += (i ? " | " : "") + grammar::gbnf_literal(gvocab->piece(allowed[i]));
    gbnf += "){4}\n";
    auto compiled = grammar::compile_gbnf(gbnf);
    ASSERT_TRUE(compiled.is_ok()) << compiled.status().message();
    g = *compiled;
  }
  for (const float top_p : top_ps) {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_p = top_p;
    if (!use_grammar) {
      for (int32_t t = 0; t < vocab; ++t)
        if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) sp.logit_bias.push_back({t, -INFINITY});
    }
    // The exact joint distribution without speculation, from the target:
    // over the six tokens, or over every path the grammar's masks allow.
    Sampler ref(sp, vocab);
    auto probs_after = [&](const std::vector<int32_t>& output, const grammar::Matcher* m) {
      std::vector<int32_t> ctx = prompt;
      ctx.insert(ctx.end(), output.begin(), output.end());
      auto l = prompt_logits(*probe->runner, ctx);
      EXPECT_TRUE(l.is_ok());
      std::vector<float> row(l->end() - vocab, l->end());
      if (m) {
        grammar::TokenMask mask;
        m->fill_mask(*gvocab, &mask);
        for (int32_t t = 0; t < vocab; ++t)
          if (t >= gvocab->size() || !grammar::mask_has(mask, t)) row[static_cast<size_t>(t)] = -INFINITY;
      }
      std::vector<float> p;
      ref.probabilities(row.data(), prompt, output, p);
      return p;
    };
    // Outcomes are the first three tokens; a grammar that ends sooner (a
    // token spelling two words) ends the choice there: padded with `vocab`.
    const int64_t base = vocab + 1;
    auto key = [&](std::vector<int32_t> t) {
      t.resize(3, vocab);
      return (int64_t{t[0]} * base + t[1]) * base + t[2];
    };
    std::map<int64_t, double> probs;
    std::function<void(std::vector<int32_t>, double, const grammar::Matcher*)> walk =
        [&](std::vector<int32_t> out, double p, const grammar::Matcher* m) {
          if (out.size() == 3 || (m && m->is_finished())) {
            probs[key(out)] += p;
            return;
          }
          const std::vector<float> next = probs_after(out, m);
          for (int32_t t = 0; t < vocab; ++t) {
            if (next[static_cast<size_t>(t)] <= 0) continue;
            std::optional<grammar::Matcher> m2;
            if (m) {
              m2.emplace(*m);
              ASSERT_TRUE(m2->accept_token(*gvocab, t));
            }
            std::vector<int32_t> o = out;
            o.push_back(t);
            walk(std::move(o), p * next[static_cast<size_t>(t)], m2 ? &*m2 : nullptr);
          }
        };
    std::optional<grammar::Matcher> m0;
    if (use_grammar) m0.emplace(g);
    walk({}, 1.0, m0 ? &*m0 : nullptr);

    EngineConfig cfg;
    cfg.num_threads = 1;
    cfg.sched.max_num_seqs = 256;
    cfg.block_size = 2;  // the prompt's first blocks come from the prefix cache
    cfg.spec_method = method;
    cfg.draft_model = kDraft;
    cfg.skip_layers = kSkip;
    cfg.num_spec_tokens = method == SpecMethod::kLookahead ? kWideLookahead.tree_size()  // the whole tree
                          : method == SpecMethod::kMedusa  ? 16
                                                           : 2;
    cfg.lookahead = kWideLookahead;
    auto e = Engine::create(kTarget, cfg);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    // Sanitizer builds look for memory and thread errors, not statistical
    // power: a tenth of the samples there.
    const int64_t n = testing_util::kSanitized ? 2000 : 20000;
    std::map<int64_t, std::vector<int32_t>> outs;
    for (int64_t i = 0; i < n; ++i) {
      RequestSpec s;
      s.prompt = prompt;
      s.max_tokens = 4;  // room for two drafts after the first token; the first three are compared
      s.ignore_eos = true;
      s.sampling = sp;
      s.sampling.seed = 1000 + static_cast<uint64_t>(i);
      s.grammar = g;
      ASSERT_TRUE((*e)->add_request(s, RequestId{i}).is_ok());
      if (i % 1024 != 1023 && i != n - 1) continue;
      while ((*e)->has_unfinished())  // in waves: a short waiting queue
        for (const RequestOutput& o : (*e)->step()) {
          auto& v = outs[o.id.value];
          v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
        }
    }
    std::map<int64_t, int64_t> counts;
    for (const auto& [id, t] : outs) {
      if (!use_grammar) {
        ASSERT_EQ(t.size(), 4u);
      }
      ++counts[key(t)];
    }
    const auto [stat, critical] = testing_util::chi_square(counts, probs, n);
    EXPECT_LT(stat, critical) << "top_p " << top_p;
    const EngineStats& st = (*e)->stats();
    EXPECT_GT(st.num_accepted_draft_tokens, 0);
    EXPECT_LT(st.num_accepted_draft_tokens, st.num_draft_tokens) << "no draft rejected: the residual went untested";
    std::printf("top_p %.1f: chi2 %.1f (critical %.1f), acceptance %.2f over %lld drafts\n", top_p, stat, critical,
                st.spec_acceptance_rate(), static_cast<long long>(st.num_draft_tokens));
  }
}

TEST(DraftModelSampling, FirstThreeTokensKeepTheTargetDistribution) {
  const float top_ps[] = {1.0f, 0.9f};
  check_first_three_tokens(SpecMethod::kDraft, top_ps);
}

TEST(DraftModelSampling, UnderAGrammarFirstThreeTokensKeepTheConstrainedDistribution) {
  const float top_ps[] = {1.0f};
  check_first_three_tokens(SpecMethod::kDraft, top_ps, /*use_grammar=*/true);
}

TEST(LayerSkipSampling, FirstThreeTokensKeepTheTargetDistribution) {
  const float top_ps[] = {0.9f};
  check_first_three_tokens(SpecMethod::kLayerSkip, top_ps);
}

TEST(LookaheadSampling, FirstThreeTokensKeepTheTargetDistribution) {
  const float top_ps[] = {0.9f};
  check_first_three_tokens(SpecMethod::kLookahead, top_ps);
}

TEST(MedusaSampling, FirstThreeTokensKeepTheTargetDistribution) {
  const float top_ps[] = {0.9f};
  check_first_three_tokens(SpecMethod::kMedusa, top_ps);
}

TEST(Medusa, NeedsHeadsMadeForTheModel) {
  EngineConfig cfg;
  cfg.spec_method = SpecMethod::kMedusa;
  cfg.medusa_heads = "/nonexistent.medusa.gguf";
  auto missing = Engine::create(kTarget, cfg);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("Medusa"), std::string::npos) << missing.status().message();
  cfg.medusa_heads = kDraft;  // a GGUF, not heads
  auto other = Engine::create(kTarget, cfg);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("not a Medusa heads file"), std::string::npos) << other.status().message();
  // The random tiny model (another hidden size) finds no heads beside it.
  cfg.medusa_heads.clear();
  auto none = Engine::create(testing_util::tiny_model_path(), cfg);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("needs heads"), std::string::npos) << none.status().message();
}

TEST(LayerSkip, NeedsAValidSkipSet) {
  EngineConfig cfg;
  cfg.spec_method = SpecMethod::kLayerSkip;
  for (const char* bad : {"5", "0,1,2,3,4", "x", "1,,2", "-1"}) {
    cfg.skip_layers = bad;
    auto e = Engine::create(kTarget, cfg);
    ASSERT_FALSE(e.is_ok()) << bad;
    EXPECT_NE(e.status().message().find("skip layers"), std::string::npos) << e.status().message();
  }
}

TEST(DraftModel, NeedsAFileWithTheTargetsVocabulary) {
  EngineConfig cfg;
  cfg.spec_method = SpecMethod::kDraft;
  auto none = Engine::create(kTarget, cfg);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("draft model"), std::string::npos) << none.status().message();
  cfg.draft_model = "/nonexistent.gguf";
  auto missing = Engine::create(kTarget, cfg);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("draft model"), std::string::npos) << missing.status().message();
  cfg.draft_model = testing_util::tiny_model_path();  // a random model with another vocabulary
  auto other = Engine::create(kTarget, cfg);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("vocabulary"), std::string::npos) << other.status().message();
}

}  // namespace
}  // namespace pagoda
