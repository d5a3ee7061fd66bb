// Prefix caching end to end: greedy outputs with the cache on equal outputs
// with it off, on shared-prefix, branching and multi-turn workloads, under
// eviction pressure; hits are counted and blocks never leak.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine_test_util.h"

namespace pagoda {
namespace {

using testing_util::greedy;
using testing_util::tiny_model_path;

std::unique_ptr<Engine> engine_with(bool cache, int64_t kv_blocks, SchedPolicy policy = SchedPolicy::kFcfs,
                                    DType kv_dtype = DType::kF32) {
  const std::string path = tiny_model_path();
  EngineConfig cfg;
  cfg.kv_cache_dtype = kv_dtype;
  cfg.num_threads = 1;
  cfg.block_size = 4;
  cfg.enable_prefix_caching = cache;
  cfg.sched.policy = policy;
  cfg.sched.max_num_seqs = 4;
  cfg.sched.max_num_batched_tokens = 48;
  auto probe = Engine::create(path, cfg);
  const auto& mc = (*probe)->model_config();
  cfg.kv_cache_bytes = kv_blocks * static_cast<int64_t>(KVStorage::bytes_per_block(mc.num_layers, 4, mc.num_kv_heads,
                                                                                   mc.head_dim, kv_dtype));
  auto e = Engine::create(path, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

std::map<int, std::vector<int32_t>> run(Engine& e, const std::vector<std::pair<int, RequestSpec>>& jobs) {
  return testing_util::run_jobs(e, jobs, 4000);
}

std::vector<std::pair<int, RequestSpec>> shared_prefix_jobs(uint32_t seed, int32_t vocab_size) {
  std::mt19937 rng(seed);
  std::vector<int32_t> system;
  for (int i = 0; i < 37; ++i) system.push_back(static_cast<int32_t>(3 + rng() % (vocab_size - 3)));
  std::vector<std::pair<int, RequestSpec>> jobs;
  for (int i = 0; i < 10; ++i) {
    auto p = system;
    // Branching: some share a longer stem with a sibling.
    if (i % 3 == 0) p.insert(p.end(), {5, 6, 7, 8, 9});
    for (int k = 0; k < 3 + static_cast<int>(rng() % 9); ++k)
      p.push_back(static_cast<int32_t>(3 + rng() % (vocab_size - 3)));
    jobs.push_back({i * 3, greedy(p, 4 + static_cast<int32_t>(rng() % 8))});
  }
  return jobs;
}

void check_cache_on_and_off(DType kv_dtype) {
  SCOPED_TRACE(dtype_name(kv_dtype).data());
  for (int64_t blocks : {200, 40}) {  // roomy, then eviction pressure
    auto on = engine_with(true, blocks, SchedPolicy::kFcfs, kv_dtype);
    auto off = engine_with(false, blocks, SchedPolicy::kFcfs, kv_dtype);
    const auto jobs = shared_prefix_jobs(4, on->model_config().vocab_size);
    const auto got_on = run(*on, jobs);
    const auto got_off = run(*off, jobs);
    EXPECT_EQ(got_on, got_off) << "blocks " << blocks;
    EXPECT_GT(on->stats().prefix_cache_hit_rate(), 0.3) << "blocks " << blocks;
    EXPECT_EQ(off->stats().prefix_cache_hit_rate(), 0.0);
    EXPECT_EQ(on->kv_manager().num_available_blocks(), on->kv_manager().num_blocks());
    if (blocks == 40) {
      EXPECT_GT(on->kv_manager().prefix_cache()->num_evictions(), 0);
    }
  }
}

TEST(PrefixCacheEngine, SameGreedyOutputsWithCacheOnAndOff) { check_cache_on_and_off(DType::kF32); }
// Cached quantized blocks (and their copy-on-write copies) are reused as
// stored: the same outputs as recomputing them.
TEST(PrefixCacheEngine, QuantizedKvSameGreedyOutputsWithCacheOnAndOff) {
  check_cache_on_and_off(DType::kQ8_0);
  check_cache_on_and_off(DType::kQ4_0);
}

TEST(PrefixCacheEngine, MultiTurnChatReusesEarlierTurns) {
  auto on = engine_with(true, 300);
  auto off = engine_with(false, 300);
  std::vector<std::vector<int32_t>> convos;
  for (Engine* e : {on.get(), off.get()}) {
    std::vector<int32_t> convo = {1, 40, 41, 42, 43, 44, 45};
    for (int turn = 0; turn < 4; ++turn) {
      auto out = run(*e, {{0, greedy(convo, 6)}});
      convo.insert(convo.end(), out[0].begin(), out[0].end());
      convo.insert(convo.end(), {50 + turn, 51, 52});  // the next user message
    }
    convos.push_back(convo);
  }
  EXPECT_EQ(convos[0], convos[1]);
  EXPECT_GT(on->stats().prefix_cache_hit_rate(), 0.4);
}

TEST(PrefixCacheEngine, LongestPrefixMatchPolicyKeepsOutputs) {
  auto lpm = engine_with(true, 60, SchedPolicy::kLpm);
  auto fcfs = engine_with(false, 60);
  std::vector<std::pair<int, RequestSpec>> jobs = shared_prefix_jobs(9, lpm->model_config().vocab_size);
  for (auto& j : jobs) j.first = 0;  // all at once: the policy reorders
  jobs.push_back({1, greedy({1, 2, 3}, 3)});
  EXPECT_EQ(run(*lpm, jobs), run(*fcfs, jobs));
}

}  // namespace
}  // namespace pagoda
