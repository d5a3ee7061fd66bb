#include "kernels/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace pagoda::ref {

void paged_attention(const kernels::PagedKVView& kv, const BlockId* block_table, int32_t kv_len, const float* q,
                     int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads, float scale, float* out,
                     int64_t out_stride, int32_t kv_head_begin, int32_t kv_head_end,
                     const kernels::AttentionOptions& options) {
  PAGODA_CHECK(kv.num_kv_heads > 0 && n_heads % kv.num_kv_heads == 0);
  PAGODA_CHECK(0 <= kv_head_begin && kv_head_begin <= kv_head_end && kv_head_end <= kv.num_kv_heads);
  const int32_t group = n_heads / kv.num_kv_heads;
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  // Row j of kv head kvh, dequantized.
  std::vector<float> row(hd);
  auto load = [&](const void* base, int32_t kvh, int32_t j) {
    const size_t off = static_cast<size_t>(block_table[j / bs].value) * kv.block_bytes() +
                       (static_cast<size_t>(kvh) * bs + j % bs) * kv.row_bytes();
    kernels::load_kv_row(kv.dtype, static_cast<const uint8_t*>(base) + off, hd, row.data());
    return row.data();
  };
  // Quantized keys meet a query quantized like a key row (Q8_0 blocks of
  // 32): the kernels score them with integer dots.
  const bool quant_keys = kv.dtype == DType::kQ8_0 || kv.dtype == DType::kQ4_0;
  std::vector<uint8_t> qrow(kernels::kv_row_bytes(DType::kQ8_0, hd));
  std::vector<float> qdeq(hd);
  std::vector<double> scores;
  // Tree attention: past tree_begin, a query sees the keys its mask names.
  auto tree_sees = [&](int32_t i, int32_t j) {
    if (!options.tree_mask || q_pos[i] < options.tree_begin || j < options.tree_begin) return true;
    return ((options.tree_mask[i] >> (j - options.tree_begin)) & 1) != 0;
  };
  std::vector<double> acc(hd);
  for (int32_t i = 0; i < n_q; ++i) {
    PAGODA_CHECK(q_pos[i] >= 0 && q_pos[i] < kv_len);
    const int32_t first = options.window > 0 ? std::max(0, q_pos[i] - options.window + 1) : 0;  // sliding window
    const int32_t n_keys = q_pos[i] + 1;
    for (int32_t h = kv_head_begin * group; h < kv_head_end * group; ++h) {
      scores.assign(n_keys, -INFINITY);  // keys before the window stay out
      const int32_t kvh = h / group;
      const float* qh = q + i * q_stride + static_cast<int64_t>(h) * hd;
      if (quant_keys) {
        kernels::store_kv_row(DType::kQ8_0, qh, hd, qrow.data());
        kernels::load_kv_row(DType::kQ8_0, qrow.data(), hd, qdeq.data());
        qh = qdeq.data();
      }
      double max_score = -INFINITY;
      for (int32_t j = first; j < n_keys; ++j) {
        if (!tree_sees(i, j)) continue;
        const float* k = load(kv.k, kvh, j);
        double dot = 0;
        for (int32_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * k[d];
        scores[j] = dot * scale;
        max_score = std::max(max_score, scores[j]);
      }
      const double sink = options.sinks ? options.sinks[h] : -INFINITY;  // a score without a value
      max_score = std::max(max_score, sink);
      double sum = std::exp(sink - max_score);
      for (double& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int32_t j = first; j < n_keys; ++j) {
        const float* v = load(kv.v, kvh, j);
        for (int32_t d = 0; d < hd; ++d) acc[d] += scores[j] * v[d];
      }
      float* oh = out + i * out_stride + static_cast<int64_t>(h) * hd;
      for (int32_t d = 0; d < hd; ++d) oh[d] = static_cast<float>(acc[d] / sum);
    }
  }
}

}  // namespace pagoda::ref
