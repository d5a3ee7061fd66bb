// Hand-built blocks with known values: checks the GGML bit layouts of the
// reference dequantizers byte by byte (nibble order, high-bit planes, 6-bit
// scale packing, Q6_K element order).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::ref {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfMinusOne = 0xBC00;

template <class Block>
std::vector<float> decode(DType t, const Block& b) {
  std::vector<unsigned char> bytes(sizeof(Block));
  std::memcpy(bytes.data(), &b, sizeof(Block));
  std::vector<float> y(BlockTraits<Block>::kSize);
  dequantize_row(t, bytes.data(), y.data(), static_cast<int64_t>(y.size()));
  return y;
}

TEST(QuantLayout, HalfConstants) {
  EXPECT_EQ(fp16_to_fp32(kHalfOne), 1.0f);
  EXPECT_EQ(fp16_to_fp32(kHalfHalf), 0.5f);
  EXPECT_EQ(fp16_to_fp32(kHalfQuarter), 0.25f);
  EXPECT_EQ(fp16_to_fp32(kHalfMinusOne), -1.0f);
}

TEST(QuantLayout, Q4_0LowNibblesFirstThenHigh) {
  BlockQ4_0 b;
  b.d = kHalfHalf;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kQ4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j)) << j + 16;
  }
}

TEST(QuantLayout, Q4_1AddsMin) {
  BlockQ4_1 b;
  b.d = kHalfQuarter;
  b.m = kHalfMinusOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kQ4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(j) - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(15 - j) - 1.0f) << j + 16;
  }
}

// qh bytes {0x01, 0x02, 0x04, 0x80} are the little-endian u32 with bits
// 0, 9, 18 and 31 set: elements 0, 9, 18 and 31 get their fifth bit.
bool has_high_bit(int e) { return e == 0 || e == 9 || e == 18 || e == 31; }
int nibble_of(int e) { return e < 16 ? e : 15 - (e - 16); }
const uint8_t kQh[4] = {0x01, 0x02, 0x04, 0x80};

TEST(QuantLayout, Q5_0HighBitsAreLittleEndianU32) {
  BlockQ5_0 b;
  b.d = kHalfOne;
  std::memcpy(b.qh, kQh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kQ5_0, b);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], static_cast<float>(nibble_of(e) + (has_high_bit(e) ? 16 : 0) - 16)) << e;
}

TEST(QuantLayout, Q5_1HighBitsAndMin) {
  BlockQ5_1 b;
  b.d = kHalfHalf;
  b.m = kHalfMinusOne;
  std::memcpy(b.qh, kQh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kQ5_1, b);
  for (int e = 0; e < 32; ++e)
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(nibble_of(e) + (has_high_bit(e) ? 16 : 0)) - 1.0f) << e;
}

TEST(QuantLayout, Q8_0SignedBytes) {
  BlockQ8_0 b;
  b.d = fp32_to_fp16(2.0f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y = decode(DType::kQ8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 2.0f * static_cast<float>(j * 8 - 128)) << j;
}

// Sub-block 5 gets scale 42 (0b101010) and min 23 (0b010111): low nibbles in
// scales[9], top two bits in bits 6-7 of scales[1] (scale) and scales[5] (min).
// Sub-block 1 gets scale 7 and min 9 in the low 6 bits of scales[1], [5].
BlockQ4_K make_q4k() {
  BlockQ4_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  b.scales[1] = static_cast<uint8_t>(7 | (0b10 << 6));
  b.scales[5] = static_cast<uint8_t>(9 | (0b01 << 6));
  b.scales[9] = static_cast<uint8_t>(0xA | (0x7 << 4));
  // Chunk 2 = elements 128..191: low nibbles -> sub-block 4, high -> 5.
  for (int l = 0; l < 32; ++l) b.qs[64 + l] = static_cast<uint8_t>((l % 16) << 4 | 3);
  for (int l = 0; l < 32; ++l) b.qs[l] = static_cast<uint8_t>(1 << 4);  // chunk 0
  return b;
}

TEST(QuantLayout, Q4_KScalePacking) {
  const BlockQ4_K b = make_q4k();
  uint8_t sc, m;
  get_scale_min_k4(5, b.scales, &sc, &m);
  EXPECT_EQ(sc, 42);
  EXPECT_EQ(m, 23);
  get_scale_min_k4(1, b.scales, &sc, &m);
  EXPECT_EQ(sc, 7);
  EXPECT_EQ(m, 9);
  get_scale_min_k4(4, b.scales, &sc, &m);  // scales[8] = 0, scales[0] top bits 0
  EXPECT_EQ(sc, 0);
  EXPECT_EQ(m, 0);

  uint8_t packed[kKScaleBytes];
  const uint8_t want_sc[8] = {0, 7, 0, 0, 0, 42, 0, 0}, want_m[8] = {0, 9, 0, 0, 0, 23, 0, 0};
  pack_scale_min_k4(want_sc, want_m, packed);
  EXPECT_EQ(std::memcmp(packed, b.scales, kKScaleBytes), 0);
}

TEST(QuantLayout, Q4_KScalePackingRoundTripsAllValues) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    uint8_t sc[8], m[8], packed[kKScaleBytes];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(rng() % 64);
      m[j] = static_cast<uint8_t>(rng() % 64);
    }
    pack_scale_min_k4(sc, m, packed);
    for (int j = 0; j < 8; ++j) {
      uint8_t s2, m2;
      get_scale_min_k4(j, packed, &s2, &m2);
      ASSERT_EQ(s2, sc[j]) << "trial " << trial << " sub-block " << j;
      ASSERT_EQ(m2, m[j]) << "trial " << trial << " sub-block " << j;
    }
  }
}

