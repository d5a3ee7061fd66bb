#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace pagoda {
namespace {

void expect_ok(const KVCacheManager& m) {
  Status st = m.check_invariants();
  EXPECT_TRUE(st.is_ok()) << st.message();
}

TEST(KVCacheManager, AllocateGrowsAndCountsBlocks) {
  KVCacheManager m(10, 4);
  SeqId a{1};
  EXPECT_EQ(m.num_blocks_needed(a, 0), 0);
  EXPECT_EQ(m.num_blocks_needed(a, 1), 1);
  EXPECT_EQ(m.num_blocks_needed(a, 4), 1);
  EXPECT_EQ(m.num_blocks_needed(a, 5), 2);
  ASSERT_TRUE(m.allocate_slots(a, 5));
  EXPECT_EQ(m.block_table(a).size(), 2u);
  EXPECT_EQ(m.capacity(a), 8);
  EXPECT_EQ(m.num_blocks_needed(a, 8), 0);
  EXPECT_EQ(m.num_blocks_needed(a, 9), 1);
  EXPECT_EQ(m.num_blocks_needed(a, 3), 0);  // never shrinks
  ASSERT_TRUE(m.allocate_slots(a, 3));
  EXPECT_EQ(m.block_table(a).size(), 2u);
  EXPECT_EQ(m.num_available_blocks(), 8);
  const std::vector<BlockId>& t = m.block_table(a);
  EXPECT_EQ(m.slot_of(a, 0), int64_t{t[0].value} * 4);
  EXPECT_EQ(m.slot_of(a, 6), int64_t{t[1].value} * 4 + 2);
  EXPECT_TRUE(m.block_table(SeqId{99}).empty());
  expect_ok(m);
  m.free(a);
  m.free(a);  // unknown now: ignored
  EXPECT_EQ(m.num_available_blocks(), 10);
  EXPECT_FALSE(m.contains(a));
  expect_ok(m);
}

TEST(KVCacheManager, AllocateIsAllOrNothing) {
  KVCacheManager m(5, 3);
  SeqId a{1}, b{2};
  ASSERT_TRUE(m.allocate_slots(a, 7));  // 3 blocks
  ASSERT_TRUE(m.allocate_slots(b, 2));  // 1 block
  const std::vector<BlockId> table_b = m.block_table(b);
  EXPECT_EQ(m.num_blocks_needed(b, 9), 2);
  EXPECT_FALSE(m.can_allocate(b, 9));
  EXPECT_FALSE(m.allocate_slots(b, 9));  // needs 2, 1 free
  EXPECT_EQ(m.block_table(b), table_b);
  EXPECT_EQ(m.num_available_blocks(), 1);
  EXPECT_FALSE(m.allocate_slots(SeqId{3}, 4));  // a new sequence that does not fit is not created
  EXPECT_FALSE(m.contains(SeqId{3}));
  EXPECT_TRUE(m.can_allocate(b, 6));
  EXPECT_TRUE(m.allocate_slots(b, 6));
  EXPECT_EQ(m.num_available_blocks(), 0);
  expect_ok(m);
}

TEST(KVCacheManager, WasteAndUtilizationHandExample) {
  KVCacheManager m(10, 4);
  EXPECT_EQ(m.kv_waste(), 0.0);
  EXPECT_EQ(m.utilization(), 0.0);
  SeqId a{1}, b{2};
  ASSERT_TRUE(m.allocate_slots(a, 5));  // 2 blocks = 8 slots
  ASSERT_TRUE(m.allocate_slots(b, 4));  // 1 block = 4 slots
  m.set_num_tokens(a, 5);
  m.set_num_tokens(b, 4);
  EXPECT_DOUBLE_EQ(m.kv_waste(), 3.0 / 12.0);  // (12 - 9) / 12
  EXPECT_DOUBLE_EQ(m.utilization(), 3.0 / 10.0);
  m.set_num_tokens(a, 1);
  EXPECT_DOUBLE_EQ(m.kv_waste(), 7.0 / 12.0);
  m.free(b);
  EXPECT_DOUBLE_EQ(m.kv_waste(), 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(m.utilization(), 2.0 / 10.0);
}

TEST(KVCacheManager, ForkSharesAndCopyOnWriteSplits) {
  KVCacheManager m(6, 2);
  SeqId p{1}, c{2};
  ASSERT_TRUE(m.allocate_slots(p, 3));  // blocks x, y
  m.set_num_tokens(p, 3);
  m.fork(p, c);
  EXPECT_EQ(m.block_table(c), m.block_table(p));
  EXPECT_EQ(m.num_tokens(c), 3);
  EXPECT_EQ(m.num_available_blocks(), 4);
  const BlockId y = m.block_table(p)[1];
  EXPECT_EQ(m.pool().ref_count(y), 2);
  expect_ok(m);

  EXPECT_EQ(m.num_cow_blocks_needed(c, 2, 4), 1);
  EXPECT_EQ(m.num_cow_blocks_needed(c, 0, 4), 2);
  auto copy = m.prepare_write(c, 3);
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->src, y);
  EXPECT_NE(copy->dst, y);
  EXPECT_EQ(m.block_table(c)[1], copy->dst);
  EXPECT_EQ(m.block_table(p)[1], y);
  EXPECT_EQ(m.pool().ref_count(y), 1);
  EXPECT_EQ(m.pool().ref_count(copy->dst), 1);
  EXPECT_FALSE(m.prepare_write(c, 2).has_value());  // now private
  EXPECT_FALSE(m.prepare_write(p, 2).has_value());  // the parent's is private too
  EXPECT_EQ(m.num_cow_blocks_needed(c, 2, 4), 0);
  expect_ok(m);
  m.free(p);
  m.free(c);
  EXPECT_EQ(m.num_available_blocks(), 6);
  expect_ok(m);
}

TEST(KVCacheManagerDeathTest, MisuseChecks) {
  KVCacheManager m(2, 4);
  ASSERT_TRUE(m.allocate_slots(SeqId{1}, 4));
  EXPECT_DEATH(m.slot_of(SeqId{1}, 4), "CHECK failed");
  EXPECT_DEATH(m.set_num_tokens(SeqId{1}, 5), "CHECK failed");
  EXPECT_DEATH(m.fork(SeqId{1}, SeqId{1}), "CHECK failed");
  EXPECT_DEATH(m.fork(SeqId{7}, SeqId{8}), "CHECK failed");
  m.fork(SeqId{1}, SeqId{2});
  ASSERT_TRUE(m.allocate_slots(SeqId{3}, 1));  // pool now empty
  EXPECT_DEATH(m.prepare_write(SeqId{2}, 0), "CHECK failed");
}

TEST(KVCacheManager, ValidateConfig) {
  EXPECT_TRUE(KVCacheManager::validate_config(100, 16).is_ok());
  EXPECT_FALSE(KVCacheManager::validate_config(100, 0).is_ok());
  EXPECT_FALSE(KVCacheManager::validate_config(-1, 16).is_ok());
  EXPECT_FALSE(KVCacheManager::validate_config(int64_t{1} << 40, 16).is_ok());
}

// Recurrent-state slots under random admit / grow / fork / swap / free
// traces: every live sequence (resident or swapped) holds its own slot for
// its whole life, a fork gets a fresh one, a swapped sequence keeps its
// own, freed ids are reused before new ones, and nothing leaks.
TEST(KVCacheManager, StateSlotsFollowSequencesThroughRandomTraces) {
  int64_t num_swaps = 0, num_forks = 0, num_reused = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const int32_t num_blocks = 6 + rng() % 10;
    KVCacheManager m(num_blocks, 2, /*num_host_blocks=*/8);
    m.enable_state_slots();
    std::map<int64_t, int32_t> slot_of;  // live sequence -> its slot (must never change)
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % n); };
    for (int step = 0; step < 400; ++step) {
      const SeqId s{pick(8)};
      const int op = static_cast<int>(pick(5));
      const bool live = slot_of.count(s.value) != 0;
      if (op == 0 && !m.is_swapped(s)) {  // admit or grow
        const int32_t free_before = m.num_free_state_slots();
        if (!m.allocate_slots(s, m.capacity(s) + 1 + static_cast<int32_t>(pick(4)))) {
          ASSERT_EQ(m.contains(s), live);
          continue;
        }
        if (!live) {
          slot_of[s.value] = m.state_slot(s);
          if (free_before > 0) {
            ++num_reused;
            ASSERT_EQ(m.num_free_state_slots(), free_before - 1);  // a freed id first
          }
        }
      } else if (op == 1 && live && !m.is_swapped(s)) {  // fork
        const SeqId child{pick(8)};
        if (m.contains(child) || m.is_swapped(child)) continue;
        m.fork(s, child);
        ++num_forks;
        slot_of[child.value] = m.state_slot(child);
        ASSERT_NE(slot_of[child.value], slot_of[s.value]);
      } else if (op == 2 && live) {  // swap out or in
        std::vector<BlockCopy> copies;
        const bool ok = m.is_swapped(s) ? m.swap_in(s, &copies) : m.swap_out(s, &copies);
        num_swaps += ok;
      } else if (op == 3) {  // finish (or recompute preemption): the slot goes back
        m.free(s);
        slot_of.erase(s.value);
        ASSERT_EQ(m.state_slot(s), -1);
      }
      for (const auto& [id, slot] : slot_of) ASSERT_EQ(m.state_slot(SeqId{id}), slot) << "seq " << id;
      Status st = m.check_invariants();
      ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.message();
      ASSERT_EQ(m.num_state_slots() - m.num_free_state_slots(), static_cast<int32_t>(slot_of.size()));
    }
    for (int64_t id = 0; id < 8; ++id) m.free(SeqId{id});
    EXPECT_EQ(m.num_free_state_slots(), m.num_state_slots());
    EXPECT_EQ(m.num_free_blocks(), num_blocks);
    expect_ok(m);
  }
  EXPECT_GT(num_swaps, 50);
  EXPECT_GT(num_forks, 50);
  EXPECT_GT(num_reused, 50);
}

