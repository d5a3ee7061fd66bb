// Front end of paged attention: checks the arguments and runs the active
// ISA's kernel (kernels/cpu/attention_inl.h).
#include "kernels/attention.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {

bool is_kv_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
}

size_t kv_row_bytes(DType dtype, int32_t head_dim) {
  PAGODA_CHECK(is_kv_dtype(dtype) && head_dim > 0);
  switch (dtype) {
    case DType::kF32: return static_cast<size_t>(head_dim) * 4;
    case DType::kF16: return static_cast<size_t>(head_dim) * 2;
    default: return dtype_row_bytes(dtype, (head_dim + 31) / 32 * 32);
  }
}

void store_kv_row(DType dtype, const float* x, int32_t head_dim, void* row) {
  switch (dtype) {
    case DType::kF32: std::memcpy(row, x, static_cast<size_t>(head_dim) * sizeof(float)); return;
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(row);
      for (int32_t d = 0; d < head_dim; ++d) h[d] = fp32_to_fp16(x[d]);
      return;
    }
    default: {
      const int32_t whole = head_dim / 32 * 32;
      if (whole > 0) ref::quantize_row(dtype, x, row, whole);
      if (whole < head_dim) {
        float tail[32] = {};  // zero padding quantizes to exact zeros
        std::copy(x + whole, x + head_dim, tail);
        ref::quantize_row(dtype, tail, static_cast<uint8_t*>(row) + dtype_row_bytes(dtype, whole), 32);
      }
      return;
    }
  }
}

void load_kv_row(DType dtype, const void* row, int32_t head_dim, float* x) {
  switch (dtype) {
    case DType::kF32: std::memcpy(x, row, static_cast<size_t>(head_dim) * sizeof(float)); return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (int32_t d = 0; d < head_dim; ++d) x[d] = fp16_to_fp32(h[d]);
      return;
    }
    default: {
      const int32_t whole = head_dim / 32 * 32;
      if (whole > 0) ref::dequantize_row(dtype, row, x, whole);
      if (whole < head_dim) {
        float tail[32];
        ref::dequantize_row(dtype, static_cast<const uint8_t*>(row) + dtype_row_bytes(dtype, whole), tail, 32);
        std::copy(tail, tail + (head_dim - whole), x + whole);
      }
      return;
    }
  }
}

namespace cpu {
int32_t attention_max_rows(int32_t n_q, int32_t n_heads) {
  return static_cast<int32_t>(
      std::min<int64_t>(static_cast<int64_t>(n_q) * n_heads, std::max(kAttnRowTarget, n_heads)));
}
}  // namespace cpu

size_t paged_attention_scratch_floats(int32_t n_q, int32_t n_heads, int32_t head_dim, int32_t block_size) {
  // (cpu/attention_inl.h, attend) acc [rows][head_dim]; with rp = rows
  // rounded up to 16: running max and rescales [rp], partial sums [rp][16];
  // the transposed key tile [head_dim][key tile], scores [rp][key tile],
  // one row's scores [key tile], the tile's exps [rows][key tile], the
  // transposed queries [head_dim][rp], the key and value tiles as f32
  // [key tile][head_dim] each. Then, for integer scores of quantized keys
  // (nb blocks of 32 a row): the quantized query rows [rows][nb * 8] with
  // scales and offsets [rows][nb] each, key scales [nb][key tile],
  // transposed key dwords [nb * 8][key tile], one Q8_0 row, the staged keys
  // (key tile * nb * 32 bytes + 64). Each of these 19 arrays starts on a
  // 64-byte boundary: up to 15 floats of padding after each, and 15 before
  // the first.
  const size_t rows = static_cast<size_t>(cpu::attention_max_rows(n_q, n_heads));
  const size_t rp = (rows + 15) / 16 * 16;
  const size_t hd = static_cast<size_t>(head_dim);
  const size_t nb = (hd + 31) / 32;
  const size_t tile = cpu::kAttnKeyTile;
  return rows * hd + rp * (2 + 16) + hd * tile + rp * tile + tile + rows * tile + hd * rp + 2 * tile * hd +
         rows * nb * 10 + nb * tile + nb * 8 * tile + nb * 34 / 4 + 1 + tile * nb * 8 + 16 + 20 * 15;
}

void paged_attention(const PagedKVView& kv, const BlockId* block_table, int32_t kv_len, const float* q,
                     int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads, float scale, float* out,
                     int64_t out_stride, int32_t kv_head_begin, int32_t kv_head_end, float* scratch,
                     const AttentionOptions& options) {
  PAGODA_CHECK(kv.num_kv_heads > 0 && n_heads % kv.num_kv_heads == 0);
  PAGODA_CHECK(0 <= kv_head_begin && kv_head_begin <= kv_head_end && kv_head_end <= kv.num_kv_heads);
  PAGODA_CHECK(kv.head_dim > 0 && kv.block_size > 0 && options.window >= 0 && is_kv_dtype(kv.dtype));
  for (int32_t i = 0; i < n_q; ++i) PAGODA_CHECK(q_pos[i] >= 0 && q_pos[i] < kv_len);
  if (options.tree_mask) {
    PAGODA_CHECK(options.window == 0 && options.tree_begin > 0);
    for (int32_t i = 0; i < n_q; ++i) PAGODA_CHECK(q_pos[i] - options.tree_begin < 64);
  }
  cpu::AttentionArgs a;
  a.kv = kv;
  a.block_table = block_table;
  a.kv_len = kv_len;
  a.q = q;
  a.q_stride = q_stride;
  a.q_pos = q_pos;
  a.n_q = n_q;
  a.n_heads = n_heads;
  a.scale = scale;
  a.out = out;
  a.out_stride = out_stride;
  a.kv_head_begin = kv_head_begin;
  a.kv_head_end = kv_head_end;
  a.scratch = scratch;
  a.window = options.window;
  a.sinks = options.sinks;
  a.tree_begin = options.tree_begin;
  a.tree_mask = options.tree_mask;
  cpu::active_kernels().attention(a);
}

}  // namespace pagoda::kernels
