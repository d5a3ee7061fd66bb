// Front end of paged attention: checks the arguments and runs the active
// ISA's kernel (kernels/cpu/attention_inl.h).
#include "kernels/attention.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels {

namespace cpu {
int32_t attention_max_rows(int32_t n_q, int32_t n_heads) {
  return static_cast<int32_t>(
      std::min<int64_t>(static_cast<int64_t>(n_q) * n_heads, std::max(kAttnRowTarget, n_heads)));
}
}  // namespace cpu

size_t paged_attention_scratch_floats(int32_t n_q, int32_t n_heads, int32_t head_dim, int32_t block_size) {
  // acc [rows][head_dim], m and l [rows], scores [rows][key tile], the
  // transposed key tile [head_dim][key tile], one row's scores and exps.
  const size_t rows = static_cast<size_t>(cpu::attention_max_rows(n_q, n_heads));
  return rows * (static_cast<size_t>(head_dim) + 2 + cpu::kAttnKeyTile) +
         static_cast<size_t>(head_dim) * cpu::kAttnKeyTile + 2 * cpu::kAttnKeyTile;
}

void paged_attention(const PagedKVView& kv, const BlockId* block_table, int32_t kv_len, const float* q,
                     int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads, float scale, float* out,
                     int64_t out_stride, int32_t kv_head_begin, int32_t kv_head_end, float* scratch,
                     const AttentionOptions& options) {
  PAGODA_CHECK(kv.num_kv_heads > 0 && n_heads % kv.num_kv_heads == 0);
  PAGODA_CHECK(0 <= kv_head_begin && kv_head_begin <= kv_head_end && kv_head_end <= kv.num_kv_heads);
  PAGODA_CHECK(kv.head_dim > 0 && kv.block_size > 0 && options.window >= 0);
  for (int32_t i = 0; i < n_q; ++i) PAGODA_CHECK(q_pos[i] >= 0 && q_pos[i] < kv_len);
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
  cpu::active_kernels().attention(a);
}

}  // namespace pagoda::kernels
