// Paged causal attention of one sequence over the block-paged KV cache:
// FlashAttention-style tiles over KV blocks with an online softmax, all query
// heads of one KV group together so each K/V tile is read once per group.
// Compiled once per ISA (kernels/cpu/attention_inl.h) and run on the ISA
// matmul uses (kernels/cpu/isa.h; PAGODA_ISA=scalar|avx2|avx512 forces one).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/ids.h"

namespace pagoda::kernels {

// K/V element formats of the paged cache, per row (one token's head_dim
// elements of one kv head): kF32; kF16 (IEEE half); kQ8_0 and kQ4_0, GGML's
// blocks of 32 (an f16 scale per block: 34 and 18 bytes), the row's last
// block zero-padded when head_dim % 32 != 0. Quantized rows are dequantized
// in registers by the attention kernel. Quantized keys score with integer
// dots: each query row is quantized to Q8_0 as store_kv_row does (so a score
// is sum over blocks of q_scale * k_scale * an exact int32 dot, as in
// llama.cpp's quantized dot products); values are dequantized to float.
bool is_kv_dtype(DType dtype);
// Bytes of one row in `dtype` (is_kv_dtype).
size_t kv_row_bytes(DType dtype, int32_t head_dim);
// Stores head_dim floats as one row (quantizing for kQ8_0 / kQ4_0).
void store_kv_row(DType dtype, const float* x, int32_t head_dim, void* row);
// The row's head_dim values as floats (the reference dequantization).
void load_kv_row(DType dtype, const void* row, int32_t head_dim, float* x);

// One layer of the paged cache (KVStorage::k_data / v_data). Block b holds
// [num_kv_heads][block_size] rows of kv_row_bytes(dtype, head_dim) bytes,
// starting at byte b * block_bytes() of k / v.
struct PagedKVView {
  const void* k;
  const void* v;
  int32_t block_size;
  int32_t num_kv_heads;
  int32_t head_dim;
  DType dtype = DType::kF32;

  size_t row_bytes() const { return kv_row_bytes(dtype, head_dim); }
  size_t block_bytes() const { return static_cast<size_t>(num_kv_heads) * block_size * row_bytes(); }
};

// What besides causality shapes one sequence's attention.
struct AttentionOptions {
  // > 0: a query at position p sees keys p - window + 1 .. p only (sliding
  // window); 0: keys 0 .. p.
  int32_t window = 0;
  // [n_heads] learned sink logits (gpt-oss), or null: head h's softmax
  // denominator gains exp(sinks[h]) (unscaled), a key with no value.
  const float* sinks = nullptr;
  // Tree attention (speculative drafts that branch): a query at cache index
  // q_pos >= tree_begin sees the keys before tree_begin and, of the keys
  // tree_begin + j, only those whose bit j is set in tree_mask[i] (its
  // ancestors and itself; q_pos - tree_begin < 64). Queries before
  // tree_begin stay causal. Null: causal for every query. Not combined with
  // a window (the window would count cache indices, not tree depths).
  int32_t tree_begin = 0;
  const uint64_t* tree_mask = nullptr;  // [n_q]
};

// Attention of one sequence for kv heads [kv_head_begin, kv_head_end) and the
// query heads mapped to them (GQA: query head h uses kv head
// h / (n_heads / num_kv_heads); n_heads % num_kv_heads == 0).
// q: [n_q][n_heads][head_dim], q_stride floats between tokens. Query i sits at
// absolute position q_pos[i] and attends to keys 0..q_pos[i] (causal; see
// AttentionOptions for windows and sinks); keys 0..kv_len-1 are in the cache through block_table (kv_len > every
// q_pos). out: [n_q][n_heads][head_dim], out_stride floats between tokens; only the selected heads are written.
// scratch: paged_attention_scratch_floats floats. Allocates nothing; single-threaded (split kv head ranges across
// threads).
void paged_attention(const PagedKVView& kv, const BlockId* block_table, int32_t kv_len, const float* q,
                     int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads, float scale, float* out,
                     int64_t out_stride, int32_t kv_head_begin, int32_t kv_head_end, float* scratch,
                     const AttentionOptions& options = {});

// Workspace for paged_attention with these sizes (any kv head count).
size_t paged_attention_scratch_floats(int32_t n_q, int32_t n_heads, int32_t head_dim, int32_t block_size);

}  // namespace pagoda::kernels
