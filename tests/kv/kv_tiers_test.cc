// Tiered KV: blocks round-trip through the host and disk tiers byte for
// byte; the disk tier survives reopening, keeps to its size (least recently
// used files go), rejects damaged files (truncated, flipped bytes, another
// block's header) and never mixes namespaces; and, driven by
// KVCacheManager under random prompts in a small pool, every block a
// sequence reuses holds exactly the K/V its tokens produced, nothing leaks.
#include "kv/kv_tiers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../run_command.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBs = 4;

using testing_util::TempDir;

KVStorage make_storage(int32_t num_blocks) { return KVStorage(2, num_blocks, kBs, 2, 8, DType::kF16); }

std::vector<int32_t> tokens_of(int32_t seed) { return {seed, seed + 1, seed + 2, seed + 3}; }

// Deterministic bytes for a key: what "the model" writes for that block.
std::vector<uint8_t> content_of(const BlockKey& key, size_t n) {
  std::mt19937_64 rng(key.lo ^ key.hi);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::vector<uint8_t> read(const KVStorage& s, int32_t block) {
  std::vector<uint8_t> b(s.bytes_per_block_all());
  s.read_block(BlockId{block}, b.data());
  return b;
}

void fill(KVStorage& s, int32_t block, const BlockKey& key) {
  s.write_block(BlockId{block}, content_of(key, s.bytes_per_block_all()).data());
}

const BlockKey kNs{0x1234, 0x5678};

std::unique_ptr<KVTiers> open_tiers(const KVTierOptions& o, const KVStorage& s, const BlockKey& ns = kNs) {
  auto t = KVTiers::open(o, ns, kBs, s.bytes_per_block_all());
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

// Spills block `block` (holding the content of `key`) and runs the copies.
void spill(KVTiers& t, KVStorage& s, const BlockKey& key, int32_t block, int32_t seed) {
  fill(s, block, key);
  t.stage_spill(key, tokens_of(seed), BlockId{block});
  t.run_pending(s);
}

TEST(KVTiers, StorageBlockBytesRoundTrip) {
  KVStorage s = make_storage(3);
  const BlockKey k{7, 9};
  fill(s, 1, k);
  EXPECT_EQ(read(s, 1), content_of(k, s.bytes_per_block_all()));
  EXPECT_NE(read(s, 0), read(s, 1));
  s.copy_block(BlockId{1}, BlockId{2});
  EXPECT_EQ(read(s, 2), read(s, 1));
}

TEST(KVTiers, OptionsAreChecked) {
  KVStorage s = make_storage(2);
  EXPECT_FALSE(KVTiers::open({}, kNs, kBs, s.bytes_per_block_all()).is_ok());  // no tier at all
  KVTierOptions o;
  o.disk_dir = "/proc/pagoda-cannot-create-this";
  o.disk_bytes = 1 << 20;
  auto bad = KVTiers::open(o, kNs, kBs, s.bytes_per_block_all());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("cannot create"), std::string::npos) << bad.status().message();
  o.disk_dir = TempDir().path.string();
  o.disk_bytes = 0;
  EXPECT_FALSE(KVTiers::open(o, kNs, kBs, s.bytes_per_block_all()).is_ok());
}

TEST(KVTiers, HostTierRoundTripsAndOverflowsToDisk) {
  TempDir dir;
  KVStorage s = make_storage(4);
  KVTierOptions o;
  const size_t entry = s.bytes_per_block_all() + kBs * sizeof(int32_t);
  o.host_bytes = static_cast<int64_t>(2 * entry);  // two blocks
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1 << 20;
  auto t = open_tiers(o, s);
  const BlockKey a{1, 1}, b{2, 2}, c{3, 3};
  spill(*t, s, a, 0, 10);
  spill(*t, s, b, 1, 20);
  EXPECT_EQ(t->stats().host_blocks, 2);
  EXPECT_EQ(t->stats().disk_blocks, 0);
  spill(*t, s, c, 2, 30);  // a, the least recently used, moves to disk
  EXPECT_EQ(t->stats().host_blocks, 2);
  EXPECT_EQ(t->stats().disk_blocks, 1);
  EXPECT_EQ(t->stats().spills, 3);
  for (const auto& [key, seed] : std::vector<std::pair<BlockKey, int32_t>>{{a, 10}, {b, 20}, {c, 30}}) {
    ASSERT_TRUE(t->contains(key));
    ASSERT_TRUE(t->stage_load(key, tokens_of(seed), BlockId{3}));
    t->run_pending(s);
    EXPECT_EQ(read(s, 3), content_of(key, s.bytes_per_block_all()));
  }
  EXPECT_EQ(t->stats().host_hits, 2);
  EXPECT_EQ(t->stats().disk_hits, 1);
  // Other tokens under a known key (a hash collision) are a miss.
  EXPECT_FALSE(t->stage_load(b, tokens_of(99), BlockId{3}));
  EXPECT_FALSE(t->stage_load(a, tokens_of(99), BlockId{3}));
  EXPECT_FALSE(t->stage_load(BlockKey{4, 4}, tokens_of(40), BlockId{3}));
}

TEST(KVTiers, DiskTierSurvivesReopenAndKeepsItsSize) {
  TempDir dir;
  KVStorage s = make_storage(2);
  KVTierOptions o;
  o.disk_dir = dir.path.string();
  const int64_t file = 96 + kBs * 4 + static_cast<int64_t>(s.bytes_per_block_all());
  o.disk_bytes = 3 * file;
  {
    auto t = open_tiers(o, s);
    for (int i = 0; i < 5; ++i) spill(*t, s, BlockKey{static_cast<uint64_t>(i), 0}, 0, i);
    EXPECT_EQ(t->stats().disk_blocks, 3);
    EXPECT_EQ(t->stats().disk_dropped, 2);
    EXPECT_EQ(t->stats().disk_writes, 5);
  }
  auto t = open_tiers(o, s);
  EXPECT_EQ(t->stats().disk_blocks, 3);
  EXPECT_FALSE(t->contains(BlockKey{0, 0}));
  EXPECT_FALSE(t->contains(BlockKey{1, 0}));
  for (int i = 2; i < 5; ++i) {
    const BlockKey k{static_cast<uint64_t>(i), 0};
    ASSERT_TRUE(t->stage_load(k, tokens_of(i), BlockId{1}));
    t->run_pending(s);
    EXPECT_EQ(read(s, 1), content_of(k, s.bytes_per_block_all()));
  }
  // Another model (namespace) sees none of them.
  auto other = open_tiers(o, s, BlockKey{1, 2});
  EXPECT_EQ(other->stats().disk_blocks, 0);
  EXPECT_FALSE(other->contains(BlockKey{4, 0}));
  // A smaller size at the next start drops the oldest.
  t.reset();
  o.disk_bytes = file;
  t = open_tiers(o, s);
  EXPECT_EQ(t->stats().disk_blocks, 1);
}

TEST(KVTiers, DamagedFilesAreRejectedAndDeleted) {
  TempDir dir;
  KVStorage s = make_storage(2);
  KVTierOptions o;
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1 << 20;
  const BlockKey flipped{1, 0}, truncated{2, 0}, renamed{3, 0}, good{4, 0};
  fs::path folder;
  {
    auto t = open_tiers(o, s);
    for (uint64_t i = 1; i <= 4; ++i) spill(*t, s, BlockKey{i, 0}, 0, static_cast<int32_t>(i));
    folder = dir.path / kNs.hex();
  }
  auto file = [&](const BlockKey& k) { return folder / (k.hex() + ".kv"); };
  ASSERT_TRUE(fs::exists(file(flipped)));
  {
    std::fstream f(file(flipped), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c = 0;
    f.read(&c, 1);
    f.seekp(200);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  fs::resize_file(file(truncated), fs::file_size(file(truncated)) - 7);
  fs::remove(file(renamed));
  fs::copy_file(file(good), file(renamed));  // a sound file under another block's name
  std::ofstream(folder / "notes.txt") << "not a block";
  auto t = open_tiers(o, s);
  EXPECT_EQ(t->stats().disk_corrupt, 1);  // the truncated one, at the scan
  EXPECT_FALSE(fs::exists(file(truncated)));
  EXPECT_FALSE(t->contains(truncated));
  EXPECT_TRUE(t->contains(flipped));
  EXPECT_FALSE(t->stage_load(flipped, tokens_of(1), BlockId{1}));
  EXPECT_FALSE(t->stage_load(renamed, tokens_of(3), BlockId{1}));
  EXPECT_EQ(t->stats().disk_corrupt, 3);
  EXPECT_FALSE(t->contains(flipped));
  EXPECT_FALSE(fs::exists(file(flipped)));
  EXPECT_FALSE(fs::exists(file(renamed)));
  EXPECT_FALSE(t->has_pending());
  ASSERT_TRUE(t->stage_load(good, tokens_of(4), BlockId{1}));
  t->run_pending(s);
  EXPECT_EQ(read(s, 1), content_of(good, s.bytes_per_block_all()));
  EXPECT_TRUE(fs::exists(folder / "notes.txt"));  // not ours: left alone
}

TEST(KVTiers, EvictingABlockBeforeItsLoadRanCancelsTheLoad) {
  TempDir dir;
  KVStorage s = make_storage(2);
  KVTierOptions o;
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1 << 20;
  auto t = open_tiers(o, s);
  const BlockKey a{1, 0}, junk{2, 0};
  spill(*t, s, a, 0, 1);
  fill(s, 1, junk);
  ASSERT_TRUE(t->stage_load(a, tokens_of(1), BlockId{1}));
  t->stage_spill(a, tokens_of(1), BlockId{1});  // evicted again before the load ran
  EXPECT_FALSE(t->has_pending());
  t->run_pending(s);
  EXPECT_EQ(read(s, 1), content_of(junk, s.bytes_per_block_all()));  // untouched
  ASSERT_TRUE(t->stage_load(a, tokens_of(1), BlockId{1}));           // and still on disk
  t->run_pending(s);
  EXPECT_EQ(read(s, 1), content_of(a, s.bytes_per_block_all()));
}

// The manager and the tiers together: random prompts over a few shared
// prefixes, a pool too small to keep them all, and a "model" that writes
// each computed block's content from its hash-chain key. Before each reuse,
// the blocks a sequence shares must hold exactly its prefix's content.
TEST(KVTiers, ManagerTraceReusesOnlyTheRightBytes) {
  for (const int64_t host_blocks : {0, 3}) {
    TempDir dir;
    constexpr int32_t kBlocks = 12;
    KVStorage s = make_storage(kBlocks);
    KVTierOptions o;
    o.host_bytes = host_blocks * static_cast<int64_t>(s.bytes_per_block_all() + kBs * 4);
    o.disk_dir = dir.path.string();
    o.disk_bytes = 40 * static_cast<int64_t>(96 + kBs * 4 + s.bytes_per_block_all());
    auto tiers = open_tiers(o, s);
    auto m = std::make_unique<KVCacheManager>(kBlocks, kBs);
    m->enable_prefix_cache(true);
    m->attach_tiers(tiers.get());
    std::mt19937 rng(7 + static_cast<uint32_t>(host_blocks));
    std::vector<std::vector<int32_t>> stems;
    for (int i = 0; i < 5; ++i) {
      std::vector<int32_t> t;
      for (int j = 0; j < 3 * kBs + 1 + static_cast<int>(rng() % 12); ++j) t.push_back(static_cast<int32_t>(rng() % 9));
      stems.push_back(t);
    }
    auto keys_of = [&](std::span<const int32_t> t) {
      std::vector<BlockKey> keys;
      BlockKey k = tiers->root();
      for (size_t i = 0; i + kBs <= t.size(); i += kBs) keys.push_back(k = chain_block_key(k, t.subspan(i, kBs)));
      return keys;
    };
    int64_t reused_blocks = 0;
    for (int round = 0; round < 400; ++round) {
      std::vector<int32_t> prompt = stems[rng() % stems.size()];
      const int extra = static_cast<int>(rng() % 6);
      for (int j = 0; j < extra; ++j) prompt.push_back(static_cast<int32_t>(rng() % 9));
      const SeqId seq{round};
      const auto n = static_cast<int32_t>(prompt.size());
      m->restore_prefix(prompt);
      ASSERT_TRUE(m->check_invariants().is_ok()) << m->check_invariants().message();
      const int32_t cached = m->acquire_cached_prefix(seq, prompt);
      std::vector<BlockCopy> cow;  // a hit ending inside a block shares it until this write
      ASSERT_TRUE(m->allocate_for_write(seq, cached, n, &cow)) << "round " << round;
      tiers->run_pending(s);  // "the forward": the tiers' copies first, as ModelRunner::execute
      for (const BlockCopy& c : cow) s.copy_block(c.src, c.dst);
      const std::vector<BlockKey> keys = keys_of(prompt);
      const std::vector<BlockId>& table = m->block_table(seq);
      for (int32_t b = 0; b < cached / kBs; ++b) {
        ASSERT_EQ(read(s, table[b].value), content_of(keys[b], s.bytes_per_block_all()))
            << "round " << round << " block " << b;
        ++reused_blocks;
      }
      for (int32_t b = cached / kBs; b < n / kBs; ++b) fill(s, table[b].value, keys[b]);  // computed now
      m->set_num_tokens(seq, n);
      m->cache_computed(seq, prompt, n);
      m->free(seq);
      ASSERT_TRUE(m->check_invariants().is_ok()) << m->check_invariants().message();
    }
    const KVTierStats st = tiers->stats();
    EXPECT_GT(st.spills, 20);
    EXPECT_GT(st.host_hits + st.disk_hits, 20);
    if (host_blocks > 0) {
      EXPECT_GT(st.host_hits, 0);
    }
    EXPECT_GT(reused_blocks, 200);
    EXPECT_EQ(m->num_seqs(), 0);
    EXPECT_EQ(m->num_available_blocks(), kBlocks);  // nothing leaked
  }
}

}  // namespace
}  // namespace pagoda
