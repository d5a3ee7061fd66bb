// The run-time kernel table: what every ISA variant implements (matmul
// kernels, paged attention, layer ops, activation quantizers), and the
// on-the-fly activation formats the integer matmul kernels consume.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/ids.h"
#include "kernels/attention.h"
#include "kernels/cpu/isa.h"

namespace pagoda::kernels::cpu {

// Activation blocks: 32 int8 with an f32 scale (Q8_0-like) for the legacy
// 32-element types, 256 int8 with an f32 scale and int16 sums of every 16
// (Q8_K-like) for the K-quants. q = round(x / d), d = max|x| / 127.
constexpr int kActBlock32 = 32;
constexpr int kActBlockK = 256;
constexpr int kActSumGroup = 16;

enum class ActFormat { kFloat, kQ8_32, kQ8_K, kQ8_Row, kBF16 };

// n_tokens rows of quantized activations, SoA, each row n_in long.
struct ActQ8 {
  const int8_t* qs = nullptr;      // [n_tokens][n_in]
  const float* d = nullptr;        // [n_tokens][n_in / block] (Q8_Row: [n_tokens])
  const float* s = nullptr;        // Q8_32: [n_tokens][n_in / 32], d * sum(q)
  const int16_t* bsums = nullptr;  // Q8_K: [n_tokens][n_in / 16], sum(q)
  const int32_t* qsum = nullptr;   // Q8_32: [n_tokens][n_in / 32], sum(q); Q8_Row: [n_tokens]
  // BF16: [n_tokens][bf16_stride] bf16 (round to nearest even), a zero after
  // an odd n_in so every token is whole pairs.
  const uint16_t* bf16 = nullptr;
  int64_t bf16_stride = 0;
};

struct MatmulArgs {
  const uint8_t* w = nullptr;  // row r at w + r * row_bytes
  size_t row_bytes = 0;
  const uint8_t* wp = nullptr;  // packed copy (cpu/pack.h): group g at wp + g * group_bytes
  size_t group_bytes = 0;
  int64_t n_in = 0;
  int64_t n_out = 0;         // rows of W (and of y): the packed copy pads the last group
  const float* x = nullptr;  // float activations (F32/F16/BF16 weights)
  int64_t x_stride = 0;
  ActQ8 act;  // quantized activations (integer kernels)
  int64_t n_tokens = 0;
  bool prefetch = false;  // streamed from memory: decode tiles prefetch ahead (kernels::note_weight_bytes)
  float* y = nullptr;
  int64_t y_stride = 0;
};

// Computes y[t][r] for r in [r0, r1) and every token. Packed kernels read
// args.wp and need r0 a multiple of 16 and r1 a multiple of 16 or n_out.
using RowsFn = void (*)(const MatmulArgs& args, int64_t r0, int64_t r1);

// kQ8_0R: W8A8 (SmoothQuant). Q8_0 rows whose blocks all share one scale,
// run against per-token int8 activations (ActFormat::kQ8_Row): the whole
// row is one int32 dot (exact while n_in <= kMaxRowScaledIn) and one float
// multiply by row scale x token scale.
enum class WKind {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_0R,
  kQ2_K,
  kQ3_K,
  kIQ4_NL,
  kIQ4_XS,
  // --bf16-dot (opt-in): F16 / BF16 weights rounded to BF16 and run against
  // BF16 activations (ActFormat::kBF16) with vdpbf16ps, two products per
  // lane per instruction, fp32 accumulation. Not exact: see bf16_dot_rows.
  kF16D,
  kBF16D,
  kCount
};
constexpr int kNumWKinds = static_cast<int>(WKind::kCount);
// |sum of n_in products of int8 in [-127, 127]| < 2^31 for n_in up to 2^17;
// the int32 accumulators may wrap in between (two's complement), the end
// result is exact.
constexpr int64_t kMaxRowScaledIn = 1 << 17;

// -1 if the dtype has no matmul kernel. row_scaled: a Q8_0 weight whose
// rows each have one scale (kQ8_0R).
// bf16_dot: an F16 / BF16 weight on the BF16 dot-product path (kF16D, kBF16D).
int wkind_of(DType type, bool row_scaled = false, bool bf16_dot = false);
ActFormat act_format_of(WKind kind);

// kernels::paged_attention's arguments (kernels/attention.h has the contract).
struct AttentionArgs {
  PagedKVView kv;
  const BlockId* block_table = nullptr;
  int32_t kv_len = 0;
  const float* q = nullptr;
  int64_t q_stride = 0;
  const int32_t* q_pos = nullptr;
  int32_t n_q = 0;
  int32_t n_heads = 0;
  float scale = 1.0f;
  float* out = nullptr;
  int64_t out_stride = 0;
  int32_t kv_head_begin = 0, kv_head_end = 0;
  float* scratch = nullptr;      // paged_attention_scratch_floats(...) floats
  int32_t window = 0;            // > 0: query at p sees keys (p - window, p] only
  const float* sinks = nullptr;  // [n_heads] sink logits, or null
  int32_t tree_begin = 0;        // tree attention (AttentionOptions)
  const uint64_t* tree_mask = nullptr;
};
using AttentionFn = void (*)(const AttentionArgs& args);

// Paged attention tiling (cpu/attention_inl.h), which sizes its scratch:
// keys per tile (a tile's K and V rows, 2 x 32 x head_dim floats, stay in
// L1 while every query row of the group uses them), and query rows (query x
// head of a GQA group) per pass over the keys.
constexpr int32_t kAttnKeyTile = 32;
constexpr int32_t kAttnRowTarget = 64;
// Query rows of one pass: min(n_q * n_heads, max(kAttnRowTarget, n_heads)).
int32_t attention_max_rows(int32_t n_q, int32_t n_heads);

struct IsaKernels {
  // The row layout: only the scalar ISA has these (cpu/matmul_scalar.cc, the
  // integer reference), used by every ISA for weights without a packed copy
  // whose type has no `unpacked` kernel on it, and under PAGODA_REPACK=0.
  RowsFn rows[kNumWKinds] = {};
  // SIMD kernels over the same row layout (F32/F16/BF16: cpu/unpacked_inl.h),
  // used instead of rows where the weights have no packed copy, unless
  // PAGODA_REPACK=0 asked for the reference.
  RowsFn unpacked[kNumWKinds] = {};
  RowsFn packed[kNumWKinds] = {};  // kernels over the layouts of cpu/pack.h
  // Groups of 16 rows the packed kernel computes side by side: [0] for
  // prefill (n_tokens > 1), [1] for decode. A row range that is a multiple
  // of both runs without single-group tails (the matmul's work chunks).
  // A prefill tile of 3 groups comes with a 2-group one (sweep_groups in
  // cpu/packed_tiles_inl.h), so any range of 2 or more groups runs in 3s and 2s.
  int8_t packed_tile_groups[kNumWKinds][2] = {};
  AttentionFn attention = nullptr;
  // Layer ops (kernels/ops.h has the contracts) and the activation
  // quantizers: one row of n floats (n a multiple of the block) to Q8_32 /
  // Q8_K (ActQ8), the same bits on every ISA.
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  void (*rms_norm)(const float* x, const float* weight, float* y, int64_t n, float eps) = nullptr;
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*add)(float* a, const float* b, int64_t n) = nullptr;
  void (*quantize_q8_32)(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* qsum) = nullptr;
  void (*quantize_q8_k)(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums) = nullptr;
  // The whole row with one scale: *d = max|x| / 127, *qsum = sum(q).
  void (*quantize_q8_row)(const float* x, int64_t n, int8_t* qs, float* d, int32_t* qsum) = nullptr;
  // Recurrent mixers' steps (kernels/ops.h ssm_step, deltanet_step).
  void (*ssm_step)(float* s, int64_t rows, int64_t n, const float* x, const float* b, const float* c, float dt,
                   float decay, float d, float* y) = nullptr;
  void (*deltanet_step)(float* s, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float g,
                        float beta, float scale, float* o, float* tmp) = nullptr;
};

const IsaKernels& kernels_scalar();
// CHECKs isa_supported(isa).
const IsaKernels& kernels_for(Isa isa);
// kernels_for(active_isa()).
const IsaKernels& active_kernels();

}  // namespace pagoda::kernels::cpu
