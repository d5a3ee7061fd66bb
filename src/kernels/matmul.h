// y = x * W^T for a weight matrix W in any supported dtype: the linear layers
// of the model. W has n_out rows of n_in elements (GGUF dims [n_in, n_out]).
//
// The kernels live in kernels/cpu: one variant per ISA (scalar, AVX2,
// AVX-512), picked at start-up (PAGODA_ISA=scalar|avx2|avx512 forces one).
// The SIMD ISAs read the packed copy (WeightView::packed); the scalar ISA,
// and any weight without a packed copy, use the row-layout reference.
// Quantized weights use 8-bit activations quantized once per call (Q8_0-like
// 32-blocks, or Q8_K-like 256-blocks for the K-quants) and integer dots;
// F32/F16/BF16 use f32 FMA.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::kernels {

struct WeightView {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t n_in = 0;   // row length (elements)
  int64_t n_out = 0;  // number of rows
  // Optional row-interleaved copy of all rows made by PackedWeights
  // (kernels/packed.h), which the active ISA's packed kernels read; without
  // it matmul runs the active ISA's kernels over the row layout of `data`
  // (F32/F16/BF16: cpu/unpacked_inl.h) or, for other types and under
  // PAGODA_REPACK=0, the scalar reference kernels.
  const void* packed = nullptr;
  // W8A8 (SmoothQuant): a Q8_0 weight whose rows each have one scale in
  // every block (q8_0_rows_share_scale), run against per-token int8
  // activations with one int32 dot per row (kernels/cpu/kernel_table.h,
  // WKind::kQ8_0R). The model sets it when the file asks for it.
  bool row_scaled = false;
  // An F16 / BF16 weight on the opt-in BF16 dot-product path (--bf16-dot,
  // cpu::WKind::kF16D / kBF16D): weights and activations rounded to BF16.
  bool bf16_dot = false;
  size_t row_bytes() const { return dtype_row_bytes(type, n_in); }
};

// x: [n_tokens][n_in] (row stride x_stride), y: [n_tokens][n_out] (stride
// y_stride). Parallel over output rows on `pool`. The activation workspace
// belongs to the calling thread and only grows (no allocation once warm).
// Supported: F32, F16, BF16, Q8_0 (also row_scaled), Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K.
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
            ThreadPool& pool);

// A matmul (or fused set) of fewer multiply-adds than this runs on the
// calling thread (default 96 Ki: below it waking the pool costs more than it
// saves). Tests set 0 so that every split across threads is exercised.
void set_min_parallel_macs(int64_t macs);

// Weights that do not stay in the last-level cache are streamed from memory
// at every decode step; there the packed tiles prefetch each group's stream
// ahead (F16 decode of the TinyLlama shape 12.5 -> 14.5 tok/s, Q4_K_M 39 ->
// 43.5), which only costs instructions when the weights stay cached (a
// 110M-shape model ran 5% slower). Models add their packed bytes here; from
// the cache size (sysconf, else 32 MiB) on, matrices of 2 MiB and more
// prefetch in decode — but for the float tiles (F32/F16/BF16) on AMD
// family 26 (Zen 5) and later, where the prefetch cost F16 decode 9-14%.
void note_weight_bytes(int64_t bytes);
bool decode_prefetch_on();

// Several weights applied to the same input (Q/K/V, gate/up): the
// activations are quantized once and all rows split across the pool in one
// job, so the threads meet at one barrier instead of one per weight. Falls
// back to separate calls when the weights differ in dtype or row length.
void matmul_fused(const WeightView* const* ws, int n_weights, const float* x, int64_t x_stride, int64_t n_tokens,
                  float* const* ys, const int64_t* y_strides, ThreadPool& pool);

// Whether w is Q8_0 with every block of each row holding the row's scale
// (bit for bit) and rows short enough for one int32 dot (kMaxRowScaledIn):
// the W8A8 layout `pagoda quantize --method smoothquant` writes.
bool q8_0_rows_share_scale(const WeightView& w);

// Dequantizes row `row` of w into dst (n_in floats): embedding lookup.
void get_row(const WeightView& w, int64_t row, float* dst);

// Dot product of two f32 vectors on the active ISA.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace pagoda::kernels
