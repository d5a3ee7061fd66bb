#include "kv/block_pool.h"

#include <string>

#include "core/check.h"

namespace pagoda {

BlockPool::BlockPool(int32_t num_blocks) {
  PAGODA_CHECK(num_blocks >= 0);
  ref_counts_.assign(num_blocks, 0);
  free_list_.reserve(num_blocks);
  // Reverse order so that the first allocations hand out 0, 1, 2, ...
  for (int32_t i = num_blocks - 1; i >= 0; --i) free_list_.push_back(i);
}

void BlockPool::check_id(BlockId id) const { PAGODA_CHECK(id.value >= 0 && id.value < num_blocks()); }

std::optional<BlockId> BlockPool::allocate() {
  if (free_list_.empty()) return std::nullopt;
  int32_t b = free_list_.back();
  free_list_.pop_back();
  PAGODA_CHECK(ref_counts_[b] == 0);
  ref_counts_[b] = 1;
  return BlockId{b};
}

void BlockPool::incref(BlockId id) {
  check_id(id);
  PAGODA_CHECK(ref_counts_[id.value] > 0);
  ++ref_counts_[id.value];
}

void BlockPool::decref(BlockId id) {
  check_id(id);
  PAGODA_CHECK(ref_counts_[id.value] > 0);
  if (--ref_counts_[id.value] != 0) return;
  free_list_.push_back(id.value);
  if (on_release_) on_release_(id);
}

int32_t BlockPool::ref_count(BlockId id) const {
  check_id(id);
  return ref_counts_[id.value];
}

Status BlockPool::check_invariants() const {
  std::vector<char> on_free_list(ref_counts_.size(), 0);
  for (int32_t b : free_list_) {
    if (b < 0 || b >= num_blocks()) {
      return internal_error("free list holds out-of-range block " + std::to_string(b));
    }
    if (on_free_list[b]) return internal_error("block " + std::to_string(b) + " is on the free list twice");
    on_free_list[b] = 1;
  }
  for (int32_t b = 0; b < num_blocks(); ++b) {
    int32_t rc = ref_counts_[b];
    if (rc < 0) return internal_error("block " + std::to_string(b) + " has negative ref count");
    if ((rc == 0) != static_cast<bool>(on_free_list[b])) {
      return internal_error("block " + std::to_string(b) + " has ref count " + std::to_string(rc) +
                            (on_free_list[b] ? " but is on the free list" : " but is not on the free list"));
    }
  }
  return Status::ok();
}

}  // namespace pagoda
