#include "kv/kv_storage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention.h"

namespace pagoda {
namespace {

// A distinct value for every (kind, layer, token, head, dim).
float tag(int kind, int layer, int token, int head, int d) {
  return static_cast<float>(kind * 1000000 + layer * 100000 + token * 1000 + head * 100 + d);
}

TEST(KVStorage, ShapeAndAlignment) {
  KVStorage s(3, 5, 4, 2, 12);
  EXPECT_EQ(s.block_bytes(), 2u * 4 * 12 * sizeof(float));
  const size_t stride = s.block_bytes() / sizeof(float);
  EXPECT_EQ(KVStorage::bytes_per_block(3, 4, 2, 12), 2u * 3 * 4 * 2 * 12 * sizeof(float));
  EXPECT_EQ(s.num_bytes(), 5 * KVStorage::bytes_per_block(3, 4, 2, 12));
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.k_layer(l)) % 4, 0u);
    EXPECT_EQ(s.k_block(l, 2), s.k_layer(l) + 2 * stride);
    EXPECT_EQ(s.v_block(l, 4), s.v_layer(l) + 4 * stride);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.k_layer(0)) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.v_layer(0)) % 64, 0u);
  EXPECT_EQ(s.k_block(1, 0)[0], 0.0f);  // zero-initialized
}

// The THPeligible flag of the mapping holding `p` (/proc/self/smaps): 1, 0,
// or -1 where the kernel does not report it.
int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

bool thp_offered() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return s.find("[always]") != std::string::npos || s.find("[madvise]") != std::string::npos;
}

// 2 MiB pages by default (attention's TLB); use_small_pages() (a draft
// model's cache) turns them off before anything is written, and the rows
// still read back.
TEST(KVStorage, UseSmallPagesTurnsHugePagesOffForThatCache) {
  // 4 layers x 64 blocks x 16 KiB: 4 MiB of K and of V, room for 2 MiB pages.
  KVStorage huge(4, 64, 16, 4, 64);
  KVStorage small(4, 64, 16, 4, 64);
  small.use_small_pages();
  if (thp_eligible(huge.k_layer(0)) < 0) GTEST_SKIP() << "this kernel's smaps has no THPeligible";
  if (!thp_offered()) GTEST_SKIP() << "transparent huge pages are off on this host";
  EXPECT_EQ(thp_eligible(huge.k_layer(0)), 1);
  EXPECT_EQ(thp_eligible(huge.v_layer(3)), 1);
  EXPECT_EQ(thp_eligible(small.k_layer(0)), 0);
  EXPECT_EQ(thp_eligible(small.v_layer(3)), 0);
  std::vector<float> k(4 * 64), v(4 * 64);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  small.write(3, 63 * 16 + 5, k.data(), v.data());
  EXPECT_EQ(small.k_block(3, 63)[5 * 64 + 7], 7.0f);           // head 0, token 5, dim 7
  EXPECT_EQ(small.v_block(3, 63)[(16 + 5) * 64 + 2], -66.0f);  // head 1, token 5, dim 2
}

// f16 storage: half the bytes, values rounded to half on write, block
// copies (COW) and swaps between storages move the halves unchanged.
// The bytes of block b of layer l, K or V.
std::vector<uint8_t> block_bytes(const KVStorage& st, int l, int b, bool key) {
  const auto* p = static_cast<const uint8_t*>(key ? st.k_data(l) : st.v_data(l)) + b * st.block_bytes();
  return std::vector<uint8_t>(p, p + st.block_bytes());
}

TEST(KVStorage, F16WriteCopyAndSwap) {
  const int layers = 2, blocks = 3, bs = 2, heads = 2, hd = 3;
  KVStorage s(layers, blocks, bs, heads, hd, DType::kF16);
  EXPECT_EQ(s.dtype(), DType::kF16);
  EXPECT_EQ(s.row_bytes(), 2u * hd);
  EXPECT_EQ(KVStorage::bytes_per_block(layers, bs, heads, hd, DType::kF16),
            KVStorage::bytes_per_block(layers, bs, heads, hd) / 2);
  EXPECT_EQ(s.num_bytes(), blocks * KVStorage::bytes_per_block(layers, bs, heads, hd, DType::kF16));
  std::vector<float> k(heads * hd), v(heads * hd);
  for (int l = 0; l < layers; ++l)
    for (int slot = 0; slot < blocks * bs; ++slot) {
      for (int i = 0; i < heads * hd; ++i) {
        k[i] = 0.001f * static_cast<float>(l * 997 + slot * 31 + i) + 1.0f / 3.0f;
        v[i] = -k[i] * 7.0f;
      }
      s.write(l, slot, k.data(), v.data());
      const auto* kd = static_cast<const uint16_t*>(s.k_data(l));
      const auto* vd = static_cast<const uint16_t*>(s.v_data(l));
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < hd; ++d) {
          const size_t at = (slot / bs) * s.block_bytes() / 2 + (static_cast<size_t>(h) * bs + slot % bs) * hd + d;
          EXPECT_EQ(kd[at], fp32_to_fp16(k[h * hd + d]));
          EXPECT_EQ(vd[at], fp32_to_fp16(v[h * hd + d]));
          EXPECT_NEAR(fp16_to_fp32(kd[at]), k[h * hd + d], 1e-3f * std::fabs(k[h * hd + d]));
        }
    }
  s.copy_block(BlockId{0}, BlockId{2});
  KVStorage host(layers, 2, bs, heads, hd, DType::kF16);
  s.copy_block_to(BlockId{1}, host, BlockId{0});
  for (int l = 0; l < layers; ++l) {
    EXPECT_EQ(block_bytes(s, l, 2, true), block_bytes(s, l, 0, true));
    EXPECT_EQ(block_bytes(s, l, 2, false), block_bytes(s, l, 0, false));
    EXPECT_EQ(block_bytes(host, l, 0, true), block_bytes(s, l, 1, true));
    EXPECT_EQ(block_bytes(host, l, 0, false), block_bytes(s, l, 1, false));
  }
}

