// Speculative decoding through the engine: greedy outputs must be token for
// token those of speculation off — alone, in mixed batches with chunked
// prefill, prefix-cache hits and preemption (recompute and swap) — with the
// KV invariants checked after every step and no block leaked. The n-gram
// proposer guesses wrong often on a random model, so both acceptance and
// rollback are exercised (the test asserts both happened).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "engine_test_util.h"
#include "spec/datastore.h"
#include "spec/spec_gate.h"

namespace pagoda {
namespace {

using testing_util::tiny_model_path;

// Step-time models for auto speculation (num_spec_tokens 0): the one
// measured at start-up, or one that makes drafts free or cost a full token.
enum class Cost { kMeasured, kFree, kComputeBound };

struct SpecCase {
  const char* name;
  int32_t budget;
  int32_t kv_blocks;  // 0: plenty
  PreemptMode mode;
  int32_t num_spec_tokens;
  Cost cost = Cost::kMeasured;
};

// A SpecGate history no real step moves far: one arm at 1e9 tokens/s, the
// other at 1, at every batch size.
SpecGate gate_history(bool drafts_win) {
  SpecGate gate;
  for (int32_t n = 1; n <= 64; n *= 2) {
    for (int32_t i = 0; i < SpecGate::kMinSamples; ++i) {
      gate.record(n, false, n, n / (drafts_win ? 1.0 : 1e9));
      gate.record(n, true, n, n / (drafts_win ? 1e9 : 1.0));
    }
  }
  return gate;
}

std::unique_ptr<Engine> engine(const std::string& path, const SpecCase& c, bool spec,
                               const std::string& datastore = "") {
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.block_size = 4;
  cfg.sched.max_num_batched_tokens = c.budget;
  cfg.sched.max_num_seqs = 8;
  cfg.sched.preempt_mode = c.mode;
  if (spec) {
    cfg.spec_method = datastore.empty() ? SpecMethod::kNgram : SpecMethod::kRetrieval;
    cfg.spec_datastore = datastore;
    cfg.num_spec_tokens = c.num_spec_tokens;
  }
  auto probe = Engine::create(path, cfg);
  EXPECT_TRUE(probe.is_ok());
  const ModelConfig& mc = (*probe)->model_config();
  const auto block_bytes =
      static_cast<int64_t>(KVStorage::bytes_per_block(mc.num_layers, 4, mc.num_kv_heads, mc.head_dim));
  cfg.kv_cache_bytes = c.kv_blocks > 0 ? block_bytes * c.kv_blocks : 64 << 20;
  cfg.swap_space_bytes = block_bytes * 256;
  auto e = Engine::create(path, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (spec && c.num_spec_tokens == 0) {
    EXPECT_FALSE((*e)->step_cost_model().empty()) << "auto speculation measured no step time";
    if (c.cost == Cost::kFree) {
      // Free drafts, and a gate that measured them so (not this machine's
      // step times, which its probes would otherwise judge).
      (*e)->set_step_cost_model(StepCostModel({{1, 1e-3}, {4096, 1e-3}}));
      (*e)->set_spec_gate(gate_history(true));
    }
    if (c.cost == Cost::kComputeBound) (*e)->set_step_cost_model(StepCostModel({{1, 1e-3}, {4096, 4096e-3}}));
  }
  return std::move(e).value();
}

// Prompts: random ones, copy-heavy ones (a phrase repeated) and a shared
// stem so later arrivals hit the prefix cache.
std::vector<RequestSpec> prompts(int32_t vocab_size) {
  std::mt19937 rng(11);
  std::vector<int32_t> stem;
  for (int i = 0; i < 13; ++i) stem.push_back(static_cast<int32_t>(rng() % vocab_size));
  std::vector<RequestSpec> specs;
  for (int r = 0; r < 10; ++r) {
    RequestSpec s;
    if (r % 3 == 0) {
      s.prompt = stem;
    }
    std::vector<int32_t> phrase;
    for (int i = 0; i < 2 + r % 5; ++i) phrase.push_back(static_cast<int32_t>(rng() % vocab_size));
    for (int rep = 0; rep < (r % 2 ? 4 : 1); ++rep) s.prompt.insert(s.prompt.end(), phrase.begin(), phrase.end());
    for (int i = 0; i < static_cast<int>(rng() % 9); ++i) s.prompt.push_back(static_cast<int32_t>(rng() % vocab_size));
    s.max_tokens = 8 + static_cast<int32_t>(rng() % 40);
    s.sampling.temperature = 0;
    s.ignore_eos = true;
    specs.push_back(s);
  }
  return specs;
}

std::map<int64_t, std::vector<int32_t>> run(Engine& e, const std::vector<RequestSpec>& specs) {
  std::map<int64_t, std::vector<int32_t>> got;
  size_t next = 0;
  for (int step = 0; step < 20000 && (next < specs.size() || e.has_unfinished()); ++step) {
    // Two arrivals every third step: batches mix prefill chunks and decodes.
    if (step % 3 == 0)
      for (int k = 0; k < 2 && next < specs.size(); ++k, ++next) {
        auto id = e.add_request(specs[next], RequestId{static_cast<int64_t>(next)});
        EXPECT_TRUE(id.is_ok()) << id.status().message();
      }
    for (const RequestOutput& o : e.step()) {
      auto& v = got[o.id.value];
      v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
      EXPECT_EQ(o.samples.size(), o.new_tokens.size());
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

class SpeculativeGreedy : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpeculativeGreedy, OutputsEqualSpeculationOff) {
  const std::string path = tiny_model_path();
  const SpecCase& c = GetParam();
  auto off = engine(path, c, false);
  auto on = engine(path, c, true);
  const auto specs = prompts(off->model_config().vocab_size);
  const auto want = run(*off, specs);
  const auto got = run(*on, specs);
  ASSERT_EQ(want.size(), specs.size());
  for (const auto& [id, tokens] : want) {
    ASSERT_EQ(tokens.size(), static_cast<size_t>(specs[id].max_tokens)) << "request " << id;
    EXPECT_EQ(got.at(id), tokens) << "request " << id;
  }
  const EngineStats& st = on->stats();
  EXPECT_EQ(off->stats().num_draft_tokens, 0);
  if (c.num_spec_tokens == 0 && c.cost == Cost::kComputeBound) {
    EXPECT_EQ(st.num_draft_tokens, 0) << "auto speculated although every draft costs a full token";
    // Nor proposed for every sequence in every step only to plan it away:
    // after an idle plan, one step in Engine::kReplanEvery proposes (and
    // those where the batch size crosses a power of two).
    std::printf("%s: %lld proposals over %lld decoding sequence-steps\n", c.name,
                static_cast<long long>(st.num_spec_proposals), static_cast<long long>(st.num_decode_tokens_computed));
    EXPECT_LT(st.num_spec_proposals * 3, st.num_decode_tokens_computed);
    return;
  }
  if (c.num_spec_tokens == 0 && c.cost == Cost::kMeasured) return;  // timing decides: only losslessness is asserted
  EXPECT_GT(st.num_accepted_draft_tokens, 0) << "no draft was ever accepted: the test exercises nothing";
  EXPECT_LT(st.num_accepted_draft_tokens, st.num_draft_tokens) << "no draft was ever rejected";
  EXPECT_GT(st.spec_draft_seconds, 0.0);
  EXPECT_GT(st.spec_verify_seconds, 0.0);
  EXPECT_EQ(off->stats().spec_verify_seconds, 0.0);
  // The step phases (bench throughput's execute_s / sample_s) lie within the steps.
  EXPECT_GT(st.execute_seconds, 0.0);
  EXPECT_GT(st.sample_seconds, 0.0);
  EXPECT_LE(st.execute_seconds + st.sample_seconds, st.prefill_seconds + st.decode_seconds + 1e-9);
  // With a roomy budget drafts cost no one else a slot: fewer steps. (With a
  // tiny budget they crowd out prefill chunks; adaptive speculation's job.)
  if (c.budget >= 64) {
    EXPECT_LT(st.num_steps, off->stats().num_steps) << "speculation saved no step";
  }
  std::printf("%s: %lld drafts, acceptance %.2f, mean accepted length %.2f, steps %lld vs %lld\n", c.name,
              static_cast<long long>(st.num_draft_tokens), st.spec_acceptance_rate(), st.spec_mean_accepted_len(),
              static_cast<long long>(st.num_steps), static_cast<long long>(off->stats().num_steps));
}

INSTANTIATE_TEST_SUITE_P(Batches, SpeculativeGreedy,
                         ::testing::Values(SpecCase{"roomy", 256, 0, PreemptMode::kRecompute, 4},
                                           SpecCase{"chunked_prefill", 7, 0, PreemptMode::kRecompute, 3},
                                           SpecCase{"preempt_recompute", 32, 40, PreemptMode::kRecompute, 5},
                                           SpecCase{"preempt_swap", 32, 40, PreemptMode::kSwap, 2},
                                           SpecCase{"auto_free", 256, 0, PreemptMode::kRecompute, 0, Cost::kFree},
                                           SpecCase{"auto_free_preempt", 32, 40, PreemptMode::kSwap, 0, Cost::kFree},
                                           SpecCase{"auto_compute_bound", 256, 0, PreemptMode::kRecompute, 0,
                                                    Cost::kComputeBound},
                                           SpecCase{"auto_measured", 64, 0, PreemptMode::kRecompute, 0}),
                         [](const ::testing::TestParamInfo<SpecCase>& i) { return std::string(i.param.name); });

// Where SpecGate measured drafts slower, auto speculation holds them back in
// pure-decode steps and proposes none there (the proposer's work would be
// thrown away), but for the gate's probes; where it measured them faster,
// every sequence is proposed for. Outputs are those of speculation off both
// ways.
TEST(Speculative, DraftsTheGateHoldsBackAreNotProposed) {
  const std::string path = tiny_model_path();
  const SpecCase c{"gated", 256, 0, PreemptMode::kRecompute, 0, Cost::kFree};
  auto off = engine(path, c, false);
  const auto specs = prompts(off->model_config().vocab_size);
  const auto want = run(*off, specs);
  EngineStats held, won;
  for (const bool drafts_win : {false, true}) {
    auto on = engine(path, c, true);
    on->set_spec_gate(gate_history(drafts_win));
    const auto got = run(*on, specs);
    for (const auto& [id, tokens] : want) EXPECT_EQ(got.at(id), tokens) << "request " << id;
    (drafts_win ? won : held) = on->stats();
  }
  std::printf("proposals: %lld held back, %lld let through; drafts %lld vs %lld\n",
              static_cast<long long>(held.num_spec_proposals), static_cast<long long>(won.num_spec_proposals),
              static_cast<long long>(held.num_draft_tokens), static_cast<long long>(won.num_draft_tokens));
  EXPECT_GT(won.num_draft_tokens, 0);
  EXPECT_LT(held.num_draft_tokens, won.num_draft_tokens / 2);
  EXPECT_LT(held.num_spec_proposals, won.num_spec_proposals / 2);
}

TEST(Speculative, RetrievalOutputsEqualSpeculationOff) {
  // The datastore holds half of the greedy outputs (the rest of the corpus is
  // noise), so drafts are often right and often wrong.
  const std::string path = tiny_model_path();
  const SpecCase c{"retrieval", 64, 0, PreemptMode::kRecompute, 4};
  auto off = engine(path, c, false);
  const auto specs = prompts(off->model_config().vocab_size);
  const auto want = run(*off, specs);
  std::vector<int32_t> corpus;
  std::mt19937 rng(5);
  for (const auto& [id, tokens] : want) {
    if (id % 2) corpus.insert(corpus.end(), tokens.begin(), tokens.end());
    for (int i = 0; i < 20; ++i) corpus.push_back(static_cast<int32_t>(rng() % off->model_config().vocab_size));
  }
  auto store = Datastore::build(corpus, off->model_config().vocab_size);
  ASSERT_TRUE(store.is_ok());
  const std::string ds =
      (std::filesystem::temp_directory_path() / ("pagoda_spec_ds_" + std::to_string(::getpid()))).string();
  ASSERT_TRUE((*store)->save(ds).is_ok());
  auto on = engine(path, c, true, ds);
  const auto got = run(*on, specs);
  for (const auto& [id, tokens] : want) EXPECT_EQ(got.at(id), tokens) << "request " << id;
  const EngineStats& st = on->stats();
  EXPECT_GT(st.num_accepted_draft_tokens, 0);
  EXPECT_LT(st.num_accepted_draft_tokens, st.num_draft_tokens);
  std::printf("retrieval: %lld drafts, acceptance %.2f, mean accepted length %.2f, steps %lld vs %lld\n",
              static_cast<long long>(st.num_draft_tokens), st.spec_acceptance_rate(), st.spec_mean_accepted_len(),
              static_cast<long long>(st.num_steps), static_cast<long long>(off->stats().num_steps));
  std::filesystem::remove(ds);
}

TEST(Speculative, RetrievalNeedsAValidDatastore) {
  const std::string path = tiny_model_path();
  EngineConfig cfg;
  cfg.spec_method = SpecMethod::kRetrieval;
  EXPECT_FALSE(Engine::create(path, cfg).is_ok());
  cfg.spec_datastore = "/nonexistent.pgds";
  auto e = Engine::create(path, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("datastore"), std::string::npos);
}

TEST(Speculative, StopStringInsideAnAcceptedRunCutsThere) {
  const std::string path = tiny_model_path();
  SpecCase c{"stop", 256, 0, PreemptMode::kRecompute, 6};
  auto off = engine(path, c, false);
  auto specs = prompts(off->model_config().vocab_size);
  // Take a text that greedy decoding produces, and stop on a piece of it.
  RequestSpec s = specs[1];
  s.max_tokens = 40;
  const auto full = run(*off, {s});
  std::string text;
  StreamDecoder dec(off->tokenizer());
  for (int32_t t : full.at(0)) text += dec.push(t);
  text += dec.flush();
  ASSERT_GT(text.size(), 12u);
  s.stop = {text.substr(text.size() / 2, 3)};
  s.max_tokens = 40;
  int32_t want_tokens = -1;
  for (bool spec : {false, true}) {
    auto e = engine(path, c, spec);
    ASSERT_TRUE(e->add_request(s).is_ok());
    std::string got;
    FinishReason reason = FinishReason::kNone;
    int32_t num_tokens = 0;
    while (e->has_unfinished())
      for (const auto& o : e->step()) {
        got += o.text;
        num_tokens = o.num_output_tokens;
        if (o.finished) reason = o.finish_reason;
      }
    EXPECT_EQ(reason, FinishReason::kStop) << "spec " << spec;
    EXPECT_EQ(got.find(s.stop[0]), std::string::npos);
    EXPECT_TRUE(text.rfind(got, 0) == 0) << "spec " << spec << ": '" << got << "'";
    if (!spec) {
      want_tokens = num_tokens;
    } else {
      EXPECT_EQ(num_tokens, want_tokens);
    }
  }
}

}  // namespace
}  // namespace pagoda
