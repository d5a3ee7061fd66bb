// RadixAttention-style prefix cache over KV blocks (SGLang; vLLM's automatic
// prefix caching). A tree whose edges are whole blocks of tokens: the path
// from the root spells a token prefix and each node owns the block holding
// K/V for its tokens. The cache holds one pool reference per node; sequences
// that reuse a node hold their own. Unreferenced leaves are evicted LRU.
//
// Contract (after mini-sglang): match() does not change references;
// insert() adds; evict() frees; num_evictable() tells how many blocks could
// be freed now; check_invariants() verifies the structure.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace pagoda {

class PrefixCache {
 public:
  PrefixCache(BlockPool& pool, int32_t block_size);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Blocks caching the longest whole-block prefix of `tokens`, at most
  // max_blocks of them. Marks them recently used; references unchanged.
  std::vector<int32_t> match(std::span<const int32_t> tokens, int32_t max_blocks);
  // Read-only: how many leading tokens match() would cover.
  int32_t num_cached_tokens(std::span<const int32_t> tokens) const;

  // Records that blocks[i] holds tokens [i*bs, (i+1)*bs) for every whole
  // block in `tokens`. Where a node already exists it keeps its block (the
  // caller keeps its duplicate); each new node takes a reference.
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks);

  // Frees up to n blocks that only the cache references, least recently
  // used leaves first. Returns how many were freed.
  int32_t evict(int32_t n);
  // Blocks evict() could free now: nodes whose whole subtree is referenced
  // by the cache alone.
  int32_t num_evictable() const;
  int32_t num_cached_blocks() const { return num_nodes_; }
  int64_t num_evictions() const { return num_evictions_; }

  // Adds one to counts[block] for every cached block (for ref checks).
  void add_holders(std::vector<int32_t>& counts) const;
  Status check_invariants() const;
  // Drops every node (their references) — e.g. when turning the cache off.
  void clear();

 private:
  struct Node;
  Node* find_child(const Node* n, std::span<const int32_t> block_tokens) const;
  uint64_t hash_block(std::span<const int32_t> block_tokens) const;

  BlockPool& pool_;
  int32_t block_size_;
  std::unique_ptr<Node> root_;
  int32_t num_nodes_ = 0;
  int64_t num_evictions_ = 0;
  uint64_t clock_ = 0;  // LRU time: bumped on every match/insert
};

}  // namespace pagoda
