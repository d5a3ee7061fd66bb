// GGML's packed block layouts (bit-exact with ggml-common.h), plus per-block
// reference dequantize/quantize. Half-precision fields are raw IEEE fp16 bits
// (see core/fp16.h). Shared by the scalar reference and the SIMD kernels.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::ref {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q4_K, Q5_K

// x = d * (q - 8); element j in the low nibble of qs[j], j + 16 in the high.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
// x = d * q + m; nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
// x = d * (q - 16); bit 4 of element j is bit j of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
// x = d * q + m; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
// x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
// 8 sub-blocks of 32: x = d * sc * q - dmin * m, 6-bit sc/m packed in scales.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
// Q4_K plus a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q 6 bits. d is last.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

// 16 sub-blocks of 16: x = d * sc * q - dmin * m, q 2 bits, sc and m 4 bits
// (scales[j] = sc | m << 4). Element e = 128 n + 32 k + l (l < 32) is bits
// 2k..2k+1 of qs[32 n + l]; sub-block e / 16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16: x = d * (scale - 32) * (q - 4), q 3 bits (2 in qs,
// the third in hmask: element j's is bit j / 32 of hmask[j % 32]), 6-bit
// scales packed in 12 bytes (low nibbles, then 2-bit highs).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
constexpr int kQK4_NL = 32;
// Non-linear 4-bit: x = d * kIq4nlValues[q]; nibble order as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];
};
// IQ4_NL's values in 256-element super-blocks: 8 sub-blocks of 32 with
// 6-bit scales (low nibbles in scales_l, high 2 bits in scales_h):
// x = d * (scale - 32) * kIq4nlValues[q].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// The 2-bit field of element e (0..255) in Q2_K's and Q3_K's qs: element
// 128 n + 32 k + l is bits 2k..2k+1 of qs[32 n + l].
inline int k_quant_2bits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
// IQ4_XS sub-block k's signed scale (-32..31).
inline int iq4_xs_scale(const BlockIQ4_XS& b, int k) {
  return (((b.scales_l[k / 2] >> (4 * (k % 2))) & 0xF) | (((b.scales_h >> (2 * k)) & 3) << 4)) - 32;
}

// Static description of a block type, for generic row loops.
template <class Block>
struct BlockTraits;
#define PAGODA_BLOCK_TRAITS(B, T, N)         \
  template <>                                \
  struct BlockTraits<B> {                    \
    static constexpr DType kType = DType::T; \
    static constexpr int kSize = N;          \
  }
PAGODA_BLOCK_TRAITS(BlockQ4_0, kQ4_0, kQK4_0);
PAGODA_BLOCK_TRAITS(BlockQ4_1, kQ4_1, kQK4_1);
PAGODA_BLOCK_TRAITS(BlockQ5_0, kQ5_0, kQK5_0);
PAGODA_BLOCK_TRAITS(BlockQ5_1, kQ5_1, kQK5_1);
PAGODA_BLOCK_TRAITS(BlockQ8_0, kQ8_0, kQK8_0);
PAGODA_BLOCK_TRAITS(BlockQ4_K, kQ4_K, kQK_K);
PAGODA_BLOCK_TRAITS(BlockQ5_K, kQ5_K, kQK_K);
PAGODA_BLOCK_TRAITS(BlockQ6_K, kQ6_K, kQK_K);
PAGODA_BLOCK_TRAITS(BlockQ3_K, kQ3_K, kQK_K);
PAGODA_BLOCK_TRAITS(BlockQ2_K, kQ2_K, kQK_K);
PAGODA_BLOCK_TRAITS(BlockIQ4_NL, kIQ4_NL, kQK4_NL);
PAGODA_BLOCK_TRAITS(BlockIQ4_XS, kIQ4_XS, kQK_K);
#undef PAGODA_BLOCK_TRAITS

// Sub-block j (0..7) of a Q4_K/Q5_K scales array: 6-bit scale and min.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Inverse of get_scale_min_k4 for all 8 sub-blocks; sc, m in [0, 63].
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t* q);

// Per-block reference: dst/src hold BlockTraits<B>::kSize floats.
void dequantize_block(const BlockQ4_0& b, float* dst);
void dequantize_block(const BlockQ4_1& b, float* dst);
void dequantize_block(const BlockQ5_0& b, float* dst);
void dequantize_block(const BlockQ5_1& b, float* dst);
void dequantize_block(const BlockQ8_0& b, float* dst);
void dequantize_block(const BlockQ4_K& b, float* dst);
void dequantize_block(const BlockQ5_K& b, float* dst);
void dequantize_block(const BlockQ6_K& b, float* dst);
void dequantize_block(const BlockQ3_K& b, float* dst);
void dequantize_block(const BlockQ2_K& b, float* dst);
void dequantize_block(const BlockIQ4_NL& b, float* dst);
void dequantize_block(const BlockIQ4_XS& b, float* dst);

// w: per-element importance weights of the squared error, or null. Without
// weights the 32-blocks follow GGML's *_ref quantizers byte for byte; with
// weights (imatrix) every type searches the scale(s) minimizing the
// weighted error.
void quantize_block(const float* src, const float* w, BlockQ4_0* b);
void quantize_block(const float* src, const float* w, BlockQ4_1* b);
void quantize_block(const float* src, const float* w, BlockQ5_0* b);
void quantize_block(const float* src, const float* w, BlockQ5_1* b);
void quantize_block(const float* src, const float* w, BlockQ8_0* b);
void quantize_block(const float* src, const float* w, BlockQ4_K* b);
void quantize_block(const float* src, const float* w, BlockQ5_K* b);
void quantize_block(const float* src, const float* w, BlockQ6_K* b);
void quantize_block(const float* src, const float* w, BlockQ3_K* b);
void quantize_block(const float* src, const float* w, BlockQ2_K* b);
void quantize_block(const float* src, const float* w, BlockIQ4_NL* b);
void quantize_block(const float* src, const float* w, BlockIQ4_XS* b);

// Writes a block's integer levels, keeping its scales: the stored unsigned
// values, 0..15 (Q4_0, Q4_1, Q4_K), 0..31 (Q5_0, Q5_1, Q5_K), 0..63 (Q6_K),
// 0..255 (Q8_0: the int8 value + 128). Element order as dequantize_block.
void set_levels(BlockQ4_0* b, const int* levels);
void set_levels(BlockQ4_1* b, const int* levels);
void set_levels(BlockQ5_0* b, const int* levels);
void set_levels(BlockQ5_1* b, const int* levels);
void set_levels(BlockQ8_0* b, const int* levels);
void set_levels(BlockQ4_K* b, const int* levels);
void set_levels(BlockQ5_K* b, const int* levels);
void set_levels(BlockQ6_K* b, const int* levels);
void set_levels(BlockQ3_K* b, const int* levels);  // 0..7 (the value is q - 4)
void set_levels(BlockQ2_K* b, const int* levels);  // 0..3

// The 16 signed sub-block scales of a Q3_K block (scale - 32, -32..31), and back.
void get_scales_q3_k(const BlockQ3_K& b, int8_t* scales);
void set_scales_q3_k(BlockQ3_K* b, const int8_t* scales);

}  // namespace pagoda::ref
