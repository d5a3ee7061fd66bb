// y = x * W^T for a weight matrix W in any supported dtype: the linear layers
// of the model. W has n_out rows of n_in elements (GGUF dims [n_in, n_out]).
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
  size_t row_bytes() const { return dtype_row_bytes(type, n_in); }
};

// x: [n_tokens][n_in] (row stride x_stride), y: [n_tokens][n_out] (stride
// y_stride). Parallel over output rows on `pool`.
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, ThreadPool& pool);

// Dequantizes row `row` of w into dst (n_in floats): embedding lookup.
void get_row(const WeightView& w, int64_t row, float* dst);

// Dot product of two f32 vectors (SIMD when the build ISA has it).
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace pagoda::kernels
