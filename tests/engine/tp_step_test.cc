// The tensor-parallel step message: what rank 0 encodes decodes to the same
// copies and batch (tables included), and every truncation or out-of-range
// index of a message is an error, never an out-of-bounds read or write.
#include "engine/tp_step.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda {
namespace {

constexpr int32_t kBs = 4, kBlocks = 16, kHost = 4, kLayers = 3;

struct Encoded {
  std::vector<std::vector<BlockId>> tables;
  TpStep copies;
  ForwardBatch batch;
  std::vector<uint8_t> bytes;
};

Encoded sample(uint32_t seed) {
  std::mt19937 rng(seed);
  Encoded e;
  e.copies.cow = {{BlockId{1}, BlockId{2}}};
  e.copies.swap_out = {{BlockId{3}, BlockId{0}}};
  e.copies.swap_in = {{BlockId{1}, BlockId{5}}};
  e.copies.evict_cow = {{BlockId{6}, BlockId{7}}};
  e.copies.key_shifts = {{BlockId{8}, -4}};
  const int num_seqs = 1 + static_cast<int>(rng() % 3);
  e.tables.resize(static_cast<size_t>(num_seqs));
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 5), kv_len = n + static_cast<int32_t>(rng() % 7);
    auto& table = e.tables[static_cast<size_t>(s)];
    for (int32_t b = 0; b < (kv_len + kBs - 1) / kBs; ++b)
      table.push_back(BlockId{static_cast<int32_t>(rng() % kBlocks)});
    SeqSlice slice;
    slice.token_begin = static_cast<int32_t>(e.batch.tokens.size());
    slice.num_tokens = n;
    slice.kv_len = kv_len;
    slice.block_table = table.data();
    slice.tree_begin = s == 1 ? 2 : 0;
    for (int32_t i = 0; i < n; ++i) {
      e.batch.tokens.push_back(static_cast<int32_t>(rng() % 100));
      e.batch.positions.push_back(kv_len - n + i);
      e.batch.cache_positions.push_back(kv_len - n + i);
      e.batch.slots.push_back(int64_t{table[static_cast<size_t>((kv_len - n + i) / kBs)].value} * kBs +
                              (kv_len - n + i) % kBs);
      e.batch.tree_masks.push_back(rng());
    }
    e.batch.logit_rows.push_back(slice.token_begin + n - 1);
    e.batch.seqs.push_back(slice);
  }
  encode_tp_step(e.copies.copies(), e.batch, kBs, &e.bytes);
  return e;
}

TEST(TpStep, RoundTrip) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const Encoded e = sample(seed);
    TpStep d;
    ASSERT_TRUE(decode_tp_step(e.bytes, kBs, kBlocks, kHost, kLayers, &d).is_ok());
    EXPECT_EQ(d.batch.tokens, e.batch.tokens);
    EXPECT_EQ(d.batch.positions, e.batch.positions);
    EXPECT_EQ(d.batch.cache_positions, e.batch.cache_positions);
    EXPECT_EQ(d.batch.slots, e.batch.slots);
    EXPECT_EQ(d.batch.logit_rows, e.batch.logit_rows);
    EXPECT_EQ(d.batch.tree_masks, e.batch.tree_masks);
    ASSERT_EQ(d.batch.seqs.size(), e.batch.seqs.size());
    for (size_t i = 0; i < d.batch.seqs.size(); ++i) {
      const SeqSlice &a = d.batch.seqs[i], &b = e.batch.seqs[i];
      EXPECT_EQ(a.token_begin, b.token_begin);
      EXPECT_EQ(a.num_tokens, b.num_tokens);
      EXPECT_EQ(a.kv_len, b.kv_len);
      EXPECT_EQ(a.tree_begin, b.tree_begin);
      EXPECT_EQ(std::vector<BlockId>(a.block_table, a.block_table + e.tables[i].size()), e.tables[i]);
    }
    ASSERT_EQ(d.cow.size(), 1u);
    EXPECT_EQ(d.cow[0].dst, BlockId{2});
    ASSERT_EQ(d.key_shifts.size(), 1u);
    EXPECT_EQ(d.key_shifts[0].delta, -4);
  }
}

TEST(TpStep, MalformedMessagesAreErrors) {
  const Encoded e = sample(3);
  TpStep d;
  for (size_t cut = 0; cut < e.bytes.size(); ++cut) {
    const std::vector<uint8_t> part(e.bytes.begin(), e.bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_FALSE(decode_tp_step(part, kBs, kBlocks, kHost, kLayers, &d).is_ok()) << "cut at " << cut;
  }
  std::vector<uint8_t> extra = e.bytes;
  extra.push_back(0);
  EXPECT_FALSE(decode_tp_step(extra, kBs, kBlocks, kHost, kLayers, &d).is_ok());
  // A smaller receiver: indices out of its range.
  const Status small = decode_tp_step(e.bytes, kBs, 4, kHost, kLayers, &d);
  EXPECT_FALSE(small.is_ok());
  EXPECT_NE(small.message().find("malformed tensor-parallel step"), std::string::npos);
  // Random byte flips: decode either succeeds within range or fails cleanly.
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bad = e.bytes;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    if (decode_tp_step(bad, kBs, kBlocks, kHost, kLayers, &d).is_ok()) {
      for (int64_t s : d.batch.slots) EXPECT_LT(s, int64_t{kBlocks} * kBs);
      for (const auto& t : d.tables)
        for (BlockId b : t) EXPECT_LT(b.value, kBlocks);
    }
  }
}

}  // namespace
}  // namespace pagoda
