// AWQ (Lin et al. 2024): activation-aware scaling. A few input channels of a
// linear layer carry large activations; scaling those weight columns up by
// s (and the layer's input down by s) before rounding protects them. Per
// group of matrices that share an input, s = mean|x|^alpha with alpha
// searched on a grid to minimize the quantized group's output error on
// calibration data; the scales are then folded into what produces the input
// (an RMSNorm weight, or the rows of the previous matrix: v for attn_output,
// ffn_up for ffn_down), so the model stays a plain llama-family GGUF and
// the unquantized model computes the same function.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::quant {

struct AwqOptions {
  int grid = 20;          // alpha in {0, 1/grid, ..., 1}
  int64_t max_rows = 64;  // rows per matrix sampled for the error search
};

// Matrices sharing one input x (width cols) and what produces that input.
struct AwqGroup {
  std::vector<float*> mats;  // [rows[i]][cols] each, row-major
  std::vector<int64_t> rows;
  std::vector<DType> types;  // their target types
  int64_t cols = 0;
  // Input column c uses scale src(c) = ((c / head_dim) / share) * head_dim +
  // c % head_dim (share > 1: attn_output's heads share their KV head's scale,
  // since they read the same v rows); share 1: src(c) = c.
  int32_t share = 1;
  int32_t head_dim = 1;
  // Where 1/s is folded: a vector of num_scales() (the RMSNorm weight), or
  // the num_scales() rows of a previous matrix (prev_cols wide) and its bias.
  float* norm = nullptr;
  float* prev = nullptr;
  int64_t prev_cols = 0;
  float* prev_bias = nullptr;

  int64_t num_scales() const { return cols / share; }
  int64_t src(int64_t c) const { return share == 1 ? c : ((c / head_dim) / share) * head_dim + c % head_dim; }
};

// The scales (num_scales() of them) minimizing sum over sampled rows of
// dW^T H dW, dW = W - Q(W diag(s)) diag(s)^-1, for s = mean_abs^alpha over the
// alpha grid (alpha = 0 is plain rounding, so the result is never worse on
// this measure). h: the input's x x^T sums (cols x cols); mean_abs: mean |x|
// per input column. *alpha_out: the alpha chosen.
std::vector<float> awq_search(const AwqGroup& g, const std::vector<double>& h, const std::vector<float>& mean_abs,
                              const AwqOptions& opt, ThreadPool& pool, double* alpha_out);

// Folds scales into the group: columns of every matrix times s, the norm or
// the previous matrix's rows (and bias) divided by s.
void awq_fold(const AwqGroup& g, const std::vector<float>& scales);

}  // namespace pagoda::quant
