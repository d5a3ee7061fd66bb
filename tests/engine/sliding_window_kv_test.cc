// Sliding-window KV freeing (KV groups) on the fixture models with sliding
// layers: the greedy tokens equal those of an engine that keeps every
// position (--swa-full), in a KV cache too small to hold full tables for
// the run, through chunked prefill, preemption and prefix hits — and the
// pages the running sequences hold stay near the window's worth.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../shared_files.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/prompt_logits.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing_util::shared_path;

class SlidingWindowKv : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return "fixtures/arch/" + GetParam(); }
};

struct GreedyResult {
  std::vector<std::vector<int32_t>> tokens;
  int32_t max_pinned_pages = 0;
  int64_t preemptions = 0;
  int32_t max_swapped = 0;
};

// Every prompt twice (the second round after the first finished, so it
// can hit the prefix cache), greedy to n tokens, all of a round at once.
GreedyResult run(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int32_t n) {
  GreedyResult r;
  for (int round = 0; round < 2; ++round) {
    std::vector<RequestId> ids;
    std::vector<std::vector<int32_t>> out(prompts.size());
    for (const std::vector<int32_t>& p : prompts) {
      RequestSpec spec;
      spec.prompt = p;
      spec.max_tokens = n;
      spec.sampling.temperature = 0;
      spec.ignore_eos = true;
      auto id = e.add_request(spec);
      EXPECT_TRUE(id.is_ok()) << id.status().message();
      if (!id.is_ok()) return r;
      ids.push_back(*id);
    }
    for (int64_t steps = 0; e.has_unfinished(); ++steps) {
      if (steps > 100000) {  // a scheduling livelock fails instead of hanging
        ADD_FAILURE() << "no progress: " << e.scheduler().num_running() << " running, " << e.scheduler().num_swapped()
                      << " swapped";
        return r;
      }
      for (const auto& o : e.step())
        for (size_t i = 0; i < ids.size(); ++i)
          if (o.id == ids[i]) out[i].insert(out[i].end(), o.new_tokens.begin(), o.new_tokens.end());
      const Status st = e.kv_manager().check_invariants();
      EXPECT_TRUE(st.is_ok()) << st.message();
      if (!st.is_ok()) return r;
      r.max_pinned_pages = std::max(r.max_pinned_pages, e.kv_manager().num_pinned_pages());
      r.max_swapped = std::max(r.max_swapped, e.scheduler().num_swapped());
    }
    EXPECT_EQ(e.kv_manager().num_seqs(), 0);
    r.tokens.insert(r.tokens.end(), out.begin(), out.end());
  }
  r.preemptions = e.scheduler().num_preemptions();
  return r;
}

