// Per-request KV policies (RequestSpec::kv_policy, Engine::resolve_kv_policy):
//  - a request's own policy runs exactly as the same policy set for the whole
//    server: mixed in one engine with full-cache requests that share its
//    prefix, every request's greedy tokens equal its run alone in an engine
//    whose server policy is the request's. This fails if the override is
//    ignored (the policy requests would run with the full cache) or if a
//    policy request changes blocks another request reads.
//  - prefix sharing: what a request shares is what stays bit-identical to a
//    full-cache run: H2O and compressing SnapKV neither take cached blocks
//    nor offer theirs; streaming takes them (and copies before shifting)
//    and offers its own until it first evicts.
//  - the request's numbers default to the server's; bad ones are errors.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine_test_util.h"

namespace pagoda {
namespace {

using testing_util::greedy;
using testing_util::make_engine;
using testing_util::tiny_model_path;

constexpr int64_t kCtx = 64;  // streaming requests run past it

KvPolicy policy(KvPolicyKind kind, int32_t sinks, int32_t window, int32_t budget) {
  KvPolicy p;
  p.kind = kind;
  p.sinks = sinks;
  p.window = window;
  p.budget = budget;
  return p;
}

KvPolicyRequest request_of(const KvPolicy& p) { return {p.kind, p.sinks, p.window, p.budget}; }

std::vector<int32_t> run_alone(const std::string& path, const KvPolicy& server_policy, RequestSpec s) {
  SchedulerConfig sc;
  sc.kv_policy = server_policy;
  auto e = make_engine(path, 8 << 20, 4, sc);
  s.kv_policy.reset();
  EXPECT_TRUE(e->add_request(s).is_ok());
  std::vector<int32_t> out;
  while (e->has_unfinished())
    for (const auto& o : e->step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, const std::vector<int32_t>& prefix, int32_t len, int32_t vocab) {
  std::vector<int32_t> p = prefix;
  while (static_cast<int32_t>(p.size()) < len) p.push_back(static_cast<int32_t>(1 + rng() % (vocab - 1)));
  return p;
}

TEST(KvPolicyRequest, MixedPoliciesEqualTheirServerWideRuns) {
  const std::string path = tiny_model_path("tiny", kCtx);
  auto e = make_engine(path, 8 << 20);  // server policy: full
  const int32_t vocab = e->model_config().vocab_size;
  std::mt19937 rng(3);
  const std::vector<int32_t> shared = random_prompt(rng, {}, 16, vocab);  // every prompt starts with it
  struct Case {
    KvPolicy policy;
    RequestSpec spec;
  };
  std::vector<Case> cases = {
      {KvPolicy{}, greedy(random_prompt(rng, shared, 24, vocab), 30)},
      {policy(KvPolicyKind::kStreaming, 4, 16, 0), greedy(random_prompt(rng, shared, 24, vocab), 150)},
      {policy(KvPolicyKind::kSnapKv, 0, 4, 12), greedy(random_prompt(rng, shared, 30, vocab), 20)},
      {policy(KvPolicyKind::kH2o, 0, 4, 12), greedy(random_prompt(rng, shared, 24, vocab), 40)},
      {KvPolicy{}, greedy(random_prompt(rng, shared, 20, vocab), 30)},
      {policy(KvPolicyKind::kStreaming, 0, 12, 0), greedy(random_prompt(rng, shared, 20, vocab), 100)},
  };
  for (Case& c : cases)
    if (!c.policy.full()) c.spec.kv_policy = request_of(c.policy);
  // Added two steps apart, so later ones hit blocks earlier ones cached.
  std::map<int64_t, size_t> case_of;
  std::map<int64_t, std::vector<int32_t>> got;
  size_t next = 0;
  for (int step = 0; step < 5000 && (next < cases.size() || e->has_unfinished()); ++step) {
    if (step % 2 == 0 && next < cases.size()) {
      auto id = e->add_request(cases[next].spec);
      ASSERT_TRUE(id.is_ok()) << id.status().message();
      case_of[id->value] = next++;
    }
    for (const auto& o : e->step())
      got[o.id.value].insert(got[o.id.value].end(), o.new_tokens.begin(), o.new_tokens.end());
    const Status inv = e->kv_manager().check_invariants();
    ASSERT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.message();
  }
  ASSERT_FALSE(e->has_unfinished());
  EXPECT_GT(e->scheduler().num_evicted_tokens(), 0);
  EXPECT_EQ(e->kv_manager().num_available_blocks(), e->kv_manager().num_blocks()) << "leaked blocks";
  for (const auto& [id, i] : case_of) {
    SCOPED_TRACE("case " + std::to_string(i) + " " + std::string(kv_policy_name(cases[i].policy.kind)));
    // All of them: the streaming ones run past the context (a full cache
    // stops at it), only because of their policy.
    EXPECT_EQ(static_cast<int32_t>(got[id].size()), cases[i].spec.max_tokens);
    EXPECT_EQ(got[id], run_alone(path, cases[i].policy, cases[i].spec));
  }
  // And the policies matter here: the streaming run differs from a full
  // cache over its first 40 tokens (within the context), H2O's too.
  for (size_t i : {size_t{1}, size_t{3}}) {
    RequestSpec s = cases[i].spec;
    s.max_tokens = 40;
    EXPECT_NE(run_alone(path, KvPolicy{}, s), run_alone(path, cases[i].policy, s)) << "case " << i;
  }
}

int32_t cached_tokens(Engine& e, RequestSpec s) {
  auto id = e.add_request(std::move(s));
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  int32_t cached = -1;
  while (e.has_unfinished())
    for (const auto& o : e.step())
      if (o.finished) cached = o.num_cached_tokens;
  EXPECT_EQ(e.kv_manager().num_available_blocks(), e.kv_manager().num_blocks());  // nothing held, only cached
  return cached;
}

TEST(KvPolicyRequest, OnlyUnchangedBlocksAreShared) {
  const std::string path = tiny_model_path("tiny", kCtx);
  auto e = make_engine(path, 8 << 20);
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = random_prompt(rng, {}, 26, e->model_config().vocab_size);
  RequestSpec full = greedy(prompt, 8);
  RequestSpec h2o = full, snapkv = full, snapkv_short = full, streaming = full;
  h2o.kv_policy = KvPolicyRequest{KvPolicyKind::kH2o, std::nullopt, 4, 12};
  snapkv.kv_policy = KvPolicyRequest{KvPolicyKind::kSnapKv, std::nullopt, 4, 12};        // compresses the prompt
  snapkv_short.kv_policy = KvPolicyRequest{KvPolicyKind::kSnapKv, std::nullopt, 4, 48};  // prompt within the budget
  streaming.kv_policy = KvPolicyRequest{KvPolicyKind::kStreaming, 4, 8, std::nullopt};
  EXPECT_EQ(cached_tokens(*e, h2o), 0);
  EXPECT_EQ(cached_tokens(*e, snapkv), 0);
  EXPECT_EQ(cached_tokens(*e, full), 0) << "H2O or SnapKV offered their rewritten blocks";
  EXPECT_GE(cached_tokens(*e, full), 24) << "a full request's blocks are shared";
  EXPECT_EQ(cached_tokens(*e, h2o), 0) << "H2O took cached blocks";
  EXPECT_EQ(cached_tokens(*e, snapkv), 0) << "a compressing SnapKV prompt took cached blocks";
  EXPECT_GE(cached_tokens(*e, snapkv_short), 24);
  EXPECT_GE(cached_tokens(*e, streaming), 24);
  // The streaming request evicted from shared blocks: the cached ones must be
  // intact, so a full request still answers as in a fresh engine.
  auto fresh = make_engine(path, 8 << 20);
  std::vector<int32_t> a, b;
  for (Engine* eng : {e.get(), fresh.get()}) {
    ASSERT_TRUE(eng->add_request(full).is_ok());
    std::vector<int32_t>& out = eng == e.get() ? a : b;
    while (eng->has_unfinished())
      for (const auto& o : eng->step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  }
  EXPECT_EQ(a, b);
  EXPECT_GT(e->scheduler().num_evicted_tokens(), 0);
}

TEST(KvPolicyRequest, NumbersDefaultToTheServersAndBadOnesAreErrors) {
  const std::string path = tiny_model_path("tiny", kCtx);
  SchedulerConfig sc;
  sc.kv_policy = with_default_window(policy(KvPolicyKind::kH2o, 8, 0, 40));
  auto e = make_engine(path, 8 << 20, 4, sc);
  // Absent: the server's. Same kind: the server's numbers; another kind:
  // its default window, the server's sinks and budget.
  constexpr std::optional<int32_t> kUnset;
  auto resolve = [&](KvPolicyKind kind, std::optional<int32_t> sinks, std::optional<int32_t> window,
                     std::optional<int32_t> budget) {
    return e->resolve_kv_policy(KvPolicyRequest{kind, sinks, window, budget});
  };
  auto ok = [](const Result<KvPolicy>& r) {
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? r.value() : KvPolicy{};
  };
  EXPECT_EQ(ok(e->resolve_kv_policy(std::nullopt)), sc.kv_policy);
  EXPECT_EQ(ok(resolve(KvPolicyKind::kH2o, kUnset, kUnset, kUnset)).window, 20);
  EXPECT_EQ(ok(resolve(KvPolicyKind::kH2o, kUnset, kUnset, 100)).window, 20);  // the server's window
  const KvPolicy snap = ok(resolve(KvPolicyKind::kSnapKv, kUnset, kUnset, kUnset));
  EXPECT_EQ(snap.budget, 40);
  EXPECT_EQ(snap.window, 20);  // min(32, budget / 2)
  const KvPolicy st = ok(resolve(KvPolicyKind::kStreaming, kUnset, 50, kUnset));
  EXPECT_EQ(st.sinks, 8);
  EXPECT_EQ(st.window, 50);
  EXPECT_TRUE(ok(resolve(KvPolicyKind::kFull, kUnset, kUnset, kUnset)).full());
  // Bad numbers, and a bounded policy the pool cannot hold.
  EXPECT_FALSE(resolve(KvPolicyKind::kH2o, kUnset, 40, 40).is_ok());
  EXPECT_FALSE(resolve(KvPolicyKind::kSnapKv, kUnset, 4, 2).is_ok());
  auto room = resolve(KvPolicyKind::kStreaming, 0, 1 << 24, kUnset);
  ASSERT_FALSE(room.is_ok());
  EXPECT_NE(room.status().message().find("needs KV room"), std::string::npos) << room.status().message();
  RequestSpec bad = greedy({1, 2, 3}, 4);
  bad.kv_policy = KvPolicyRequest{KvPolicyKind::kH2o, kUnset, 8, 4};
  EXPECT_FALSE(e->add_request(bad).is_ok());
  EXPECT_FALSE(e->has_unfinished());
}

// A server that speculates still takes requests with a policy (they run
// unspeculated and equal the policy's run alone); full ones speculate.
TEST(KvPolicyRequest, SpeculationSkipsPolicyRequests) {
  const std::string path = tiny_model_path("tiny", kCtx);
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.block_size = 4;
  cfg.kv_cache_bytes = 8 << 20;
  cfg.spec_method = SpecMethod::kNgram;
  cfg.num_spec_tokens = 4;
  auto e = Engine::create(path, cfg);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  // A repetitive prompt: the n-gram proposer finds drafts.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6; ++i)
    for (int32_t t : {5, 9, 13, 17}) prompt.push_back(t);
  RequestSpec h2o = greedy(prompt, 40);
  const KvPolicy p = policy(KvPolicyKind::kH2o, 0, 4, 12);
  h2o.kv_policy = request_of(p);
  std::vector<int32_t> out;
  ASSERT_TRUE((*e)->add_request(h2o).is_ok());
  while ((*e)->has_unfinished())
    for (const auto& o : (*e)->step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  EXPECT_EQ((*e)->stats().num_draft_tokens, 0);
  EXPECT_EQ(out, run_alone(path, p, h2o));
  ASSERT_TRUE((*e)->add_request(greedy(prompt, 40)).is_ok());
  while ((*e)->has_unfinished()) (*e)->step();
  EXPECT_GT((*e)->stats().num_draft_tokens, 0);
}

}  // namespace
}  // namespace pagoda
