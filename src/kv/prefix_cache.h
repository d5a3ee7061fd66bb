// RadixAttention-style prefix cache over KV blocks (SGLang; vLLM's automatic
// prefix caching). A tree whose edges are whole blocks of tokens: the path
// from the root spells a token prefix and each node owns the block holding
// K/V for its tokens; a leaf may hold fewer tokens (a finished sequence's
// last block, insert_partial), reachable only as a partial hit. The cache holds one pool reference per node; sequences
// that reuse a node hold their own. Unreferenced leaves are evicted LRU.
//
// Contract (after mini-sglang): match() does not change references;
// insert() adds; evict() frees; num_evictable() tells how many blocks could
// be freed now; check_invariants() verifies the structure.
//
// Bookkeeping is incremental, so every query is O(1) or O(path): a node is
// "pinned" while some sequence holds its block too (ref count > 1), and
// "blocked" while it or any descendant is pinned (then it cannot be evicted
// before them). The owner reports each reference change of a block through
// on_ref_changed(); blocked counts propagate up only as far as they change.
// Unpinned leaves sit in an LRU-ordered set, so evict() never walks the tree.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "kv/block_key.h"
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
  std::vector<BlockId> match(std::span<const int32_t> tokens, int32_t max_blocks);
  // Read-only match(): the same blocks, LRU times unchanged.
  std::vector<BlockId> peek(std::span<const int32_t> tokens, int32_t max_blocks) const;
  // Whether a node holds `block`.
  bool holds(BlockId block) const {
    return block.value >= 0 && block.value < static_cast<int32_t>(node_of_block_.size()) &&
           node_of_block_[static_cast<size_t>(block.value)] != nullptr;
  }
  // Read-only: how many leading tokens match() would cover, and how many of
  // the blocks it would return (at most max_blocks) are evictable now.
  int32_t num_cached_tokens(std::span<const int32_t> tokens) const;
  int32_t num_evictable_in_prefix(std::span<const int32_t> tokens, int32_t max_blocks) const;

  // A hit that ends inside a block: after the first `whole` whole blocks of
  // `tokens` (as match() walks them), the cached child block whose tokens
  // share the longest prefix with the tokens that follow, 1 .. min(max_tokens,
  // block_size - 1) of them. The caller shares that block and copies it on
  // its first write (its later slots belong to another continuation).
  struct PartialHit {
    BlockId block;
    int32_t num_tokens = 0;  // 0: none
    bool evictable = false;  // nothing but the cache holds it, nor its subtree
  };
  // Read-only; match_partial also marks the block used.
  PartialHit find_partial(std::span<const int32_t> tokens, int32_t whole, int32_t max_tokens) const;
  PartialHit match_partial(std::span<const int32_t> tokens, int32_t whole, int32_t max_tokens);

  // Records a finished sequence's last, partly filled block: tokens holds
  // `whole` whole blocks (already cached, blocks[0..whole)) and then k < bs
  // tokens whose K/V is in blocks[whole]. It becomes a leaf of k tokens,
  // found only by find_partial, never extended. Nothing happens when the
  // whole blocks are not all cached, the block is cached already, or a
  // cached sibling already begins with those k tokens.
  void insert_partial(std::span<const int32_t> tokens, std::span<const BlockId> blocks);

  // Records that blocks[i] holds tokens [i*bs, (i+1)*bs) for every whole
  // block in `tokens`. Where a node already exists it keeps its block (the
  // caller keeps its duplicate); each new node takes a reference.
  void insert(std::span<const int32_t> tokens, std::span<const BlockId> blocks);

  // The pool's reference count of `block` changed (a sequence took or
  // dropped it). A no-op for blocks the cache does not hold.
  void on_ref_changed(BlockId block);

  // Frees up to n blocks that only the cache references, least recently
  // used leaves first. Returns how many were freed.
  int32_t evict(int32_t n);
  // Blocks evict() could free now: nodes whose whole subtree is referenced
  // by the cache alone. O(1).
  int32_t num_evictable() const { return num_nodes_ - num_blocked_; }
  int32_t num_cached_blocks() const { return num_nodes_; }
  int64_t num_evictions() const { return num_evictions_; }

  // Tiered KV (kv/kv_tiers.h): every whole-block node carries its block's
  // hash-chain key from `root` (set before anything is cached), and
  // `on_evict` hears of each whole block evict() is about to free, with its
  // key and tokens, while it still holds them.
  using EvictListener = std::function<void(BlockId, const BlockKey&, std::span<const int32_t>)>;
  void set_root_key(const BlockKey& root);
  void set_evict_listener(EvictListener on_evict) { on_evict_ = std::move(on_evict); }
  // Calls fn(block, key, tokens) for every whole-block node.
  void for_each_block(const EvictListener& fn) const;

  // Adds one to counts[block] for every cached block (for ref checks).
  void add_holders(std::vector<int32_t>& counts) const;
  // Structure, and every incremental count against a recomputation.
  Status check_invariants() const;
  // Drops every node (their references) — e.g. when turning the cache off.
  void clear();

 private:
  struct Node;
  using LruKey = std::pair<uint64_t, Node*>;

  Node* find_child(const Node* n, std::span<const int32_t> block_tokens) const;
  // The node after `whole` whole blocks of tokens, or null when the path ends earlier.
  Node* walk(std::span<const int32_t> tokens, int32_t whole) const;
  // The child of n sharing the longest prefix (>= 1, <= max_tokens) with rest.
  std::pair<Node*, int32_t> best_partial_child(const Node* n, std::span<const int32_t> rest, int32_t max_tokens) const;
  uint64_t hash_block(std::span<const int32_t> block_tokens) const;
  void touch(Node* n, uint64_t now);
  void set_pinned(Node* n, bool pinned);
  // n's blocked state flipped: count it and carry the change to ancestors.
  void propagate_blocked(Node* n, bool blocked);
  void remove_leaf(Node* n);
  // A new leaf under n holding t (block_size tokens, or fewer for a partial
  // leaf) in `block`, which it references.
  Node* add_child(Node* n, std::span<const int32_t> t, BlockId block, uint64_t now);

  BlockPool& pool_;
  int32_t block_size_;
  std::unique_ptr<Node> root_;
  int32_t num_nodes_ = 0;
  int32_t num_blocked_ = 0;
  int64_t num_evictions_ = 0;
  uint64_t clock_ = 0;                // LRU time: bumped on every match/insert
  std::vector<Node*> node_of_block_;  // by block id; null when not cached
  std::set<LruKey> lru_leaves_;       // unpinned leaves by last access
  EvictListener on_evict_;
};

}  // namespace pagoda
