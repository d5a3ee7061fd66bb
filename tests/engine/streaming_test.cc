// StreamingLLM KV policy (sched/kv_policy.h): sinks + a
// window, the middle evicted block by block, later keys re-rotated to their
// cache positions.
//  - exactness: in a one-layer model a token's K/V depends only on its token
//    and position, so after any eviction the streamed logits must equal a
//    fresh run over just the kept tokens at positions 0..L-1 (this fails if
//    a key is not re-rotated, rotated by the wrong amount, a wrong block is
//    dropped, or positions are not cache positions);
//  - bounded memory far past the context, with KV invariants every step;
//  - no eviction (window longer than the text): the same greedy tokens as
//    the full cache;
//  - forks (n > 1), prefix-cache hits and preemption (swap keeps outputs
//    exact) leak nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "engine/prompt_logits.h"
#include "engine_test_util.h"
#include "model/llama_model.h"

namespace pagoda {
namespace {

using testing_util::greedy;
using testing_util::make_engine;
using testing_util::tiny_model_path;

// A one-layer tiny model with a short trained context.
std::string one_layer_model_path() { return testing_util::small_model_path(1, 0, 64, 11); }

// Sinks of whole 4-token blocks (every test here uses blocks of 4).
KvPolicy streaming(int32_t sink_blocks, int32_t window) {
  KvPolicy p;
  p.kind = KvPolicyKind::kStreaming;
  p.sinks = sink_blocks * 4;
  p.window = window;
  return p;
}

// Streams `tokens` through a scheduler with the policy, one token per step
// after the first chunk, and checks every step's last logits against a fresh
// full-cache run over the kept tokens.
void check_streamed_logits(DType kv_dtype, float tol, int32_t sink_blocks) {
  SCOPED_TRACE(std::string(dtype_name(kv_dtype)) + " sink blocks " + std::to_string(sink_blocks));
  const std::string path = one_layer_model_path();
  constexpr int32_t kBlock = 4, kWindow = 10, kLen = 150;
  auto lr = make_logits_runner(path, kLen, 1);  // the fresh reference
  ASSERT_TRUE(lr.is_ok()) << lr.status().message();
  auto file = gguf::GGUFFile::open(path);
  ASSERT_TRUE(file.is_ok());
  auto lm = LlamaModel::load(**file);
  ASSERT_TRUE(lm.is_ok());
  RunnerConfig rc;
  rc.num_threads = 1;
  rc.block_size = kBlock;
  rc.kv_cache_dtype = kv_dtype;
  rc.num_blocks = 40;
  auto runner = ModelRunner::create(std::move(*lm), rc);
  ASSERT_TRUE(runner.is_ok());
  const int32_t vocab = (*runner)->config().vocab_size;
  KVCacheManager kv(40, kBlock);
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 7;
  sc.kv_policy = streaming(sink_blocks, kWindow);
  Scheduler sched(sc, kv);
  std::mt19937 rng(5);
  Sequence seq;
  seq.seq_id = SeqId{1};
  for (int32_t i = 0; i < kLen; ++i) seq.tokens.push_back(static_cast<int32_t>(1 + rng() % (vocab - 1)));
  seq.num_prompt_tokens = kLen;
  seq.max_total_tokens = kLen;
  sched.add(&seq);
  int32_t checked = 0, max_cache = 0;
  double worst = 0;
  while (seq.num_computed_tokens < kLen) {
    SchedulerOutput out = sched.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    out.scheduled[0].num_logits = 1;
    const std::span<const float> logits = (*runner)->execute(out, kv);
    const std::vector<float> got(logits.begin(), logits.end());
    sched.on_step_done(out);
    ASSERT_TRUE(kv.check_invariants().is_ok());
    max_cache = std::max(max_cache, seq.num_cache_tokens());
    // The kept tokens: the sink blocks, then everything after the evicted middle.
    const int32_t sinks = std::min(sink_blocks * kBlock, seq.num_computed_tokens);
    std::vector<int32_t> kept(seq.tokens.begin(), seq.tokens.begin() + sinks);
    kept.insert(kept.end(), seq.tokens.begin() + sinks + seq.num_evicted, seq.tokens.begin() + seq.num_computed_tokens);
    ASSERT_EQ(static_cast<int32_t>(kept.size()), seq.num_cache_tokens());
    auto want = prompt_logits(*lr->runner, kept);
    ASSERT_TRUE(want.is_ok());
    const float* w = &(*want)[(kept.size() - 1) * static_cast<size_t>(vocab)];
    float max_w = 0, err = 0;
    for (int32_t v = 0; v < vocab; ++v) {
      max_w = std::max(max_w, std::fabs(w[v]));
      err = std::max(err, std::fabs(w[v] - got[v]));
    }
    ASSERT_LE(err, tol * max_w) << "after " << seq.num_computed_tokens << " tokens, " << seq.num_evicted << " evicted";
    worst = std::max<double>(worst, err / max_w);
    ++checked;
    sched.set_max_num_batched_tokens(1);
  }
  EXPECT_GT(seq.num_evicted, 100);  // it did evict, many times
  EXPECT_LE(max_cache, sink_blocks * kBlock + kWindow + 2 * kBlock);
  EXPECT_GT(checked, 100);
  std::printf("%s: %d steps checked, worst relative logit error %.3g, at most %d tokens cached\n",
              dtype_name(kv_dtype).data(), checked, worst, max_cache);
}

TEST(Streaming, LogitsEqualAFreshRunOverTheKeptTokens) {
  check_streamed_logits(DType::kF32, 2e-5f, 1);
  check_streamed_logits(DType::kF32, 2e-5f, 0);  // window only, no sinks
  check_streamed_logits(DType::kF16, 5e-3f, 2);
}

TEST(Streaming, AWrongShiftIsCaught) {
  // The same comparison must see an error when the keys are not re-rotated:
  // shift them by one position too many after the fact.
  const std::string path = one_layer_model_path();
  auto lr = make_logits_runner(path, 64, 1);
  ASSERT_TRUE(lr.is_ok());
  auto file = gguf::GGUFFile::open(path);
  auto lm = LlamaModel::load(**file);
  ASSERT_TRUE(lm.is_ok());
  const LlamaModel& model = **lm;
  std::vector<int32_t> ids = {3, 9, 4, 7, 1, 8, 2, 6};
  auto base = prompt_logits(*lr->runner, ids);
  ASSERT_TRUE(base.is_ok());
  // Rotating every key of the cache by +1 changes nothing the next run reads
  // (prompt_logits rewrites them), so compare K directly instead: shift a
  // written block and back, and by a wrong amount.
  KVStorage kv(model.config().num_layers, 2, 4, model.config().num_kv_heads, model.config().head_dim);
  std::vector<float> k(model.config().kv_dim()), v(model.config().kv_dim());
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0, 1);
  for (int32_t slot = 0; slot < 4; ++slot) {
    for (float& x : k) x = n(rng);
    for (float& x : v) x = n(rng);
    kv.write(0, slot, k.data(), v.data());
  }
  const std::vector<float> before(kv.k_block(0, 0), kv.k_block(0, 0) + kv.block_bytes() / sizeof(float));
  ThreadPool pool(1);
  const KeyShift there[] = {{BlockId{0}, 5}}, back[] = {{BlockId{0}, -5}}, wrong[] = {{BlockId{0}, -4}};
  model.shift_keys(there, kv, pool);
  model.shift_keys(back, kv, pool);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_NEAR(kv.k_block(0, 0)[i], before[i], 1e-5f);
  model.shift_keys(there, kv, pool);
  model.shift_keys(wrong, kv, pool);
  float diff = 0;
  for (size_t i = 0; i < before.size(); ++i) diff = std::max(diff, std::fabs(kv.k_block(0, 0)[i] - before[i]));
  EXPECT_GT(diff, 1e-2f);
}

EngineConfig streaming_engine_config(int32_t window, int64_t kv_bytes) {
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.block_size = 4;
  cfg.kv_cache_bytes = kv_bytes;
  cfg.sched.kv_policy = streaming(1, window);
  return cfg;
}

TEST(Streaming, GeneratesFarPastTheContextInBoundedMemory) {
  const std::string path = tiny_model_path("tiny", 64);  // trained context 64
  auto e = Engine::create(path, streaming_engine_config(16, 8 << 20));
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  Engine& eng = **e;
  RequestSpec s = greedy({1, 5, 9, 13, 2, 7}, 20 * 64);  // 20x the context
  s.n = 2;                                               // a fork: both choices evict from shared blocks
  s.sampling.temperature = 1.0f;
  s.sampling.seed = 3;
  ASSERT_TRUE(eng.add_request(s).is_ok());
  int32_t peak = 0;
  std::map<int32_t, int32_t> generated;
  FinishReason reason = FinishReason::kNone;
  while (eng.has_unfinished()) {
    for (const auto& o : eng.step()) {
      generated[o.index] += static_cast<int32_t>(o.new_tokens.size());
      if (o.finished) reason = o.finish_reason;
    }
    peak = std::max(peak, eng.kv_manager().num_blocks() - eng.kv_manager().num_available_blocks());
    const Status inv = eng.kv_manager().check_invariants();
    ASSERT_TRUE(inv.is_ok()) << inv.message();
  }
  EXPECT_EQ(reason, FinishReason::kLength);
  EXPECT_EQ(generated[0], 20 * 64);
  EXPECT_EQ(generated[1], 20 * 64);
  // Two sequences of (sink block + window + a block + the step) at most.
  EXPECT_LE(peak, 2 * (1 + 16 / 4 + 2));
  EXPECT_GE(eng.scheduler().num_evicted_tokens(), 2 * (20 * 64 - 4 - 16 - 4));
  EXPECT_EQ(eng.kv_manager().num_available_blocks(), eng.kv_manager().num_blocks()) << "leaked blocks";
}

TEST(Streaming, WithoutEvictionTheSameTokensAsTheFullCache) {
  const std::string path = tiny_model_path();
  auto full = make_engine(path, 8 << 20);
  auto e = Engine::create(path, streaming_engine_config(1000, 8 << 20));
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  for (Engine* eng : {full.get(), e->get()})
    ASSERT_TRUE(eng->add_request(greedy({1, 4, 8, 15, 16, 23, 42}, 60)).is_ok());
  std::vector<int32_t> a, b;
  while (full->has_unfinished())
    for (const auto& o : full->step()) a.insert(a.end(), o.new_tokens.begin(), o.new_tokens.end());
  while ((*e)->has_unfinished())
    for (const auto& o : (*e)->step()) b.insert(b.end(), o.new_tokens.begin(), o.new_tokens.end());
  EXPECT_EQ(a.size(), 60u);
  EXPECT_EQ(a, b);
}

// Random arrivals and long generations on a pool that forces preemption:
// with swap the outputs equal each request alone (prompts shorter than the
// first eviction and no shared blocks, so eviction points depend on the
// token index only); recompute (which re-prefills in window-sized chunks)
// must still finish and leak nothing.
TEST(Streaming, PreemptionLeaksNothingAndSwapKeepsOutputs) {
  const std::string path = tiny_model_path();
  for (PreemptMode mode : {PreemptMode::kSwap, PreemptMode::kRecompute}) {
    SCOPED_TRACE(mode == PreemptMode::kSwap ? "swap" : "recompute");
    auto probe = make_engine(path, 8 << 20);
    const auto& mc = probe->model_config();
    const int64_t block_bytes = KVStorage::bytes_per_block(mc.num_layers, 4, mc.num_kv_heads, mc.head_dim);
    EngineConfig cfg = streaming_engine_config(12, block_bytes * 22);
    cfg.swap_space_bytes = block_bytes * 64;
    cfg.sched.preempt_mode = mode;
    cfg.sched.max_num_batched_tokens = 16;
    cfg.enable_prefix_caching = false;
    auto e = Engine::create(path, cfg);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    Engine& eng = **e;
    std::mt19937 rng(9);
    std::map<int64_t, RequestSpec> specs;
    std::map<int64_t, std::vector<int32_t>> got;
    for (int step = 0; step < 20000 && (step < 30 || eng.has_unfinished()); ++step) {
      if (step < 30 && step % 3 == 0) {
        std::vector<int32_t> p;
        for (int k = 0; k < 3 + static_cast<int>(rng() % 14); ++k)
          p.push_back(static_cast<int32_t>(1 + rng() % (mc.vocab_size - 1)));
        RequestSpec s = greedy(p, 30 + static_cast<int32_t>(rng() % 60));
        auto id = eng.add_request(s);
        ASSERT_TRUE(id.is_ok()) << id.status().message();
        specs[id->value] = s;
      }
      for (const auto& o : eng.step()) {
        auto& v = got[o.id.value];
        v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
      const Status inv = eng.kv_manager().check_invariants();
      ASSERT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.message();
    }
    ASSERT_FALSE(eng.has_unfinished());
    EXPECT_GT(eng.scheduler().num_preemptions(), 0);
    EXPECT_EQ(eng.kv_manager().num_available_blocks(), eng.kv_manager().num_blocks()) << "leaked blocks";
    EXPECT_EQ(eng.kv_manager().num_free_host_blocks(), eng.kv_manager().num_host_blocks());
    for (auto& [id, s] : specs) {
      ASSERT_EQ(static_cast<int32_t>(got[id].size()), s.max_tokens) << "request " << id;
      if (mode != PreemptMode::kSwap) continue;
      EngineConfig one = streaming_engine_config(12, 8 << 20);
      one.enable_prefix_caching = false;
      auto alone = Engine::create(path, one);
      ASSERT_TRUE((*alone)->add_request(s).is_ok());
      std::vector<int32_t> want;
      while ((*alone)->has_unfinished())
        for (const auto& o : (*alone)->step()) want.insert(want.end(), o.new_tokens.begin(), o.new_tokens.end());
      EXPECT_EQ(got[id], want) << "request " << id;
    }
  }
}

// The same prompt three times: the first run caches its blocks before it
// first evicts (the prompt and the first generated block); the later runs
// share them, then evict from them (copy on write: the cached blocks must
// stay as they were, or the third run reads shifted keys).
TEST(Streaming, PrefixHitsThenEvictionKeepTheCacheIntact) {
  const std::string path = tiny_model_path();
  auto e = Engine::create(path, streaming_engine_config(12, 8 << 20));
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  Engine& eng = **e;
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 16; ++i) prompt.push_back(1 + (i * 7) % 50);  // no eviction before 20 tokens
  std::vector<std::vector<int32_t>> outs;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(eng.add_request(greedy(prompt, 30)).is_ok());
    std::vector<int32_t> got;
    while (eng.has_unfinished()) {
      for (const auto& o : eng.step()) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
      const Status inv = eng.kv_manager().check_invariants();
      ASSERT_TRUE(inv.is_ok()) << inv.message();
    }
    EXPECT_EQ(got.size(), 30u);
    outs.push_back(got);
  }
  EXPECT_GT(eng.stats().num_cached_prompt_tokens, 0);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[1], outs[2]);
  EXPECT_EQ(eng.kv_manager().num_available_blocks(), eng.kv_manager().num_blocks());
}

TEST(Streaming, ConfigErrorsAreClear) {
  const std::string path = tiny_model_path();
  auto small = Engine::create(path, streaming_engine_config(4096, 64 << 10));
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("streaming needs KV room"), std::string::npos) << small.status().message();
  EngineConfig cfg = streaming_engine_config(16, 8 << 20);
  cfg.spec_method = SpecMethod::kNgram;
  EXPECT_FALSE(Engine::create(path, cfg).is_ok());
}

}  // namespace
}  // namespace pagoda
