// GPTQ (Frantar et al. 2023): quantize a linear layer's weight matrix one
// input column at a time, each column's rounding error spread over the
// columns not yet quantized through the inverse Hessian of the layer's
// calibration inputs, H = sum x x^T. The grid is a GGUF block type: a block's
// scales are fixed when GPTQ reaches the block (from the weights as updated
// so far; with act-order, from the original weights before the first
// column), the levels inside it are GPTQ's. The output is an ordinary block
// file.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda::quant {

struct GptqOptions {
  double damp = 0.01;      // added to H's diagonal, as a fraction of its mean
  int lazy_block = 128;    // columns whose updates are applied together
  bool act_order = false;  // columns in order of decreasing H_ii
  // Per-column importance for choosing each block's scales (imatrix-style
  // weighted rounding error), or empty: plain.
  std::vector<float> importance;
};

// H[cols][cols] accumulated over calibration rows: H += x x^T for each row x
// of `n` rows of `cols` values (row stride `stride`). Parallel over H's rows.
void accumulate_hessian(const float* x, int64_t stride, int64_t n, int64_t cols, double* h, ThreadPool& pool);

// Quantizes w ([rows][cols], row-major as in GGUF: one row per output) to
// `type`, written to out (rows * dtype_row_bytes(type, cols) bytes), given
// H (cols x cols, symmetric; taken by value, modified). On return w holds
// the dequantized weights. cols must be a multiple of the type's block size;
// an H that stays singular after dampening gives an error.
Status gptq_quantize(DType type, float* w, int64_t rows, int64_t cols, std::vector<double> h, const GptqOptions& opt,
                     uint8_t* out, ThreadPool& pool);

// What GPTQ derives from H alone: the column order (identity, or act-order's
// decreasing H_ii) and the inverse factor in that order. Weights that read
// the same inputs (q/k/v, gate/up) share one: factoring is most of GPTQ's
// time on wide layers.
struct GptqFactor {
  int64_t cols = 0;
  std::vector<int64_t> perm;
  std::vector<double> u;  // gptq_inverse_factor of H permuted by perm
};

// The factor of H (cols x cols) under opt.damp and opt.act_order (dead
// inputs, never non-zero in calibration, get a unit diagonal first); an H
// that stays singular after dampening gives an error.
Status gptq_factor(std::vector<double> h, int64_t cols, const GptqOptions& opt, GptqFactor* f, ThreadPool& pool);

// gptq_quantize with a factor from gptq_factor (its cols the weights'; the
// same damp and act_order in opt): the same bytes as from H itself.
Status gptq_quantize(DType type, float* w, int64_t rows, const GptqFactor& f, const GptqOptions& opt, uint8_t* out,
                     ThreadPool& pool);

// The upper-triangular U with U^T U = (H + damp)^-1, the factor GPTQ reads
// (row i: the update of column i's error onto later columns). Exposed for tests.
Status gptq_inverse_factor(std::vector<double>& h, int64_t cols, double damp, std::vector<double>* u, ThreadPool& pool);

}  // namespace pagoda::quant