// State snapshots with the prefix cache: random prompts continuing earlier
// ones are admitted, computed and finished; a hit must stop exactly at a
// snapshot whose tokens begin the prompt, queue the copy of that snapshot's
// slot into the new sequence's, and slots, blocks and snapshots stay
// consistent (check_invariants) with at most the allowed snapshots.
TEST(KVCacheManager, StateSnapshotsServePrefixHitsThroughRandomTraces) {
  int64_t num_hits = 0, num_misses = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const int32_t bs = 1 + static_cast<int32_t>(rng() % 4);
    KVCacheManager m(40, bs);
    m.enable_state_slots(/*max_state_snapshots=*/3);
    m.enable_prefix_cache(true);
    std::vector<std::vector<int32_t>> finished;           // token lists of finished sequences
    std::map<int32_t, std::vector<int32_t>> slot_tokens;  // what each snapshot slot's state stands for
    for (int step = 0; step < 150; ++step) {
      // A prompt: a finished sequence's tokens (maybe cut) plus new ones, or fresh.
      std::vector<int32_t> prompt;
      if (!finished.empty() && rng() % 4 != 0) {
        prompt = finished[rng() % finished.size()];
        if (rng() % 3 == 0) prompt.resize(rng() % (prompt.size() + 1));
      }
      for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) prompt.push_back(static_cast<int32_t>(rng() % 3));
      const SeqId s{step};
      const int32_t cached = m.num_cached_prefix_tokens(prompt);
      const auto total = static_cast<int32_t>(prompt.size()) + 2;  // two generated tokens
      if (!m.can_admit(prompt, total)) continue;
      ASSERT_EQ(m.acquire_cached_prefix(s, prompt), cached);
      std::vector<StateCopy> copies;
      m.take_state_copies(&copies);
      if (cached > 0) {
        ++num_hits;
        ASSERT_EQ(copies.size(), 1u);
        ASSERT_EQ(copies[0].dst, m.state_slot(s));
        const std::vector<int32_t>& key = slot_tokens.at(copies[0].src);
        ASSERT_EQ(static_cast<int32_t>(key.size()), cached);  // exactly at the snapshot
        ASSERT_TRUE(std::equal(key.begin(), key.end(), prompt.begin()));
      } else {
        ++num_misses;
        ASSERT_TRUE(copies.empty());
      }
      std::vector<BlockCopy> cow;
      ASSERT_TRUE(m.allocate_for_write(s, cached, total, &cow));
      // Computed: the prompt and the first generated token; the second is sampled, never fed.
      std::vector<int32_t> tokens = prompt;
      tokens.push_back(5);
      tokens.push_back(6);
      m.set_num_tokens(s, total - 1);
      m.cache_computed(s, tokens, total - 1);
      const int32_t slot = m.state_slot(s);
      const int32_t snapshots_before = m.num_state_snapshots();
      m.cache_finished(s, tokens);
      if (m.state_slot(s) == -1) {  // the slot became a snapshot
        slot_tokens[slot] = std::vector<int32_t>(tokens.begin(), tokens.end() - 1);
        ASSERT_LE(m.num_state_snapshots(), 3);
        ASSERT_GE(m.num_state_snapshots(), std::min(snapshots_before, 2));
      }
      m.free(s);
      finished.push_back(tokens);
      const Status st = m.check_invariants();
      ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.message();
      ASSERT_EQ(m.num_free_state_slots() + m.num_state_snapshots(), m.num_state_slots());
    }
  }
  EXPECT_GT(num_hits, 100);
  EXPECT_GT(num_misses, 100);
}

