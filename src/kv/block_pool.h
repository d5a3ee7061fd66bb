// Fixed-size KV blocks: a ref-counted pool with a LIFO free list. A block is
// either free (ref 0, on the free list) or referenced by its holders
// (sequences' block tables, later the prefix cache).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/status.h"

namespace pagoda {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  // Takes a free block and gives it ref count 1; nullopt when none is free.
  std::optional<BlockId> allocate();
  // Adds a holder to a referenced block (CHECKs that it is not free).
  void incref(BlockId id);
  // Drops a holder; the block returns to the free list at 0. CHECKs on a
  // free block (a double free is a bug in the caller).
  void decref(BlockId id);

  int32_t ref_count(BlockId id) const;
  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }

  // Every block is free xor referenced; the free list has no duplicates.
  Status check_invariants() const;

  // Called with each block whose count reaches 0, after it is back on the
  // free list, whoever dropped the last reference (the KV manager frees a
  // page bundle's other pages with it when the prefix cache evicts it).
  // The hook may decref other blocks.
  void set_release_hook(std::function<void(BlockId)> hook) { on_release_ = std::move(hook); }

 private:
  void check_id(BlockId id) const;

  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_list_;  // back() is handed out next
  std::function<void(BlockId)> on_release_;
};

}  // namespace pagoda