TEST(QuantLayout, Q4_KElementOrder) {
  const auto y = decode(DType::kQ4_K, make_q4k());
  // Sub-block 0: scale 0, min 0; sub-block 1 (high nibbles of qs[0..31]): 7*1 - 0.5*9.
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[l], 0.0f) << l;
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[32 + l], 7.0f * 1 - 4.5f) << 32 + l;
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[128 + l], 0.0f) << 128 + l;  // sub-block 4
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[160 + l], 42.0f * static_cast<float>(l % 16) - 0.5f * 23) << 160 + l;
}

TEST(QuantLayout, Q5_KHighBitPlanes) {
  BlockQ5_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = kHalfOne;
  b.dmin = kHalfOne;
  const uint8_t sc[8] = {1, 2, 3, 4, 5, 6, 7, 8}, m[8] = {0, 0, 0, 0, 0, 0, 0, 1};
  pack_scale_min_k4(sc, m, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x21;  // low nibble 1, high nibble 2
  b.qh[0] = 0x01;                                // element 0 (chunk 0, low)
  b.qh[3] = 1 << 5;                              // element 64*2 + 32 + 3 = 163 (chunk 2, high)
  b.qh[31] = 1 << 6 | 1 << 7;                    // elements 192 + 31 = 223 and 255 (chunk 3)
  const auto y = decode(DType::kQ5_K, b);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32;
    int q = (e % 64) < 32 ? 1 : 2;
    if (e == 0 || e == 163 || e == 223 || e == 255) q += 16;
    EXPECT_EQ(y[e], static_cast<float>(sc[sub] * q - m[sub])) << e;
  }
}

TEST(QuantLayout, Q6_KElementOrderAndSignedScales) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = kHalfOne;
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(i + 1);
  b.scales[15] = -2;
  b.ql[40] = 5;                   // half 0, ql[l+32] low nibble, l=8 -> element 40
  b.qh[32 + 3] = 0b11 << 4;       // half 1, l=3, bits 4-5 -> element 128+64+3
  b.ql[64 + 3] = 7 << 4;          // same element's low 4 bits (ql[l] high nibble)
  b.qh[32 + 31] = 0b10 << 6;      // half 1, l=31, bits 6-7 -> element 255
  b.ql[64 + 32 + 31] = 0xF << 4;  // its low bits: ql[l+32] high nibble
  const auto y = decode(DType::kQ6_K, b);
  for (int e = 0; e < 256; ++e) {
    int q = -32;
    if (e == 40) q = 5 - 32;
    if (e == 195) q = (7 | 3 << 4) - 32;
    if (e == 255) q = (0xF | 2 << 4) - 32;
    EXPECT_EQ(y[e], static_cast<float>(b.scales[e / 16] * q)) << e;
  }
}

// Q2_K decoded the way GGML's dequantize_row_q2_K walks it (two halves of
// 128, four 2-bit shifts, 16 elements from qs[0..16) then 16 from
// qs[16..32), one scale byte each) agrees with the reference on random bytes.
TEST(QuantLayout, Q2_KMatchesGgmlLoopOrder) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    BlockQ2_K b;
    for (auto& v : b.scales) v = static_cast<uint8_t>(rng());
    for (auto& v : b.qs) v = static_cast<uint8_t>(rng());
    b.d = fp32_to_fp16(0.01f * static_cast<float>(1 + rng() % 100));
    b.dmin = fp32_to_fp16(0.003f * static_cast<float>(rng() % 100));
    const auto y = decode(DType::kQ2_K, b);
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    std::vector<float> want;
    const uint8_t* q = b.qs;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) want.push_back(dl * static_cast<float>((q[16 * half + l] >> shift) & 3) - ml);
        }
      }
      q += 32;
    }
    ASSERT_EQ(want.size(), y.size());
    for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], want[e]) << "trial " << trial << " element " << e;
  }
}

TEST(QuantLayout, Q6_KScaleIsLastTwoBytes) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  unsigned char bytes[sizeof(BlockQ6_K)] = {};
  const uint16_t d = fp32_to_fp16(3.0f);
  std::memcpy(bytes + 208, &d, 2);
  bytes[192] = 1;  // scales[0]
  std::vector<float> y(256);
  dequantize_row(DType::kQ6_K, bytes, y.data(), 256);
  EXPECT_EQ(y[0], -96.0f);  // 3 * 1 * (0 - 32)
  EXPECT_EQ(y[16], 0.0f);   // scales[1] = 0
}

}  // namespace
}  // namespace pagoda::ref
