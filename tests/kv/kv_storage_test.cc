#include "kv/kv_storage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace pagoda {
namespace {

// A distinct value for every (kind, layer, token, head, dim).
float tag(int kind, int layer, int token, int head, int d) {
  return static_cast<float>(kind * 1000000 + layer * 100000 + token * 1000 + head * 100 + d);
}

TEST(KVStorage, ShapeAndAlignment) {
  KVStorage s(3, 5, 4, 2, 12);
  EXPECT_EQ(s.block_stride(), 2u * 4 * 12);
  EXPECT_EQ(KVStorage::bytes_per_block(3, 4, 2, 12), 2u * 3 * 4 * 2 * 12 * sizeof(float));
  EXPECT_EQ(s.num_bytes(), 5 * KVStorage::bytes_per_block(3, 4, 2, 12));
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.k_layer(l)) % 4, 0u);
    EXPECT_EQ(s.k_block(l, 2), s.k_layer(l) + 2 * s.block_stride());
    EXPECT_EQ(s.v_block(l, 4), s.v_layer(l) + 4 * s.block_stride());
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.k_layer(0)) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.v_layer(0)) % 64, 0u);
  EXPECT_EQ(s.k_block(1, 0)[0], 0.0f);  // zero-initialized
}

TEST(KVStorage, WriteUsesHeadMajorBlockLayout) {
  const int layers = 2, blocks = 4, bs = 3, heads = 2, hd = 5;
  KVStorage s(layers, blocks, bs, heads, hd);
  std::vector<float> k(heads * hd), v(heads * hd);
  for (int l = 0; l < layers; ++l) {
    for (int slot = 0; slot < blocks * bs; ++slot) {
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < hd; ++d) {
          k[h * hd + d] = tag(1, l, slot, h, d);
          v[h * hd + d] = tag(2, l, slot, h, d);
        }
      s.write(l, slot, k.data(), v.data());
    }
  }
  for (int l = 0; l < layers; ++l)
    for (int slot = 0; slot < blocks * bs; ++slot)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < hd; ++d) {
          size_t at = (static_cast<size_t>(h) * bs + slot % bs) * hd + d;
          ASSERT_EQ(s.k_block(l, slot / bs)[at], tag(1, l, slot, h, d));
          ASSERT_EQ(s.v_block(l, slot / bs)[at], tag(2, l, slot, h, d));
        }
}

TEST(KVStorage, CopyBlockCopiesEveryLayerAndNothingElse) {
  const int layers = 3, blocks = 3, bs = 2, heads = 1, hd = 4;
  KVStorage s(layers, blocks, bs, heads, hd);
  for (int l = 0; l < layers; ++l)
    for (int b = 0; b < blocks; ++b)
      for (size_t i = 0; i < s.block_stride(); ++i) {
        s.k_block(l, b)[i] = tag(1, l, b, 0, static_cast<int>(i));
        s.v_block(l, b)[i] = tag(2, l, b, 0, static_cast<int>(i));
      }
  s.copy_block(0, 2);
  for (int l = 0; l < layers; ++l)
    for (size_t i = 0; i < s.block_stride(); ++i) {
      ASSERT_EQ(s.k_block(l, 2)[i], tag(1, l, 0, 0, static_cast<int>(i)));
      ASSERT_EQ(s.v_block(l, 2)[i], tag(2, l, 0, 0, static_cast<int>(i)));
      ASSERT_EQ(s.k_block(l, 1)[i], tag(1, l, 1, 0, static_cast<int>(i)));
      ASSERT_EQ(s.k_block(l, 0)[i], tag(1, l, 0, 0, static_cast<int>(i)));
    }
}

TEST(KVStorage, CreateRejectsBadShapes) {
  EXPECT_FALSE(KVStorage::create(0, 4, 16, 2, 64).is_ok());
  EXPECT_FALSE(KVStorage::create(2, -1, 16, 2, 64).is_ok());
  EXPECT_FALSE(KVStorage::create(2, 4, 0, 2, 64).is_ok());
  EXPECT_FALSE(KVStorage::create(2, 4, 16, 2, 0).is_ok());
  EXPECT_EQ(KVStorage::create(INT32_MAX, INT32_MAX, 16, 8, 128).status().code(), StatusCode::kInvalidArgument);
  auto ok = KVStorage::create(2, 4, 16, 2, 64);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ((*ok)->num_blocks(), 4);
  EXPECT_EQ((*ok)->block_stride(), 2u * 16 * 64);
}

}  // namespace
}  // namespace pagoda
