// The K/V memory of every layer, in fixed-size blocks of f32, f16 (IEEE
// half: half the memory and the attention reads, like llama.cpp's default
// cache), or Q8_0 / Q4_0 (quantized when written, dequantized in registers
// by attention: about 1/3.8 and 1/7 of f32). Block layout per layer:
// [num_kv_heads][block_size] rows of kernels::kv_row_bytes(dtype, head_dim)
// bytes, head-major so one head's keys within a block are contiguous. K and
// V live in separate page-aligned (so 64-byte-aligned), lazily zeroed regions
// of [num_layers][num_blocks][block_bytes] bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "core/dtype.h"
#include "core/ids.h"
#include "core/status.h"

namespace pagoda {

class KVStorage {
 public:
  // CHECKs shapes and allocation; use create() for sizes a user chose.
  // dtype: kernels::is_kv_dtype (f32, f16, q8_0, q4_0).
  KVStorage(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
            DType dtype = DType::kF32);
  static Result<std::unique_ptr<KVStorage>> create(int32_t num_layers, int32_t num_blocks, int32_t block_size,
                                                   int32_t num_kv_heads, int32_t head_dim, DType dtype = DType::kF32);

  KVStorage(const KVStorage&) = delete;
  KVStorage& operator=(const KVStorage&) = delete;

  // Typed views of an f32 cache (CHECKed).
  float* k_block(int32_t layer, int32_t block) { return f32(k_.get() + offset(layer, block)); }
  float* v_block(int32_t layer, int32_t block) { return f32(v_.get() + offset(layer, block)); }
  const float* k_block(int32_t layer, int32_t block) const { return f32(k_.get() + offset(layer, block)); }
  const float* v_block(int32_t layer, int32_t block) const { return f32(v_.get() + offset(layer, block)); }
  const float* k_layer(int32_t layer) const { return f32(k_.get() + offset(layer, 0)); }
  const float* v_layer(int32_t layer) const { return f32(v_.get() + offset(layer, 0)); }
  // Any dtype: the first element of a layer (kernels::PagedKVView).
  const void* k_data(int32_t layer) const { return k_.get() + offset(layer, 0); }
  const void* v_data(int32_t layer) const { return v_.get() + offset(layer, 0); }
  // Any dtype: block `block`'s keys in `layer`, [num_kv_heads][block_size]
  // rows of row_bytes() (re-rotated in place by LlamaModel::shift_keys).
  uint8_t* k_block_bytes(int32_t layer, int32_t block) { return k_.get() + offset(layer, block); }

  DType dtype() const { return dtype_; }
  // Bytes of one token's head_dim elements of one kv head.
  size_t row_bytes() const { return row_bytes_; }
  // Bytes per block per layer (K or V) = num_kv_heads * block_size * row_bytes.
  size_t block_bytes() const { return block_bytes_; }

  // Stores one token: k_token / v_token are [num_kv_heads][head_dim];
  // slot = block * block_size + offset.
  void write(int32_t layer, int64_t slot, const float* k_token, const float* v_token);
  // One kv head's key row for the token at `slot` (block * block_size +
  // offset) in `layer`: row_bytes() bytes in the cache's dtype.
  const uint8_t* k_row(int32_t layer, int32_t kv_head, int64_t slot) const {
    return k_.get() + row_offset(layer, kv_head, slot);
  }
  // Copies one kv head's K and V rows of `layer` from slot `from` to slot
  // `to` (SnapKV's and H2O's per-head compaction), with its score.
  void copy_row(int32_t layer, int32_t kv_head, int64_t from, int64_t to);
  // copy_row for every layer and kv head: one token's K/V moves.
  void copy_token(int64_t from, int64_t to);

  // H2O: one float per row (K/V of one token, one kv head, one layer), the
  // attention it has received. Off until enabled (allocated then, zeroed);
  // write() zeroes a new row's score, copies carry it along.
  Status enable_scores();
  bool has_scores() const { return scores_ != nullptr; }
  float& score(int32_t layer, int32_t kv_head, int64_t slot) {
    return scores_.get()[score_index(layer, kv_head, slot)];
  }
  float score(int32_t layer, int32_t kv_head, int64_t slot) const {
    return scores_.get()[score_index(layer, kv_head, slot)];
  }
  // Copies block src to dst in every layer, K and V (copy-on-write).
  void copy_block(BlockId src, BlockId dst);
  // Copies block src of this storage into block dst of another storage of
  // the same shape (swapping between the device and host tiers).
  void copy_block_to(BlockId src, KVStorage& dst_storage, BlockId dst) const;

  // A whole block, every layer, as one byte string (the KV tiers'
  // payload): layer by layer, its K block then its V block.
  size_t bytes_per_block_all() const { return 2 * block_bytes_ * static_cast<size_t>(num_layers_); }
  void read_block(BlockId block, uint8_t* out) const;
  void write_block(BlockId block, const uint8_t* in);

  // K + V bytes of one block over all layers.
  static size_t bytes_per_block(int32_t num_layers, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                                DType dtype = DType::kF32);
  size_t num_bytes() const { return 2 * layer_bytes_ * num_layers_; }

  // The cache is mapped with 2 MiB pages where the kernel offers them
  // (attention then takes no TLB miss per block). A cache written only here
  // and there — a draft model's, whose rows exist only for sequences that
  // draft, at block ids spread over the pool — asks for 4 KiB pages instead
  // (MADV_NOHUGEPAGE), before anything is written: the first write into a
  // fresh range then zero-fills 4 KiB, not a 2 MiB page in each layer's K
  // and V region (~4 ms apiece on a VM; bench/RESULTS.md, 2026-12-07).
  void use_small_pages();

  int32_t num_layers() const { return num_layers_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_kv_heads() const { return num_kv_heads_; }
  int32_t head_dim() const { return head_dim_; }

 private:
  struct Unmap {
    size_t num_bytes;
    void operator()(uint8_t* p) const;
  };
  // Leaves k_/v_ null when the allocation fails.
  KVStorage(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
            DType dtype, std::nothrow_t);
  static Status validate(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads,
                         int32_t head_dim, DType dtype);
  size_t offset(int32_t layer, int32_t block) const;  // bytes
  size_t score_index(int32_t layer, int32_t kv_head, int64_t slot) const {
    return ((static_cast<size_t>(layer) * num_blocks_ + slot / block_size_) * num_kv_heads_ + kv_head) * block_size_ +
           slot % block_size_;
  }
  size_t row_offset(int32_t layer, int32_t kv_head, int64_t slot) const {
    return offset(layer, static_cast<int32_t>(slot / block_size_)) +
           (static_cast<size_t>(kv_head) * block_size_ + slot % block_size_) * row_bytes_;
  }
  float* f32(uint8_t* p) const;
  const float* f32(const uint8_t* p) const;

  int32_t num_layers_;
  int32_t num_blocks_;
  int32_t block_size_;
  int32_t num_kv_heads_;
  int32_t head_dim_;
  DType dtype_;
  size_t row_bytes_;
  size_t block_bytes_;
  size_t layer_bytes_;
  std::unique_ptr<uint8_t[], Unmap> k_;
  std::unique_ptr<uint8_t[], Unmap> v_;
  std::unique_ptr<float[]> scores_;  // [layers][blocks][kv_heads][block_size], or null
};

}  // namespace pagoda
