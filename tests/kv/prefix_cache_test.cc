// The radix prefix cache inside the KV manager: random traces of admit
// (match), grow, compute (insert), fork, free and eviction pressure, with the
// invariants checked after every operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

TEST(PrefixCache, SharedPrefixIsReusedAndSurvivesFree) {
  KVCacheManager kv(32, 4);
  kv.enable_prefix_cache(true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(kv.acquire_cached_prefix(SeqId{1}, a), 0);
  ASSERT_TRUE(kv.allocate_slots(SeqId{1}, 10));
  kv.set_num_tokens(SeqId{1}, 10);
  kv.cache_computed(SeqId{1}, a, 10);
  EXPECT_EQ(kv.prefix_cache()->num_cached_blocks(), 2);
  kv.free(SeqId{1});
  ASSERT_TRUE(kv.check_invariants().is_ok());
  // Cached blocks are evictable, so they count as free.
  EXPECT_EQ(kv.num_available_blocks(), 32);
  std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 8, 99, 100, 101};
  EXPECT_EQ(kv.num_cached_prefix_tokens(b), 8);
  EXPECT_EQ(kv.acquire_cached_prefix(SeqId{2}, b), 8);
  // The full prompt is never served entirely from cache: one token computes.
  // The hit ends inside the second block, which seq 3 shares until it writes.
  std::vector<int32_t> c(a.begin(), a.begin() + 8);
  EXPECT_EQ(kv.num_cached_prefix_tokens(c), 7);
  EXPECT_EQ(kv.acquire_cached_prefix(SeqId{3}, c), 7);
  ASSERT_TRUE(kv.check_invariants().is_ok());
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(SeqId{2})[0]), 3);  // cache + seq 2 + seq 3
  const BlockId shared = kv.block_table(SeqId{3})[1];
  EXPECT_EQ(shared, kv.block_table(SeqId{2})[1]);
  std::vector<BlockCopy> cow;
  ASSERT_TRUE(kv.allocate_for_write(SeqId{3}, 7, 8, &cow));
  ASSERT_EQ(cow.size(), 1u);  // the partly matched block is copied before slot 3 is written
  EXPECT_EQ(cow[0].src, shared);
  EXPECT_EQ(kv.block_table(SeqId{3})[1], cow[0].dst);
  ASSERT_TRUE(kv.check_invariants().is_ok());
}

TEST(PrefixCache, PartialHitTakesTheLongestSharedRunAndLeavesOneToken) {
  KVCacheManager kv(16, 4);
  kv.enable_prefix_cache(true);
  auto compute = [&](int64_t id, const std::vector<int32_t>& toks) {
    const int32_t cached = kv.acquire_cached_prefix(SeqId{id}, toks);
    std::vector<BlockCopy> cow;
    ASSERT_TRUE(kv.allocate_for_write(SeqId{id}, cached, static_cast<int32_t>(toks.size()), &cow));
    kv.set_num_tokens(SeqId{id}, static_cast<int32_t>(toks.size()));
    kv.cache_computed(SeqId{id}, toks, static_cast<int32_t>(toks.size()));
  };
  compute(1, {1, 2, 3, 4, 5, 6, 7, 8});
  compute(2, {1, 2, 3, 4, 5, 9, 9, 9});  // a sibling of block {5, 6, 7, 8}
  // 1 2 3 4 | 5 6 7 x: 3 tokens of the first child beat 1 of the second.
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 0, 0}), 7);
  // 1 2 3 4 | 5 9 x: 2 tokens of the second child.
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{1, 2, 3, 4, 5, 9, 0}), 6);
  // Nothing shared after the whole blocks: no partial hit.
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{1, 2, 3, 4, 7}), 4);
  // Capped so the last token computes: 1 2 3 4 5 6 7 8 -> 7.
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}), 7);
  // A hit inside the first block.
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{1, 2, 0}), 2);
  ASSERT_TRUE(kv.check_invariants().is_ok());
}

