// SnapKV KV policy (sched/kv_policy.h, model/kv_policies.cc).
//  - exactness: in a one-layer model with one KV head, a token's K/V depends
//    only on its token and position. After the prompt is compressed, each
//    cached key must be the key of one prompt token (which ones SnapKV kept:
//    recovered by matching rows), ascending, the observation window among
//    them; and every later step's logits must equal a fresh forward over just
//    the kept tokens at their original positions. This fails if rows are
//    moved wrongly, new tokens get cache positions as RoPE positions, or
//    blocks are freed that still hold kept rows.
//  - engine: a budget above the prompt changes nothing; compression frees
//    blocks, and preemption, n > 1 and the prefix cache leak nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "engine_test_util.h"
#include "kernels/attention.h"
#include "model/llama_model.h"

namespace pagoda {
namespace {

using testing_util::greedy;
using testing_util::make_engine;
using testing_util::tiny_model_path;

std::string one_layer_one_head_model_path() { return testing_util::small_model_path(1, 1, 4096, 13); }

// A fresh full-cache forward of `tokens` at `positions` (cache positions
// 0..n-1): the last position's logits, and every token's key row.
struct RefRun {
  std::vector<float> logits;
  std::vector<std::vector<float>> keys;
};
RefRun ref_forward(LlamaModel& model, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions) {
  const ModelConfig& c = model.config();
  const auto n = static_cast<int32_t>(tokens.size());
  KVStorage kv(c.num_layers, (n + 3) / 4, 4, c.num_kv_heads, c.head_dim);
  std::vector<BlockId> table;
  for (int32_t b = 0; b < (n + 3) / 4; ++b) table.push_back(BlockId{b});
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.positions = positions;
  for (int32_t i = 0; i < n; ++i) {
    batch.cache_positions.push_back(i);
    batch.slots.push_back(i);
  }
  batch.seqs.push_back(SeqSlice{0, n, n, table.data()});
  batch.logit_rows.push_back(n - 1);
  RefRun r;
  r.logits.resize(c.vocab_size);
  ThreadPool pool(1);
  model.forward(batch, kv, pool, r.logits.data());
  for (int32_t i = 0; i < n; ++i)
    r.keys.emplace_back(kv.k_block(0, 0) + static_cast<size_t>(i) * c.head_dim,
                        kv.k_block(0, 0) + static_cast<size_t>(i + 1) * c.head_dim);
  return r;
}

// Runs 60 random tokens through a scheduler with `sc`'s policy (the first
// prompt_len as the prompt, first_chunk tokens in the first step, then one
// per step). After every step each cached key must be the key of one
// computed token (matched against a fresh run of all 60), in ascending
// order, and the step's logits must equal a fresh forward over the tokens
// the cache held before it plus the step's new ones, at their original
// positions. Returns the number of steps whose cache was compressed.
int32_t check_kept_rows_exact(SchedulerConfig sc, int32_t prompt_len, int32_t first_chunk, int32_t window) {
  const std::string path = one_layer_one_head_model_path();
  auto file = gguf::GGUFFile::open(path);
  EXPECT_TRUE(file.is_ok());
  auto ref_model = LlamaModel::load(**file);
  auto lm = LlamaModel::load(**file);
  EXPECT_TRUE(ref_model.is_ok() && lm.is_ok());
  const ModelConfig c = (*lm)->config();
  EXPECT_EQ(c.num_kv_heads, 1);
  constexpr int32_t kTotal = 60;
  RunnerConfig rc;
  rc.num_threads = 1;
  rc.block_size = 4;
  rc.num_blocks = 32;
  rc.kv_scores = sc.kv_policy.h2o();
  auto runner = ModelRunner::create(std::move(*lm), rc);
  EXPECT_TRUE(runner.is_ok());
  KVCacheManager kv(32, 4);
  sc.max_num_batched_tokens = first_chunk;
  Scheduler sched(sc, kv);
  std::mt19937 rng(21);
  Sequence seq;
  seq.seq_id = SeqId{1};
  for (int32_t i = 0; i < kTotal; ++i) seq.tokens.push_back(static_cast<int32_t>(1 + rng() % (c.vocab_size - 1)));
  seq.num_prompt_tokens = prompt_len;
  seq.max_total_tokens = kTotal;
  sched.add(&seq);
  std::vector<int32_t> all_pos(kTotal);
  for (int32_t i = 0; i < kTotal; ++i) all_pos[i] = i;
  const RefRun full = ref_forward(**ref_model, seq.tokens, all_pos);

  std::vector<int32_t> kept;  // token indices the cache holds, in cache order
  int32_t compressions = 0;
  std::vector<float> row(c.head_dim);
  while (seq.num_computed_tokens < kTotal) {
    SchedulerOutput out = sched.schedule();
    EXPECT_EQ(out.scheduled.size(), 1u);
    if (out.scheduled.size() != 1) return -1;
    out.scheduled[0].num_logits = 1;
    compressions += out.scheduled[0].compress_to > 0;
    const int32_t first = seq.num_computed_tokens;
    const std::span<const float> logits = (*runner)->execute(out, kv);
    const std::vector<float> got(logits.begin(), logits.end());
    sched.on_step_done(out);
    sched.set_max_num_batched_tokens(1);
    EXPECT_TRUE(kv.check_invariants().is_ok());
    // The step attended to the tokens cached before it and its own.
    std::vector<int32_t> toks, pos;
    for (int32_t i : kept) {
      toks.push_back(seq.tokens[i]);
      pos.push_back(i);
    }
    for (int32_t i = first; i < seq.num_computed_tokens; ++i) {
      toks.push_back(seq.tokens[i]);
      pos.push_back(i);
    }
    const RefRun want = ref_forward(**ref_model, toks, pos);
    float max_w = 0, err = 0;
    for (int32_t v = 0; v < c.vocab_size; ++v) {
      max_w = std::max(max_w, std::fabs(want.logits[v]));
      err = std::max(err, std::fabs(want.logits[v] - got[v]));
    }
    EXPECT_LE(err, 1e-5f * max_w) << "after " << seq.num_computed_tokens << " tokens";
    if (err > 1e-5f * max_w) return -1;
    // Which token does each cached key belong to now?
    const KVStorage& st = (*runner)->kv_storage();
    kept.clear();
    for (int32_t k = 0; k < seq.num_cache_tokens(); ++k) {
      kernels::load_kv_row(st.dtype(), st.k_row(0, 0, kv.slot_of(seq.seq_id, k)), c.head_dim, row.data());
      int32_t match = -1;
      for (int32_t i = 0; i < seq.num_computed_tokens; ++i) {
        float d = 0;
        for (int32_t e = 0; e < c.head_dim; ++e) d = std::max(d, std::fabs(row[e] - full.keys[i][e]));
        if (d < 1e-5f) match = i;
      }
      EXPECT_GE(match, 0) << "cache position " << k << " holds no computed token's key";
      kept.push_back(match);
    }
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    EXPECT_EQ(std::adjacent_find(kept.begin(), kept.end()), kept.end());
    if (sc.kv_policy.h2o() && compressions == 0) {
      // Nothing evicted yet: every query row's softmax (token x head of the
      // group) put mass 1 on the cached rows.
      double sum = 0;
      for (int32_t k = 0; k < seq.num_cache_tokens(); ++k) sum += st.score(0, 0, kv.slot_of(seq.seq_id, k));
      EXPECT_NEAR(sum, static_cast<double>(seq.num_computed_tokens) * (c.num_heads / c.num_kv_heads), 1e-3);
    }
    // The most recent `window` tokens are never evicted.
    for (int32_t i = std::max(0, seq.num_computed_tokens - window); i < seq.num_computed_tokens; ++i)
      EXPECT_NE(std::find(kept.begin(), kept.end(), i), kept.end()) << "recent token " << i;
    EXPECT_EQ(static_cast<int32_t>(kv.block_table(seq.seq_id).size()), (seq.num_cache_tokens() + 3) / 4);
  }
  EXPECT_EQ(seq.num_evicted, kTotal - seq.num_cache_tokens());
  return compressions;
}

TEST(SnapKv, KeptRowsAndLaterLogitsEqualAFreshRunOverTheKeptTokens) {
  SchedulerConfig sc;
  sc.kv_policy = {KvPolicyKind::kSnapKv, 0, 4, 12, 3};
  EXPECT_EQ(check_kept_rows_exact(sc, 40, 40, 4), 1);  // once, at the end of the prompt
}

TEST(H2o, KeptRowsAndLogitsEqualAFreshRunOverTheKeptTokens) {
  SchedulerConfig sc;
  sc.kv_policy = {KvPolicyKind::kH2o, 0, 4, 12};
  // The cache reaches 16 = budget + a block every 4 tokens from the 16th on.
  EXPECT_GE(check_kept_rows_exact(sc, 60, 8, 4), 10);
}

EngineConfig snapkv_config(int32_t budget, int32_t window, int64_t kv_bytes, bool h2o = false) {
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.block_size = 4;
  cfg.kv_cache_bytes = kv_bytes;
  cfg.sched.kv_policy.kind = h2o ? KvPolicyKind::kH2o : KvPolicyKind::kSnapKv;
  cfg.sched.kv_policy.budget = budget;
  cfg.sched.kv_policy.window = window;
  return cfg;
}

std::vector<int32_t> run_one(Engine& e, const RequestSpec& s) {
  EXPECT_TRUE(e.add_request(s).is_ok());
  std::vector<int32_t> out;
  while (e.has_unfinished())
    for (const auto& o : e.step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

TEST(SnapKv, ABudgetAboveTheSequenceChangesNothing) {
  const std::string path = tiny_model_path();
  auto full = make_engine(path, 8 << 20);
  for (bool h2o : {false, true}) {
    auto e = Engine::create(path, snapkv_config(64, 8, 8 << 20, h2o));
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    const RequestSpec s = greedy({1, 4, 8, 15, 16, 23, 42, 7, 9, 11}, 40);
    EXPECT_EQ(run_one(*full, s), run_one(**e, s)) << (h2o ? "h2o" : "snapkv");
  }
  // SnapKV compresses prompts only: a short prompt decoding far past the
  // budget keeps everything (twice: the second run hits the prefix cache).
  auto e = Engine::create(path, snapkv_config(16, 4, 8 << 20));
  ASSERT_TRUE(e.is_ok());
  const RequestSpec s = greedy({1, 4, 8, 15, 16, 23, 42, 7, 9, 11}, 40);
  const std::vector<int32_t> want = run_one(*full, s);
  EXPECT_EQ(run_one(**e, s), want);
  EXPECT_EQ(run_one(**e, s), want);
  EXPECT_EQ((*e)->scheduler().num_evicted_tokens(), 0);
}

// Random long prompts on a pool that forces preemption, some with n = 2:
// compression frees blocks, every request finishes, nothing leaks.
TEST(SnapKv, CompressionPreemptionAndForksLeakNothing) {
  const std::string path = tiny_model_path();
  for (int run = 0; run < 4; ++run) {
    const PreemptMode mode = run % 2 ? PreemptMode::kRecompute : PreemptMode::kSwap;
    const bool h2o = run >= 2;
    SCOPED_TRACE(std::string(h2o ? "h2o " : "snapkv ") + (mode == PreemptMode::kSwap ? "swap" : "recompute"));
    auto probe = make_engine(path, 8 << 20);
    const auto& mc = probe->model_config();
    const int64_t block_bytes = KVStorage::bytes_per_block(mc.num_layers, 4, mc.num_kv_heads, mc.head_dim);
    // H2O keeps every sequence near its budget: a smaller pool still forces preemption.
    EngineConfig cfg = snapkv_config(12, 4, block_bytes * (h2o ? 18 : 40), h2o);
    cfg.swap_space_bytes = block_bytes * 64;
    cfg.sched.preempt_mode = mode;
    cfg.sched.max_num_batched_tokens = 24;
    auto e = Engine::create(path, cfg);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    Engine& eng = **e;
    std::mt19937 rng(17);
    std::map<int64_t, int32_t> want, got;
    for (int step = 0; step < 20000 && (step < 40 || eng.has_unfinished()); ++step) {
      if (step < 40 && step % 4 == 0) {
        std::vector<int32_t> p = {1, 2, 3, 4, 5, 6, 7, 8};  // shared by all: prefix-cache candidates
        for (int k = 0; k < 20 + static_cast<int>(rng() % 60); ++k)
          p.push_back(static_cast<int32_t>(1 + rng() % (mc.vocab_size - 1)));
        RequestSpec s = greedy(p, 10 + static_cast<int32_t>(rng() % 30));
        s.n = step % 8 == 0 ? 2 : 1;
        if (s.n > 1) s.sampling.temperature = 1.0f;
        auto id = eng.add_request(s);
        ASSERT_TRUE(id.is_ok()) << id.status().message();
        want[id->value] = s.max_tokens * s.n;
      }
      for (const auto& o : eng.step()) got[o.id.value] += static_cast<int32_t>(o.new_tokens.size());
      const Status inv = eng.kv_manager().check_invariants();
      ASSERT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.message();
    }
    ASSERT_FALSE(eng.has_unfinished());
    EXPECT_EQ(got, want);
    EXPECT_GT(eng.scheduler().num_preemptions(), 0);
    EXPECT_GT(eng.scheduler().num_evicted_tokens(), 0);
    EXPECT_EQ(eng.kv_manager().num_available_blocks(), eng.kv_manager().num_blocks()) << "leaked blocks";
    EXPECT_EQ(eng.kv_manager().num_free_host_blocks(), eng.kv_manager().num_host_blocks());
  }
}

// Admission by the compressed size: a prompt that fills most of the pool
// generates past what the pool would hold uncompressed (budget + output),
// and nothing leaks. Fails if the sequence is capped at the uncompressed
// prompt plus output.
TEST(SnapKv, ThePoolLimitsTheCompressedCacheNotThePrompt) {
  const std::string path = tiny_model_path();
  auto probe = make_engine(path, 8 << 20);
  const auto& mc = probe->model_config();
  const int64_t block_bytes = KVStorage::bytes_per_block(mc.num_layers, 4, mc.num_kv_heads, mc.head_dim);
  auto e = Engine::create(path, snapkv_config(16, 4, block_bytes * 16));  // 64 tokens
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 48; ++i) prompt.push_back(1 + (i * 7) % (mc.vocab_size - 1));
  RequestSpec s = greedy(prompt, 40);  // 88 tokens in all; cached 16 + 40 = 56 <= 64
  s.ignore_eos = true;
  EXPECT_EQ(run_one(**e, s).size(), 40u);
  EXPECT_EQ((*e)->scheduler().num_evicted_tokens(), 32);
  EXPECT_EQ((*e)->kv_manager().num_available_blocks(), (*e)->kv_manager().num_blocks());
}

TEST(SnapKv, ConfigErrorsAreClear) {
  const std::string path = tiny_model_path();
  EXPECT_FALSE(Engine::create(path, snapkv_config(8, 8, 8 << 20)).is_ok());  // window must be below the budget
  EXPECT_FALSE(Engine::create(path, snapkv_config(8, 8, 8 << 20, true)).is_ok());
  EngineConfig no_pool = snapkv_config(16, 4, 8 << 20);
  no_pool.sched.kv_policy.pool = 0;
  EXPECT_FALSE(Engine::create(path, no_pool).is_ok());
}

}  // namespace
}  // namespace pagoda
