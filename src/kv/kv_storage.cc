#include "kv/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "kernels/attention.h"

namespace pagoda {
namespace {

// Anonymous mappings are page aligned (so 64-byte aligned) and zero-filled
// lazily: a large cache costs nothing until its blocks are written.
uint8_t* map_bytes(size_t n) {
  void* p = mmap(nullptr, std::max<size_t>(n, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#if defined(MADV_HUGEPAGE)
  // Attention walks blocks scattered over the cache: with 2 MiB pages it
  // does not take a TLB miss per block (advisory; fine if THP is off).
  madvise(p, std::max<size_t>(n, 1), MADV_HUGEPAGE);
#endif
  return static_cast<uint8_t*>(p);
}

}  // namespace

void KVStorage::use_small_pages() {
#if defined(MADV_NOHUGEPAGE)
  // Both mappings as map_bytes made them (their deleters hold the size).
  madvise(k_.get(), std::max<size_t>(k_.get_deleter().num_bytes, 1), MADV_NOHUGEPAGE);
  madvise(v_.get(), std::max<size_t>(v_.get_deleter().num_bytes, 1), MADV_NOHUGEPAGE);
#endif
}

void KVStorage::Unmap::operator()(uint8_t* p) const {
  if (p != nullptr) munmap(p, std::max<size_t>(num_bytes, 1));
}

float* KVStorage::f32(uint8_t* p) const {
  PAGODA_CHECK(dtype_ == DType::kF32 && "typed float access to a non-f32 KV cache");
  return reinterpret_cast<float*>(p);
}
const float* KVStorage::f32(const uint8_t* p) const {
  PAGODA_CHECK(dtype_ == DType::kF32 && "typed float access to a non-f32 KV cache");
  return reinterpret_cast<const float*>(p);
}

Status KVStorage::validate(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads,
                           int32_t head_dim, DType dtype) {
  if (!kernels::is_kv_dtype(dtype))
    return invalid_argument("KV cache dtype must be f32, f16, q8_0 or q4_0, not " + std::string(dtype_name(dtype)));
  if (num_layers < 1 || num_blocks < 0 || block_size < 1 || num_kv_heads < 1 || head_dim < 1) {
    return invalid_argument("KV storage shape must be positive: layers=" + std::to_string(num_layers) +
                            " blocks=" + std::to_string(num_blocks) + " block_size=" + std::to_string(block_size) +
                            " kv_heads=" + std::to_string(num_kv_heads) + " head_dim=" + std::to_string(head_dim));
  }
  // Keep every float index within int64 and the byte count within size_t.
  long double total = 2.0L * num_layers * num_blocks * block_size * num_kv_heads * head_dim * sizeof(float);
  if (total > static_cast<long double>(INT64_MAX) / 2) {
    return invalid_argument("KV storage of " + std::to_string(static_cast<double>(total)) + " bytes is too large");
  }
  return Status::ok();
}

KVStorage::KVStorage(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                     DType dtype, std::nothrow_t)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      row_bytes_(kernels::is_kv_dtype(dtype) && head_dim > 0 ? kernels::kv_row_bytes(dtype, head_dim) : 0),
      block_bytes_(static_cast<size_t>(num_kv_heads) * block_size * row_bytes_),
      layer_bytes_(block_bytes_ * num_blocks) {
  const size_t n = layer_bytes_ * num_layers;
  k_ = std::unique_ptr<uint8_t[], Unmap>(map_bytes(n), Unmap{n});
  if (k_ != nullptr) v_ = std::unique_ptr<uint8_t[], Unmap>(map_bytes(n), Unmap{n});
}

KVStorage::KVStorage(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                     DType dtype)
    : KVStorage(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype, std::nothrow) {
  // A bad shape may have produced a wrapped size above; it is caught here
  // before the memory is used.
  PAGODA_CHECK(validate(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype).is_ok());
  PAGODA_CHECK(k_ != nullptr && v_ != nullptr);
}

Result<std::unique_ptr<KVStorage>> KVStorage::create(int32_t num_layers, int32_t num_blocks, int32_t block_size,
                                                     int32_t num_kv_heads, int32_t head_dim, DType dtype) {
  PAGODA_RETURN_IF_ERROR(validate(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype));
  std::unique_ptr<KVStorage> s(
      new KVStorage(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype, std::nothrow));
  if (s->k_ == nullptr || s->v_ == nullptr) {
    return resource_exhausted("cannot allocate " + std::to_string(s->num_bytes()) + " bytes for the KV cache");
  }
  return s;
}

size_t KVStorage::offset(int32_t layer, int32_t block) const {
  PAGODA_DCHECK(layer >= 0 && layer < num_layers_ && block >= 0 && block < num_blocks_);
  return layer_bytes_ * layer + block_bytes_ * block;
}

void KVStorage::write(int32_t layer, int64_t slot, const float* k_token, const float* v_token) {
  PAGODA_DCHECK(slot >= 0 && slot < static_cast<int64_t>(num_blocks_) * block_size_);
  int32_t block = static_cast<int32_t>(slot / block_size_);
  int32_t off = static_cast<int32_t>(slot % block_size_);
  uint8_t* kb = k_.get() + offset(layer, block);
  uint8_t* vb = v_.get() + offset(layer, block);
  for (int32_t h = 0; h < num_kv_heads_; ++h) {
    const size_t dst = (static_cast<size_t>(h) * block_size_ + off) * row_bytes_;
    kernels::store_kv_row(dtype_, k_token + static_cast<size_t>(h) * head_dim_, head_dim_, kb + dst);
    kernels::store_kv_row(dtype_, v_token + static_cast<size_t>(h) * head_dim_, head_dim_, vb + dst);
    if (scores_) score(layer, h, slot) = 0.0f;
  }
}

void KVStorage::copy_row(int32_t layer, int32_t kv_head, int64_t from, int64_t to) {
  PAGODA_DCHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  if (from == to) return;
  std::memcpy(k_.get() + row_offset(layer, kv_head, to), k_.get() + row_offset(layer, kv_head, from), row_bytes_);
  std::memcpy(v_.get() + row_offset(layer, kv_head, to), v_.get() + row_offset(layer, kv_head, from), row_bytes_);
  if (scores_) score(layer, kv_head, to) = score(layer, kv_head, from);
}

void KVStorage::copy_token(int64_t from, int64_t to) {
  const int64_t num_slots = int64_t{num_blocks_} * block_size_;
  PAGODA_CHECK(from >= 0 && from < num_slots && to >= 0 && to < num_slots);
  for (int32_t layer = 0; layer < num_layers_; ++layer)
    for (int32_t h = 0; h < num_kv_heads_; ++h) copy_row(layer, h, from, to);
}

Status KVStorage::enable_scores() {
  if (scores_) return Status::ok();
  const size_t n = static_cast<size_t>(num_layers_) * num_blocks_ * num_kv_heads_ * block_size_;
  scores_.reset(new (std::nothrow) float[n]());
  if (!scores_)
    return resource_exhausted("cannot allocate " + std::to_string(n * sizeof(float)) + " bytes of H2O scores");
  return Status::ok();
}

void KVStorage::read_block(BlockId block, uint8_t* out) const {
  PAGODA_CHECK(block.value >= 0 && block.value < num_blocks_);
  for (int32_t l = 0; l < num_layers_; ++l) {
    std::memcpy(out, k_.get() + offset(l, block.value), block_bytes_);
    std::memcpy(out + block_bytes_, v_.get() + offset(l, block.value), block_bytes_);
    out += 2 * block_bytes_;
  }
}

void KVStorage::write_block(BlockId block, const uint8_t* in) {
  PAGODA_CHECK(block.value >= 0 && block.value < num_blocks_);
  const size_t per_block = static_cast<size_t>(num_kv_heads_) * block_size_;
  for (int32_t l = 0; l < num_layers_; ++l) {
    std::memcpy(k_.get() + offset(l, block.value), in, block_bytes_);
    std::memcpy(v_.get() + offset(l, block.value), in + block_bytes_, block_bytes_);
    in += 2 * block_bytes_;
    if (scores_) std::memset(&score(l, 0, int64_t{block.value} * block_size_), 0, per_block * sizeof(float));
  }
}

void KVStorage::copy_block(BlockId src_id, BlockId dst_id) {
  const int32_t src = src_id.value, dst = dst_id.value;
  PAGODA_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_);
  if (src == dst) return;
  const size_t per_block = static_cast<size_t>(num_kv_heads_) * block_size_;
  for (int32_t l = 0; l < num_layers_; ++l) {
    std::memcpy(k_.get() + offset(l, dst), k_.get() + offset(l, src), block_bytes_);
    std::memcpy(v_.get() + offset(l, dst), v_.get() + offset(l, src), block_bytes_);
    if (scores_)
      std::memcpy(&score(l, 0, int64_t{dst} * block_size_), &score(l, 0, int64_t{src} * block_size_),
                  per_block * sizeof(float));
  }
}

void KVStorage::copy_block_to(BlockId src_id, KVStorage& d, BlockId dst_id) const {
  const int32_t src = src_id.value, dst = dst_id.value;
  PAGODA_CHECK(d.num_layers_ == num_layers_ && d.block_bytes_ == block_bytes_ && d.dtype_ == dtype_);
  PAGODA_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < d.num_blocks_);
  PAGODA_CHECK((scores_ != nullptr) == (d.scores_ != nullptr));
  const size_t per_block = static_cast<size_t>(num_kv_heads_) * block_size_;
  for (int32_t l = 0; l < num_layers_; ++l) {
    std::memcpy(d.k_.get() + d.offset(l, dst), k_.get() + offset(l, src), block_bytes_);
    std::memcpy(d.v_.get() + d.offset(l, dst), v_.get() + offset(l, src), block_bytes_);
    if (scores_)
      std::memcpy(d.scores_.get() + d.score_index(l, 0, int64_t{dst} * block_size_),
                  scores_.get() + score_index(l, 0, int64_t{src} * block_size_), per_block * sizeof(float));
  }
}

size_t KVStorage::bytes_per_block(int32_t num_layers, int32_t block_size, int32_t num_kv_heads, int32_t head_dim,
                                  DType dtype) {
  return 2 * kernels::kv_row_bytes(dtype, head_dim) * num_layers * block_size * num_kv_heads;
}

}  // namespace pagoda