// Q8_0 / Q4_0 storage: rows of GGML blocks (the last one zero-padded),
// exactly what kernels::store_kv_row writes, each token's row in its slot,
// and block copies / swaps move the bytes unchanged.
TEST(KVStorage, QuantizedWriteCopyAndSwap) {
  for (DType dt : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(dt).data());
    const int layers = 2, blocks = 3, bs = 3, heads = 2, hd = 40;  // two blocks of 32 per row, one padded
    KVStorage s(layers, blocks, bs, heads, hd, dt);
    const size_t rb = dt == DType::kQ8_0 ? 2 * 34 : 2 * 18;
    EXPECT_EQ(s.row_bytes(), rb);
    EXPECT_EQ(s.block_bytes(), rb * bs * heads);
    EXPECT_EQ(KVStorage::bytes_per_block(layers, bs, heads, hd, dt), 2 * layers * s.block_bytes());
    EXPECT_EQ(s.num_bytes(), blocks * KVStorage::bytes_per_block(layers, bs, heads, hd, dt));
    std::vector<float> k(heads * hd), v(heads * hd);
    std::vector<uint8_t> want(rb);
    for (int l = 0; l < layers; ++l)
      for (int slot = 0; slot < blocks * bs; ++slot) {
        for (int i = 0; i < heads * hd; ++i) {
          k[i] = std::sin(0.37f * static_cast<float>(l * 997 + slot * 31 + i));
          v[i] = -2.0f * k[i];
        }
        s.write(l, slot, k.data(), v.data());
        for (int h = 0; h < heads; ++h) {
          const size_t at = (slot / bs) * s.block_bytes() + (static_cast<size_t>(h) * bs + slot % bs) * rb;
          kernels::store_kv_row(dt, &k[h * hd], hd, want.data());
          ASSERT_EQ(0, std::memcmp(static_cast<const uint8_t*>(s.k_data(l)) + at, want.data(), rb));
          kernels::store_kv_row(dt, &v[h * hd], hd, want.data());
          ASSERT_EQ(0, std::memcmp(static_cast<const uint8_t*>(s.v_data(l)) + at, want.data(), rb));
        }
      }
    s.copy_block(BlockId{2}, BlockId{0});
    KVStorage host(layers, 2, bs, heads, hd, dt);
    s.copy_block_to(BlockId{1}, host, BlockId{1});
    for (int l = 0; l < layers; ++l)
      for (bool key : {true, false}) {
        EXPECT_EQ(block_bytes(s, l, 0, key), block_bytes(s, l, 2, key));
        EXPECT_EQ(block_bytes(host, l, 1, key), block_bytes(s, l, 1, key));
        EXPECT_NE(block_bytes(s, l, 1, key), block_bytes(s, l, 2, key));
      }
  }
}

TEST(KVStorage, RejectsOtherDtypes) {
  EXPECT_FALSE(KVStorage::create(1, 1, 1, 1, 1, DType::kQ4_1).is_ok());
  EXPECT_FALSE(KVStorage::create(1, 1, 1, 1, 1, DType::kQ4_K).is_ok());
  for (DType ok : {DType::kF16, DType::kQ8_0, DType::kQ4_0}) EXPECT_TRUE(KVStorage::create(1, 1, 1, 1, 1, ok).is_ok());
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
      for (size_t i = 0; i < s.block_bytes() / sizeof(float); ++i) {
        s.k_block(l, b)[i] = tag(1, l, b, 0, static_cast<int>(i));
        s.v_block(l, b)[i] = tag(2, l, b, 0, static_cast<int>(i));
      }
  s.copy_block(BlockId{0}, BlockId{2});
  for (int l = 0; l < layers; ++l)
    for (size_t i = 0; i < s.block_bytes() / sizeof(float); ++i) {
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
  EXPECT_EQ((*ok)->block_bytes(), 2u * 16 * 64 * sizeof(float));
}

}  // namespace
}  // namespace pagoda