TEST_P(SlidingWindowKv, FreesBlocksPastTheWindowWithTheSameTokens) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const std::string model = shared_path(dir() + "/model.gguf");
  std::ifstream pf(shared_path(dir() + "/prompts.json"));
  const auto prompts = json::parse(pf).get<std::vector<std::vector<int32_t>>>();
  auto probe = make_logits_runner(model, 16, 1);
  ASSERT_TRUE(probe.is_ok());
  const ModelConfig& mc = probe->runner->config();
  ASSERT_GT(mc.sliding_window, 0);
  RunnerConfig rc;
  rc.block_size = 16;
  const int64_t block_bytes = ModelRunner::bytes_per_block(mc, rc);
  const int32_t n = 160;  // the longest prompt (100) + 160 tokens = 17 blocks of 16

  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.block_size = 16;
  cfg.sched.max_num_batched_tokens = 16;  // chunked prefill
  cfg.swa_full = true;
  cfg.kv_cache_bytes = 64 * block_bytes;  // room for every sequence's full tables
  auto full = Engine::create(model, cfg);
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  EXPECT_EQ((*full)->kv_manager().num_kv_groups(), 1);
  const GreedyResult want = run(**full, prompts, n);

  cfg.swa_full = false;
  cfg.kv_cache_bytes = 12 * block_bytes;  // 192 tokens of full tables: less than one sequence needs
  auto freeing = Engine::create(model, cfg);
  ASSERT_TRUE(freeing.is_ok()) << freeing.status().message();
  const KVCacheManager& kv = (*freeing)->kv_manager();
  ASSERT_GT(kv.num_kv_groups(), 1);
  ASSERT_EQ(kv.sliding_window(), mc.sliding_window);
  const GreedyResult got = run(**freeing, prompts, n);
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < got.tokens.size(); ++i)
    EXPECT_EQ(got.tokens[i], want.tokens[i]) << GetParam() << " request " << i;
  EXPECT_GT(got.preemptions, 0) << "three sequences should not fit at once";
  // One full-length sequence with full tables takes 17 blocks of every group.
  const int32_t all = kv.num_kv_groups(), full_groups = kv.num_full_kv_groups();
  EXPECT_LE(got.max_pinned_pages, kv.num_blocks());
  EXPECT_LT(got.max_pinned_pages, 17 * all);
  // Preemption by swapping moves the pages each sequence can still read.
  cfg.sched.preempt_mode = PreemptMode::kSwap;
  cfg.swap_space_bytes = 64 * block_bytes;
  auto swapping = Engine::create(model, cfg);
  ASSERT_TRUE(swapping.is_ok()) << swapping.status().message();
  const GreedyResult swapped = run(**swapping, prompts, n);
  ASSERT_EQ(swapped.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < swapped.tokens.size(); ++i)
    EXPECT_EQ(swapped.tokens[i], want.tokens[i]) << GetParam() << " request " << i << " with swapping";
  EXPECT_GT(swapped.max_swapped, 0) << "the load should swap sequences out";
  EXPECT_EQ((*swapping)->kv_manager().num_free_host_blocks(), (*swapping)->kv_manager().num_host_blocks());

  // Alone, the longest sequence holds the full groups' pages of its 17
  // blocks and the sliding groups' pages of the few its window and one
  // 16-token chunk span.
  const auto longest = *std::max_element(prompts.begin(), prompts.end(),
                                         [](const auto& a, const auto& b) { return a.size() < b.size(); });
  const GreedyResult alone = run(**freeing, {longest}, n);
  const int32_t bound = 17 * full_groups + 3 * (all - full_groups);
  EXPECT_LE(alone.max_pinned_pages, bound);
  std::printf(
      "[ pages ] %s: %d groups (%d full); one sequence of %zu tokens pins at most %d pages (bound %d), "
      "full tables %d; three at once %d of %d\n",
      GetParam().c_str(), all, full_groups, longest.size() + n, alone.max_pinned_pages, bound, 17 * all,
      got.max_pinned_pages, kv.num_blocks());
}

// What moves whole blocks or evicts tokens turns freeing off (engine-wide)
// or is refused with a message (per request), never a crash.
TEST_P(SlidingWindowKv, StreamingEvictionIsEitherOrFreeing) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const std::string model = shared_path(dir() + "/model.gguf");
  EngineConfig cfg;
  cfg.num_threads = 1;
  auto freeing = Engine::create(model, cfg);
  ASSERT_TRUE(freeing.is_ok()) << freeing.status().message();
  ASSERT_GT((*freeing)->kv_manager().num_kv_groups(), 1);
  RequestSpec spec;
  spec.prompt = {1, 2, 3, 4};
  spec.max_tokens = 4;
  spec.kv_policy = KvPolicyRequest{KvPolicyKind::kStreaming, 0, 16, std::nullopt};
  auto id = (*freeing)->add_request(spec);
  ASSERT_FALSE(id.is_ok());
  EXPECT_NE(id.status().message().find("--swa-full"), std::string::npos) << id.status().message();
  cfg.sched.kv_policy.kind = KvPolicyKind::kStreaming;
  cfg.sched.kv_policy.window = 16;
  auto streaming = Engine::create(model, cfg);
  ASSERT_TRUE(streaming.is_ok()) << streaming.status().message();
  EXPECT_EQ((*streaming)->kv_manager().num_kv_groups(), 1);
  spec.kv_policy.reset();
  spec.max_tokens = 40;
  ASSERT_TRUE((*streaming)->add_request(spec).is_ok());
  while ((*streaming)->has_unfinished()) (*streaming)->step();
  EXPECT_TRUE((*streaming)->kv_manager().check_invariants().is_ok());
}

INSTANTIATE_TEST_SUITE_P(Arch, SlidingWindowKv, ::testing::Values("gemma3", "gpt-oss"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace pagoda