// Without state slots no sequence holds one.
TEST(KVCacheManager, NoStateSlotsUnlessEnabled) {
  KVCacheManager m(4, 2);
  ASSERT_TRUE(m.allocate_slots(SeqId{1}, 3));
  EXPECT_EQ(m.state_slot(SeqId{1}), -1);
  EXPECT_EQ(m.num_state_slots(), 0);
  expect_ok(m);
}

// Random traces of grow / write / fork / free over a small pool, against a
// shadow model of every sequence's token contents. A fake cache memory with
// one int per slot checks that copy-on-write keeps forks isolated.
TEST(KVCacheManager, RandomTracesKeepInvariantsAndIsolation) {
  int64_t num_failed_allocs = 0, num_copies = 0, num_forks = 0, num_evictions = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const int32_t num_blocks = 4 + rng() % 10;
    const int32_t bs = 1 + rng() % 4;
    KVCacheManager m(num_blocks, bs);
    std::vector<int64_t> memory(static_cast<size_t>(num_blocks) * bs, -1);
    std::map<int64_t, std::vector<int64_t>> shadow;  // seq -> contents of written positions
    int64_t next_value = 0;
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % n); };

    for (int step = 0; step < 400; ++step) {
      const SeqId s{pick(6)};
      const int op = static_cast<int>(pick(5));
      const bool exists = m.contains(s);
      if (op == 0) {  // grow
        const int32_t want = m.capacity(s) + static_cast<int32_t>(pick(2 * bs + 2));
        const int32_t free_before = m.num_available_blocks();
        const std::vector<BlockId> table_before = m.block_table(s);
        const bool predicted = m.can_allocate(s, want);
        const int32_t need = m.num_blocks_needed(s, want);
        ASSERT_EQ(m.allocate_slots(s, want), predicted);
        if (predicted) {
          ASSERT_EQ(m.num_available_blocks(), free_before - need);
          ASSERT_GE(m.capacity(s), want);
          shadow[s.value];  // exists now
        } else {
          ++num_failed_allocs;
          ASSERT_EQ(m.num_available_blocks(), free_before);
          ASSERT_EQ(m.block_table(s), table_before);
          ASSERT_EQ(m.contains(s), exists);
        }
      } else if (op == 1 && exists) {  // write: append or overwrite
        std::vector<int64_t>& content = shadow[s.value];
        const int32_t n = static_cast<int32_t>(content.size());
        const int32_t pos = pick(2) == 0 && n > 0 ? static_cast<int32_t>(pick(n)) : n;
        if (pos >= m.capacity(s) || m.num_cow_blocks_needed(s, pos, pos + 1) > m.num_available_blocks()) continue;
        if (auto copy = m.prepare_write(s, pos)) {
          ++num_copies;
          for (int32_t o = 0; o < bs; ++o) memory[copy->dst.value * bs + o] = memory[copy->src.value * bs + o];
        }
        ASSERT_EQ(m.pool().ref_count(m.block_table(s)[pos / bs]), 1);
        memory[m.slot_of(s, pos)] = next_value;
        if (pos == n)
          content.push_back(next_value);
        else
          content[pos] = next_value;
        ++next_value;
        m.set_num_tokens(s, static_cast<int32_t>(content.size()));
      } else if (op == 2 && exists) {  // fork into an unused id
        const SeqId child{pick(6)};
        if (m.contains(child)) continue;
        const int32_t free_before = m.num_available_blocks();
        m.fork(s, child);
        ++num_forks;
        ASSERT_EQ(m.num_available_blocks(), free_before);
        shadow[child.value] = shadow[s.value];
      } else if (op == 3) {  // free (also of unknown ids)
        m.free(s);
        shadow.erase(s.value);
      } else if (op == 4 && exists) {  // streaming eviction of a whole middle block
        std::vector<int64_t>& content = shadow[s.value];
        const auto n_blocks = static_cast<int32_t>(m.block_table(s).size());
        const int32_t whole = static_cast<int32_t>(content.size()) / bs;
        if (n_blocks < 2 || whole < 1) continue;
        const auto index = static_cast<int32_t>(pick(std::min(n_blocks - 1, whole)));
        std::vector<BlockCopy> cow;
        std::vector<KeyShift> shifts;
        if (!m.evict_block(s, index, &cow, &shifts)) continue;
        ++num_evictions;
        for (const BlockCopy& c : cow)
          for (int32_t o = 0; o < bs; ++o) memory[c.dst.value * bs + o] = memory[c.src.value * bs + o];
        content.erase(content.begin() + index * bs, content.begin() + (index + 1) * bs);
        ASSERT_EQ(static_cast<int32_t>(shifts.size()), n_blocks - 1 - index);
        // A shift rewrites its block in place: it must be private by now.
        constexpr int64_t kShifted = 1 << 20;
        for (const KeyShift& sh : shifts) {
          ASSERT_EQ(m.pool().ref_count(sh.block), 1);
          ASSERT_EQ(sh.delta, -bs);
          for (int32_t o = 0; o < bs; ++o) memory[sh.block.value * bs + o] += kShifted;
        }
        for (int32_t pos = index * bs; pos < static_cast<int32_t>(content.size()); ++pos) content[pos] += kShifted;
      }
      Status st = m.check_invariants();
      ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.message();
      for (const auto& [id, content] : shadow) {
        ASSERT_EQ(m.num_tokens(SeqId{id}), static_cast<int32_t>(content.size()));
        for (int32_t pos = 0; pos < static_cast<int32_t>(content.size()); ++pos) {
          ASSERT_EQ(memory[m.slot_of(SeqId{id}, pos)], content[pos]) << "seq " << id << " pos " << pos;
        }
      }
    }
    for (int64_t id = 0; id < 6; ++id) m.free(SeqId{id});
    EXPECT_EQ(m.num_available_blocks(), num_blocks);
    EXPECT_EQ(m.num_seqs(), 0);
    expect_ok(m);
  }
  // The traces must reach the interesting paths.
  EXPECT_GT(num_failed_allocs, 20);
  EXPECT_GT(num_copies, 20);
  EXPECT_GT(num_forks, 20);
  EXPECT_GT(num_evictions, 20);
  std::printf("failed allocations %lld, copy-on-write copies %lld, forks %lld, evictions %lld\n",
              static_cast<long long>(num_failed_allocs), static_cast<long long>(num_copies),
              static_cast<long long>(num_forks), static_cast<long long>(num_evictions));
}