TEST(PrefixCache, FinishedSequencesLeaveTheirPartialBlock) {
  KVCacheManager kv(16, 4);
  kv.enable_prefix_cache(true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6};
  ASSERT_EQ(kv.acquire_cached_prefix(SeqId{1}, a), 0);
  std::vector<BlockCopy> cow;
  ASSERT_TRUE(kv.allocate_for_write(SeqId{1}, 0, 6, &cow));
  kv.set_num_tokens(SeqId{1}, 6);
  kv.cache_computed(SeqId{1}, a, 6);
  EXPECT_EQ(kv.prefix_cache()->num_cached_blocks(), 1);
  const BlockId tail = kv.block_table(SeqId{1})[1];
  kv.cache_finished(SeqId{1}, a);
  kv.free(SeqId{1});
  EXPECT_EQ(kv.prefix_cache()->num_cached_blocks(), 2);  // the partial leaf {5, 6}
  ASSERT_TRUE(kv.check_invariants().is_ok());
  // A prompt that continues it shares the two slots (and copies the block).
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(kv.num_cached_prefix_tokens(b), 6);
  EXPECT_EQ(kv.acquire_cached_prefix(SeqId{2}, b), 6);
  EXPECT_EQ(kv.block_table(SeqId{2})[1], tail);
  cow.clear();
  ASSERT_TRUE(kv.allocate_for_write(SeqId{2}, 6, 7, &cow));
  ASSERT_EQ(cow.size(), 1u);
  EXPECT_EQ(cow[0].src, tail);
  // Offering the same partial block again, or one a sibling covers, adds nothing.
  kv.set_num_tokens(SeqId{2}, 7);
  kv.cache_computed(SeqId{2}, b, 7);
  const int32_t before = kv.prefix_cache()->num_cached_blocks();
  const std::vector<int32_t> c = {1, 2, 3, 4, 5};
  ASSERT_EQ(kv.acquire_cached_prefix(SeqId{3}, c), 4);
  ASSERT_TRUE(kv.allocate_for_write(SeqId{3}, 4, 5, &cow));
  kv.set_num_tokens(SeqId{3}, 5);
  kv.cache_finished(SeqId{3}, c);  // {5} begins the cached {5, 6}
  EXPECT_EQ(kv.prefix_cache()->num_cached_blocks(), before);
  kv.free(SeqId{2});
  kv.free(SeqId{3});
  ASSERT_TRUE(kv.check_invariants().is_ok());
  kv.enable_prefix_cache(false);
  EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesFirst) {
  KVCacheManager kv(4, 2);
  kv.enable_prefix_cache(true);
  auto compute = [&](int64_t id, std::vector<int32_t> toks) {
    ASSERT_TRUE(kv.allocate_slots(SeqId{id}, static_cast<int32_t>(toks.size())));
    kv.set_num_tokens(SeqId{id}, static_cast<int32_t>(toks.size()));
    kv.cache_computed(SeqId{id}, toks, static_cast<int32_t>(toks.size()));
    kv.free(SeqId{id});
  };
  compute(1, {1, 2, 3, 4});  // chain of two blocks
  compute(2, {7, 8});        // one block, used later
  EXPECT_EQ(kv.prefix_cache()->num_cached_blocks(), 3);
  // Touch seq 1's chain so {7,8} becomes the LRU leaf.
  kv.acquire_cached_prefix(SeqId{9}, std::vector<int32_t>{1, 2, 3, 4, 5});
  kv.free(SeqId{9});
  ASSERT_TRUE(kv.allocate_slots(SeqId{3}, 4));  // needs 2 blocks: 1 free + 1 evicted
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{7, 8, 0}), 0);
  EXPECT_EQ(kv.num_cached_prefix_tokens(std::vector<int32_t>{1, 2, 3, 4, 0}), 4);
  ASSERT_TRUE(kv.check_invariants().is_ok());
}

TEST(PrefixCache, NeverEvictsABlockARunningSequenceHolds) {
  KVCacheManager kv(3, 2);
  kv.enable_prefix_cache(true);
  std::vector<int32_t> t = {1, 2, 3, 4};
  ASSERT_TRUE(kv.allocate_slots(SeqId{1}, 4));
  kv.set_num_tokens(SeqId{1}, 4);
  kv.cache_computed(SeqId{1}, t, 4);  // cached and still held
  EXPECT_EQ(kv.num_available_blocks(), 1);
  EXPECT_FALSE(kv.allocate_slots(SeqId{2}, 4));
  ASSERT_TRUE(kv.check_invariants().is_ok());
}

