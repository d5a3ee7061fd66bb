// Reference paged attention: for each query, gather its keys through the
// block table, full softmax in double, weighted sum of values. The ground
// truth kernels::paged_attention is tested against.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace pagoda::ref {

// Same contract as kernels::paged_attention, without the scratch buffer.
void paged_attention(const kernels::PagedKVView& kv, const BlockId* block_table, int32_t kv_len, const float* q,
                     int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads, float scale, float* out,
                     int64_t out_stride, int32_t kv_head_begin, int32_t kv_head_end,
                     const kernels::AttentionOptions& options = {});

}  // namespace pagoda::ref