// KV groups (sliding-window freeing): random admissions with prefix hits,
// chunked steps, forks, speculative rollbacks, finishes and recompute
// preemptions over a small page pool. Each page slot holds a value derived
// from (the tokens up to its position, its group), so a wrong page, a lost
// copy or a hit on other tokens shows. Checked after every operation: the
// invariants (holders of every page and of every sliding page), every full
// group's values over all computed positions, every sliding group's values
// over the window the next query sees, and that no sequence holds sliding
// pages for blocks before that window.
TEST(KVCacheManager, KvGroupsFreeSlidingPagesThroughRandomTraces) {
  int64_t num_hits = 0, num_cut_hits = 0, num_copies = 0, num_forks = 0, num_rollbacks = 0, num_kept = 0;
  int64_t num_swaps = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int64_t n) { return static_cast<int32_t>(rng() % static_cast<uint64_t>(n)); };
    const int32_t groups = 2 + pick(3), full = 1 + pick(groups - 1);
    const int32_t bs = 1 + pick(4), window = 1 + pick(12), num_pages = groups * (3 + pick(12));
    const int32_t num_host_pages = seed % 3 == 0 ? 0 : num_pages;
    KVCacheManager m(num_pages, bs, num_host_pages);
    m.enable_prefix_cache(seed % 4 != 0);
    m.enable_kv_groups(groups, full, window);
    std::vector<uint64_t> memory(static_cast<size_t>(num_pages) * bs, 0);
    std::vector<uint64_t> host(static_cast<size_t>(num_host_pages) * bs, 0);
    std::set<int64_t> swapped;
    struct Seq {
      std::vector<int32_t> tokens;
      int32_t computed = 0;
    };
    std::map<int64_t, Seq> seqs;
    auto value = [](const std::vector<int32_t>& t, int32_t pos, int32_t g) {
      uint64_t h = 1469598103934665603ull + static_cast<uint64_t>(g);
      for (int32_t i = 0; i <= pos; ++i) h = (h ^ static_cast<uint64_t>(t[static_cast<size_t>(i)])) * 1099511628211ull;
      return h;
    };
    auto run_copies = [&](const std::vector<BlockCopy>& cow) {
      for (const BlockCopy& c : cow) {
        for (int32_t o = 0; o < bs; ++o)
          memory[static_cast<size_t>(c.dst.value) * bs + o] = memory[static_cast<size_t>(c.src.value) * bs + o];
        ++num_copies;
      }
    };
    auto write = [&](SeqId id, const Seq& q, int32_t begin, int32_t end) {
      const std::vector<BlockId>& table = m.block_table(id);
      for (int32_t p = begin; p < end; ++p)
        for (int32_t g = 0; g < groups; ++g) {
          const BlockId page = m.page(table[static_cast<size_t>(p / bs)], g);
          ASSERT_GE(page.value, 0) << "a write outside the held pages";
          memory[static_cast<size_t>(page.value) * bs + p % bs] = value(q.tokens, p, g);
        }
    };
    // Runs `n` more tokens of sequence id (new tokens from a small alphabet).
    auto step = [&](SeqId id, int32_t n, bool extend) -> bool {
      Seq& q = seqs[id.value];
      const int32_t begin = q.computed, end = begin + n;
      if (!m.can_write(id, begin, end)) return false;
      std::vector<BlockCopy> cow;
      EXPECT_TRUE(m.allocate_for_write(id, begin, end, &cow));
      run_copies(cow);
      if (extend)
        while (static_cast<int32_t>(q.tokens.size()) < end) q.tokens.push_back(pick(3));
      write(id, q, begin, end);
      return true;
    };
    auto done = [&](SeqId id, int32_t computed) {
      Seq& q = seqs[id.value];
      q.computed = computed;
      m.set_num_tokens(id, computed);
      m.cache_computed(id, q.tokens, computed);
      m.release_window(id, computed);
    };
    const std::vector<int32_t> bases[2] = {{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, {2, 2, 1, 1, 0, 0, 2, 2, 1, 1}};
    for (int op_i = 0; op_i < 300; ++op_i) {
      const SeqId id{pick(6)};
      const bool exists = seqs.count(id.value) != 0;
      const int op = pick(8);
      if (swapped.count(id.value)) {  // swapped out: back in, or dropped
        if (op < 4) {
          if (!m.can_swap_in(id, seqs[id.value].computed)) continue;
          std::vector<BlockCopy> copies;
          ASSERT_TRUE(m.swap_in(id, &copies));
          for (const BlockCopy& c : copies)
            for (int32_t o = 0; o < bs; ++o)
              memory[static_cast<size_t>(c.dst.value) * bs + o] = host[static_cast<size_t>(c.src.value) * bs + o];
          swapped.erase(id.value);
        } else if (op == 4) {
          m.free(id);
          seqs.erase(id.value);
          swapped.erase(id.value);
        }
      } else if (exists && op == 7) {  // preemption by swapping
        std::vector<BlockCopy> copies;
        if (!m.swap_out(id, &copies)) continue;
        for (const BlockCopy& c : copies)
          for (int32_t o = 0; o < bs; ++o)
            host[static_cast<size_t>(c.dst.value) * bs + o] = memory[static_cast<size_t>(c.src.value) * bs + o];
        swapped.insert(id.value);
        ++num_swaps;
      } else if (!exists && op < 3) {  // admit: a base prompt's prefix plus a random tail
        std::vector<int32_t> prompt(bases[pick(2)]);
        prompt.resize(static_cast<size_t>(1 + pick(static_cast<int64_t>(prompt.size()))));
        for (int32_t i = pick(6); i > 0; --i) prompt.push_back(pick(3));
        const int32_t cached = m.num_cached_prefix_tokens(prompt);
        const int32_t chunk = std::min<int32_t>(static_cast<int32_t>(prompt.size()) - cached, 1 + pick(3 * bs));
        if (!m.can_admit(prompt, cached + chunk)) continue;
        ASSERT_EQ(m.acquire_cached_prefix(id, prompt), cached);
        seqs[id.value] = Seq{prompt, cached};
        num_hits += cached > 0;
        // A hit is cut back when its window lost its sliding pages.
        if (cached < (static_cast<int32_t>(prompt.size()) - 1) / bs * bs && m.prefix_cache() &&
            m.prefix_cache()->num_cached_tokens(prompt) > cached)
          ++num_cut_hits;
        ASSERT_TRUE(step(id, chunk, false));
        done(id, cached + chunk);
      } else if (exists && op < 3) {  // a step: the rest of the prompt in chunks, or decode
        Seq& q = seqs[id.value];
        const int32_t left = static_cast<int32_t>(q.tokens.size()) - q.computed;
        const int32_t n = left > 0 ? std::min(left, 1 + pick(3 * bs)) : 1;
        if (step(id, n, left <= 0)) done(id, q.computed + n);
      } else if (exists && op == 3) {  // speculation: k drafts, a of them accepted
        Seq& q = seqs[id.value];
        if (q.computed < static_cast<int32_t>(q.tokens.size())) continue;
        const int32_t k = 1 + pick(4), a = pick(k + 1);
        if (!step(id, k, true)) continue;
        q.tokens.resize(static_cast<size_t>(q.computed + a));
        m.truncate(id, q.computed + a);
        done(id, q.computed + a);
        ++num_rollbacks;
      } else if (exists && op == 4) {  // n > 1: fork into an unused id
        const SeqId child{pick(6)};
        if (seqs.count(child.value)) continue;
        m.fork(id, child);
        seqs[child.value] = seqs[id.value];
        ++num_forks;
      } else if (exists && op == 5) {  // finish
        m.cache_finished(id, seqs[id.value].tokens);
        m.free(id);
        seqs.erase(id.value);
      } else if (exists) {  // recompute preemption
        m.free(id);
        seqs.erase(id.value);
      }
      const Status st = m.check_invariants();
      ASSERT_TRUE(st.is_ok()) << "op " << op_i << ": " << st.message();
      for (const auto& [sid, q] : seqs) {
        if (swapped.count(sid)) continue;
        const std::vector<BlockId>& table = m.block_table(SeqId{sid});
        const int32_t first_seen = std::max(0, q.computed - window + 1);
        for (int32_t p = 0; p < q.computed; ++p)
          for (int32_t g = 0; g < groups; ++g) {
            const BlockId page = m.page(table[static_cast<size_t>(p / bs)], g);
            if (g >= full && p < first_seen) continue;  // outside the window: may be gone
            ASSERT_GE(page.value, 0) << "seq " << sid << " pos " << p << " group " << g;
            ASSERT_EQ(memory[static_cast<size_t>(page.value) * bs + p % bs], value(q.tokens, p, g))
                << "seq " << sid << " pos " << p << " group " << g;
          }
      }
    }
    // Sliding pages outlive their window only where the cache keeps them.
    for (const auto& [sid, q] : seqs) {
      if (swapped.count(sid)) continue;
      const std::vector<BlockId>& table = m.block_table(SeqId{sid});
      for (int32_t b = 0; b < std::max(0, q.computed - window + 1) / bs; ++b)
        num_kept += m.page(table[static_cast<size_t>(b)], full).value >= 0;
    }
    for (int64_t i = 0; i < 6; ++i) m.free(SeqId{i});
    m.enable_prefix_cache(false);
    expect_ok(m);
    EXPECT_EQ(m.num_free_blocks(), num_pages) << "pages leaked";
    EXPECT_EQ(m.num_free_host_blocks(), num_host_pages) << "host pages leaked";
  }
  EXPECT_GT(num_swaps, 30);
  EXPECT_GT(num_hits, 50);
  EXPECT_GT(num_copies, 50);
  EXPECT_GT(num_forks, 20);
  EXPECT_GT(num_rollbacks, 50);
  std::printf(
      "swaps %lld; hits %lld (cut by the window %lld), page copies %lld, forks %lld, rollbacks %lld, kept %lld\n",
      static_cast<long long>(num_swaps), static_cast<long long>(num_hits), static_cast<long long>(num_cut_hits),
      static_cast<long long>(num_copies), static_cast<long long>(num_forks), static_cast<long long>(num_rollbacks),
      static_cast<long long>(num_kept));
}