TEST(PrefixCache, RandomTracesKeepInvariants) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + static_cast<int32_t>(rng() % 4);
    KVCacheManager kv(24 + static_cast<int32_t>(rng() % 20), bs);
    kv.enable_prefix_cache(true);
    // Prompts drawn from a few shared stems so prefixes repeat and branch.
    std::vector<std::vector<int32_t>> stems(4);
    for (auto& s : stems)
      for (int i = 0; i < 12; ++i) s.push_back(static_cast<int32_t>(rng() % 5));
    std::map<int64_t, std::vector<int32_t>> live;  // seq -> tokens computed so far
    int64_t next = 0;
    // A stand-in for the K/V: each slot holds the token written there. Every
    // live sequence must read its own tokens through its table, whatever was
    // shared, copied or evicted and reused.
    std::vector<std::vector<int32_t>> slots(static_cast<size_t>(kv.num_blocks()), std::vector<int32_t>(bs, -1));
    auto apply = [&](const std::vector<BlockCopy>& copies) {
      for (const BlockCopy& c : copies) slots[c.dst.value] = slots[c.src.value];
    };
    auto write = [&](SeqId id, int32_t pos, int32_t token) {
      slots[kv.block_table(id)[pos / bs].value][pos % bs] = token;
    };
    for (int op = 0; op < 600; ++op) {
      const int kind = static_cast<int>(rng() % 5);
      if (kind == 0 || live.empty()) {  // admit a new sequence
        std::vector<int32_t> toks = stems[rng() % stems.size()];
        toks.resize(1 + rng() % toks.size());
        for (int i = 0; i < static_cast<int>(rng() % 6); ++i) toks.push_back(static_cast<int32_t>(rng() % 5));
        const SeqId id{next++};
        // The read-only predicate must agree with what the mutators then do.
        const bool fits = kv.can_admit(toks, static_cast<int32_t>(toks.size()));
        const int32_t predicted = kv.num_cached_prefix_tokens(toks);
        const int32_t cached = kv.acquire_cached_prefix(id, toks);
        ASSERT_EQ(cached, predicted);
        ASSERT_LT(cached, static_cast<int32_t>(toks.size()));
        std::vector<BlockCopy> cow;
        const bool allocated = kv.allocate_for_write(id, cached, static_cast<int32_t>(toks.size()), &cow);
        ASSERT_EQ(allocated, fits) << "seed " << seed << " op " << op;
        if (allocated) {
          apply(cow);
          for (int32_t p = cached; p < static_cast<int32_t>(toks.size()); ++p) write(id, p, toks[p]);
          kv.set_num_tokens(id, static_cast<int32_t>(toks.size()));
          kv.cache_computed(id, toks, static_cast<int32_t>(toks.size()));
          live[id.value] = toks;
        } else {
          kv.free(id);
        }
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        const SeqId id{it->first};
        if (kind == 1) {  // finish (its partly filled last block may stay cached) and free
          if (rng() % 2) kv.cache_finished(id, it->second);
          kv.free(id);
          live.erase(it);
        } else if (kind == 2) {  // decode one token (copy-on-write if shared)
          auto& toks = it->second;
          const auto n = static_cast<int32_t>(toks.size());
          const bool fits = kv.can_write(id, n, n + 1);
          std::vector<BlockCopy> cow;
          ASSERT_EQ(kv.allocate_for_write(id, n, n + 1, &cow), fits) << "seed " << seed << " op " << op;
          if (fits) {
            apply(cow);
            toks.push_back(static_cast<int32_t>(rng() % 5));
            write(id, n, toks.back());
            kv.set_num_tokens(id, n + 1);
            kv.cache_computed(id, toks, n + 1);
          }
        } else if (kind == 3) {  // fork
          const SeqId child{next++};
          kv.fork(id, child);
          live[child.value] = it->second;
        } else {  // eviction pressure: a big temporary allocation
          const SeqId tmp{next++};
          if (kv.allocate_slots(tmp, bs * static_cast<int32_t>(rng() % 30)))
            for (BlockId b : kv.block_table(tmp)) std::fill(slots[b.value].begin(), slots[b.value].end(), -2);
          kv.free(tmp);
        }
      }
      const Status st = kv.check_invariants();
      ASSERT_TRUE(st.is_ok()) << "seed " << seed << " op " << op << ": " << st.message();
      for (const auto& [id, toks] : live)
        for (int32_t p = 0; p < static_cast<int32_t>(toks.size()); ++p)
          ASSERT_EQ(slots[kv.block_table(SeqId{id})[p / bs].value][p % bs], toks[p])
              << "seed " << seed << " op " << op << " seq " << id << " pos " << p;
    }
    for (auto& [id, toks] : live) kv.free(SeqId{id});
    ASSERT_TRUE(kv.check_invariants().is_ok());
    // Everything left is cache-only, hence evictable; evict all of it.
    EXPECT_EQ(kv.num_available_blocks(), kv.num_blocks());
    kv.enable_prefix_cache(false);
    EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks()) << "leaked blocks, seed " << seed;
  }
}

}  // namespace
}  // namespace pagoda
