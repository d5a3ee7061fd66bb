// Scalar reference implementations of every weight dtype: the GGUF/GGML block
// layouts, bit-exact. These are kept forever as the ground truth the SIMD
// kernels in kernels/cpu are tested against.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::ref {

// dst[0..n) = values of the n elements at src. n % block_size == 0.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Quantizes n floats into dtype's layout (round-to-nearest style, as GGML's
// *_ref quantizers). n % block_size == 0. Supported: every DType with
// dtype_info(t).supported. With `importance` (n non-negative weights, an
// imatrix row: the mean squared activation of each input column) block
// types pick the scales minimizing the importance-weighted error;
// F32/F16/BF16 ignore it.
void quantize_row(DType type, const float* src, void* dst, int64_t n, const float* importance = nullptr);

// W8A8 weights (SmoothQuant): n floats as Q8_0 blocks that all carry the
// row's scale d = fp16(max|x| / 127), q = round(x / d) clamped to 127. An
// ordinary Q8_0 row to any reader; Pagoda runs such rows with per-token
// int8 activations (kernels::q8_0_rows_share_scale).
void quantize_row_q8_0_shared_scale(const float* src, void* dst, int64_t n);

// sum_i w[i] * x[i] where w is a row in `type`, accumulated in double.
double vec_dot(DType type, const void* w, const float* x, int64_t n);

}  // namespace pagoda::ref
