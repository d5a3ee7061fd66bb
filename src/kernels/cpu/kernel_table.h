// The interface every ISA variant of the matmul kernels implements, and the
// on-the-fly activation formats the integer kernels consume.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"

namespace pagoda::kernels::cpu {

// Activation blocks: 32 int8 with an f32 scale (Q8_0-like) for the legacy
// 32-element types, 256 int8 with an f32 scale and int16 sums of every 16
// (Q8_K-like) for the K-quants. q = round(x / d), d = max|x| / 127.
constexpr int kActBlock32 = 32;
constexpr int kActBlockK = 256;
constexpr int kActSumGroup = 16;

enum class ActFormat { kFloat, kQ8_32, kQ8_K };

// n_tokens rows of quantized activations, SoA, each row n_in long.
struct ActQ8 {
  const int8_t* qs = nullptr;      // [n_tokens][n_in]
  const float* d = nullptr;        // [n_tokens][n_in / block]
  const float* s = nullptr;        // Q8_32: [n_tokens][n_in / 32], d * sum(q)
  const int16_t* bsums = nullptr;  // Q8_K: [n_tokens][n_in / 16], sum(q)
  // Q8_32, optional (AVX-512 path): per pair of blocks (a, b) the lane-wise
  // scales [d_a x8, d_b x8] and [s_a/8 x8, s_b/8 x8]; [n_tokens][nb/2][16].
  const float* d16 = nullptr;
  const float* s16 = nullptr;
  const int32_t* qsum = nullptr;   // Q8_32: [n_tokens][n_in / 32], sum(q)
};

// Fills d16/s16 (see ActQ8) of one token from its d and s (nb blocks).
void expand_act_pairs(const float* d, const float* s, int64_t nb, float* d16, float* s16);

// Scalar quantizers shared by every ISA so all paths see identical inputs.
void quantize_act_q8_32(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* qsum);
void quantize_act_q8_k(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums);

struct MatmulArgs {
  const uint8_t* w = nullptr;  // row r at w + r * row_bytes
  size_t row_bytes = 0;
  const uint8_t* wp = nullptr;  // packed copy (cpu/pack.h): group g at wp + g * group_bytes
  size_t group_bytes = 0;
  int64_t n_in = 0;
  const float* x = nullptr;  // float activations (F32/F16/BF16 weights)
  int64_t x_stride = 0;
  ActQ8 act;  // quantized activations (integer kernels)
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// Pointers to T tokens' Q8_K activations (from token t0): int8 values,
// per-256 scales and per-16 sums. Shared by the row and packed K-quant tiles.
template <int T>
struct KActs {
  const int8_t* xq[T];
  const float* xd[T];
  const int16_t* bs[T];
  KActs(const MatmulArgs& a, int64_t t0) {
    for (int t = 0; t < T; ++t) {
      xq[t] = a.act.qs + (t0 + t) * a.n_in;
      xd[t] = a.act.d + (t0 + t) * (a.n_in / kActBlockK);
      bs[t] = a.act.bsums + (t0 + t) * (a.n_in / kActSumGroup);
    }
  }
};

// Computes y[t][r] for r in [r0, r1) and every token. Packed kernels read
// args.wp and need r0, r1 multiples of 16.
using RowsFn = void (*)(const MatmulArgs& args, int64_t r0, int64_t r1);

enum class WKind { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K, kCount };
constexpr int kNumWKinds = static_cast<int>(WKind::kCount);

// -1 if the dtype has no matmul kernel.
int wkind_of(DType type);
ActFormat act_format_of(WKind kind);

struct IsaKernels {
  RowsFn rows[kNumWKinds] = {};
  RowsFn packed[kNumWKinds] = {};  // kernels over the layouts of cpu/pack.h
  bool wants_pair_scales = false;  // needs ActQ8::d16 / s16
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
};

const IsaKernels& kernels_scalar();
const IsaKernels& kernels_avx2();    // only call if isa_supported(kAvx2)
const IsaKernels& kernels_avx512();  // only call if isa_supported(kAvx512)
const IsaKernels& kernels_for(Isa isa);

}  // namespace pagoda::kernels::cpu