// One long sequence without a prefix cache: its pages stay at the full
// groups' share of every block plus the sliding groups' share of the blocks
// its window and one chunk span — what lets a sliding-window model's long
// context fit where full tables would not.
TEST(KVCacheManager, KvGroupsLongSequenceHoldsWindowSizedSlidingPages) {
  const int32_t bs = 16, window = 64, groups = 6, full = 1, chunk = 32;
  const int32_t pages = 700;  // 116 blocks with every page: 1,856 tokens
  KVCacheManager m(pages, bs);
  m.enable_kv_groups(groups, full, window);
  const SeqId s{1};
  int32_t computed = 0;
  std::vector<BlockCopy> cow;
  while (computed + chunk <= 8192) {
    ASSERT_TRUE(m.allocate_for_write(s, computed, computed + chunk, &cow)) << "at " << computed;
    computed += chunk;
    m.set_num_tokens(s, computed);
    m.release_window(s, computed);
    const int32_t blocks = (computed + bs - 1) / bs;
    const int32_t sliding_blocks = (window - 1 + chunk) / bs + 2;
    ASSERT_LE(m.num_pinned_pages(), blocks * full + sliding_blocks * (groups - full)) << "at " << computed;
    expect_ok(m);
  }
  EXPECT_EQ(computed, 8192);
  EXPECT_TRUE(cow.empty());
  m.free(s);
  EXPECT_EQ(m.num_free_blocks(), pages);
}

}  // namespace
}  // namespace pagoda
