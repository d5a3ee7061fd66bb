#include "kv/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/check.h"

namespace pagoda {

struct PrefixCache::Node {
  std::vector<int32_t> tokens;  // exactly block_size tokens (empty at the root)
  BlockId block;
  BlockKey key;  // hash chain from the root's key (whole blocks only)
  Node* parent = nullptr;
  uint64_t last_access = 0;
  bool pinned = false;               // a sequence holds the block too
  int32_t num_blocked_children = 0;  // children that are pinned or have a pinned descendant
  // Children by hash of their block's tokens; collisions share a bucket.
  std::unordered_multimap<uint64_t, std::unique_ptr<Node>> children;
  // The same children by their first token: partial hits look only there.
  std::unordered_multimap<int32_t, Node*> by_first_token;

  bool blocked() const { return pinned || num_blocked_children > 0; }
  bool is_lru_leaf() const { return children.empty() && !pinned; }
};

PrefixCache::PrefixCache(BlockPool& pool, int32_t block_size)
    : pool_(pool),
      block_size_(block_size),
      root_(std::make_unique<Node>()),
      node_of_block_(static_cast<size_t>(pool.num_blocks()), nullptr) {}

PrefixCache::~PrefixCache() { clear(); }

uint64_t PrefixCache::hash_block(std::span<const int32_t> t) const {
  return XXH3_64bits(t.data(), t.size() * sizeof(int32_t));
}

PrefixCache::Node* PrefixCache::find_child(const Node* n, std::span<const int32_t> t) const {
  auto [b, e] = n->children.equal_range(hash_block(t));
  for (auto it = b; it != e; ++it)
    if (std::equal(t.begin(), t.end(), it->second->tokens.begin(), it->second->tokens.end())) return it->second.get();
  return nullptr;
}

void PrefixCache::touch(Node* n, uint64_t now) {
  if (n->is_lru_leaf()) {
    lru_leaves_.erase({n->last_access, n});
    lru_leaves_.insert({now, n});
  }
  n->last_access = now;
}

void PrefixCache::propagate_blocked(Node* n, bool blocked) {
  // Walk up only while an ancestor's own blocked state flips.
  while (true) {
    num_blocked_ += blocked ? 1 : -1;
    Node* p = n->parent;
    if (p == root_.get()) return;
    const bool was = p->blocked();
    p->num_blocked_children += blocked ? 1 : -1;
    if (p->blocked() == was) return;
    n = p;
  }
}

void PrefixCache::set_pinned(Node* n, bool pinned) {
  if (n->pinned == pinned) return;
  const bool was_blocked = n->blocked();
  if (n->is_lru_leaf()) lru_leaves_.erase({n->last_access, n});
  n->pinned = pinned;
  if (n->is_lru_leaf()) lru_leaves_.insert({n->last_access, n});
  if (n->blocked() != was_blocked) propagate_blocked(n, n->blocked());
}

void PrefixCache::on_ref_changed(BlockId block) {
  if (block.value < 0 || block.value >= static_cast<int32_t>(node_of_block_.size())) return;
  Node* n = node_of_block_[block.value];
  if (n) set_pinned(n, pool_.ref_count(block) > 1);
}

std::vector<BlockId> PrefixCache::match(std::span<const int32_t> tokens, int32_t max_blocks) {
  std::vector<BlockId> blocks;
  const uint64_t now = ++clock_;
  Node* n = root_.get();
  for (size_t off = 0; off + block_size_ <= tokens.size() && static_cast<int32_t>(blocks.size()) < max_blocks;
       off += block_size_) {
    n = find_child(n, tokens.subspan(off, block_size_));
    if (!n) break;
    touch(n, now);
    blocks.push_back(n->block);
  }
  return blocks;
}

std::vector<BlockId> PrefixCache::peek(std::span<const int32_t> tokens, int32_t max_blocks) const {
  std::vector<BlockId> blocks;
  const Node* n = root_.get();
  for (size_t off = 0; off + block_size_ <= tokens.size() && static_cast<int32_t>(blocks.size()) < max_blocks;
       off += block_size_) {
    n = find_child(n, tokens.subspan(off, block_size_));
    if (!n) break;
    blocks.push_back(n->block);
  }
  return blocks;
}

int32_t PrefixCache::num_cached_tokens(std::span<const int32_t> tokens) const {
  int32_t count = 0;
  const Node* n = root_.get();
  for (size_t off = 0; off + block_size_ <= tokens.size(); off += block_size_) {
    n = find_child(n, tokens.subspan(off, block_size_));
    if (!n) break;
    count += block_size_;
  }
  return count;
}

int32_t PrefixCache::num_evictable_in_prefix(std::span<const int32_t> tokens, int32_t max_blocks) const {
  int32_t count = 0;
  const Node* n = root_.get();
  for (int32_t i = 0; i < max_blocks && static_cast<size_t>(i + 1) * block_size_ <= tokens.size(); ++i) {
    n = find_child(n, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
    if (!n) break;
    count += n->blocked() ? 0 : 1;
  }
  return count;
}

PrefixCache::Node* PrefixCache::walk(std::span<const int32_t> tokens, int32_t whole) const {
  Node* n = root_.get();
  for (int32_t i = 0; i < whole && n; ++i) {
    if (static_cast<size_t>(i + 1) * block_size_ > tokens.size()) return nullptr;
    n = find_child(n, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
  }
  return n;
}

std::pair<PrefixCache::Node*, int32_t> PrefixCache::best_partial_child(const Node* n, std::span<const int32_t> rest,
                                                                       int32_t max_tokens) const {
  const int32_t limit = std::min({max_tokens, block_size_ - 1, static_cast<int32_t>(rest.size())});
  Node* best = nullptr;
  int32_t best_len = 0;
  if (limit < 1) return {nullptr, 0};
  auto [b, e] = n->by_first_token.equal_range(rest[0]);
  for (auto it = b; it != e; ++it) {
    Node* c = it->second;
    const int32_t n_tokens = std::min(limit, static_cast<int32_t>(c->tokens.size()));  // partial leaves are shorter
    int32_t k = 0;
    while (k < n_tokens && c->tokens[k] == rest[k]) ++k;
    // Longest shared prefix; the most recently used on ties (deterministic
    // for equal times: the lower block id).
    if (k > best_len || (k == best_len && k > 0 &&
                         (c->last_access > best->last_access ||
                          (c->last_access == best->last_access && c->block.value < best->block.value)))) {
      best = c;
      best_len = k;
    }
  }
  return {best, best_len};
}

PrefixCache::PartialHit PrefixCache::find_partial(std::span<const int32_t> tokens, int32_t whole,
                                                  int32_t max_tokens) const {
  const Node* n = walk(tokens, whole);
  if (!n) return {};
  auto [c, k] = best_partial_child(n, tokens.subspan(static_cast<size_t>(whole) * block_size_), max_tokens);
  if (!c) return {};
  return {c->block, k, !c->blocked()};
}

PrefixCache::PartialHit PrefixCache::match_partial(std::span<const int32_t> tokens, int32_t whole, int32_t max_tokens) {
  PartialHit hit = find_partial(tokens, whole, max_tokens);
  if (hit.num_tokens > 0) touch(node_of_block_[hit.block.value], ++clock_);
  return hit;
}

void PrefixCache::insert_partial(std::span<const int32_t> tokens, std::span<const BlockId> blocks) {
  const int32_t whole = static_cast<int32_t>(tokens.size()) / block_size_;
  const int32_t k = static_cast<int32_t>(tokens.size()) % block_size_;
  if (k == 0 || static_cast<int32_t>(blocks.size()) <= whole) return;
  const BlockId block = blocks[static_cast<size_t>(whole)];
  if (block.value < 0 || block.value >= pool_.num_blocks() || node_of_block_[block.value]) return;
  Node* n = walk(tokens, whole);
  if (!n) return;
  const auto rest = tokens.subspan(static_cast<size_t>(whole) * block_size_);
  if (best_partial_child(n, rest, k).second == k) return;  // a sibling starts with these tokens
  add_child(n, rest, block, ++clock_);
}

PrefixCache::Node* PrefixCache::add_child(Node* n, std::span<const int32_t> t, BlockId block, uint64_t now) {
  if (n != root_.get() && n->is_lru_leaf()) lru_leaves_.erase({n->last_access, n});  // no longer a leaf
  auto node = std::make_unique<Node>();
  node->tokens.assign(t.begin(), t.end());
  node->block = block;
  if (static_cast<int32_t>(t.size()) == block_size_) node->key = chain_block_key(n->key, t);
  node->parent = n;
  node->last_access = now;
  pool_.incref(block);
  Node* child = node.get();
  n->children.emplace(hash_block(t), std::move(node));
  n->by_first_token.emplace(t[0], child);
  node_of_block_[block.value] = child;
  ++num_nodes_;
  lru_leaves_.insert({now, child});  // a fresh unpinned leaf; pinning below takes it out
  set_pinned(child, pool_.ref_count(block) > 1);
  return child;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const BlockId> blocks) {
  const uint64_t now = ++clock_;
  Node* n = root_.get();
  for (size_t i = 0; (i + 1) * block_size_ <= tokens.size() && i < blocks.size(); ++i) {
    const auto t = tokens.subspan(i * block_size_, block_size_);
    Node* child = find_child(n, t);
    if (!child) {
      PAGODA_CHECK(node_of_block_.at(blocks[i].value) == nullptr);
      child = add_child(n, t, blocks[i], now);
    } else {
      touch(child, now);
    }
    n = child;
  }
}

void PrefixCache::remove_leaf(Node* x) {
  Node* parent = x->parent;
  lru_leaves_.erase({x->last_access, x});
  node_of_block_[x->block.value] = nullptr;
  const BlockId block = x->block;
  auto [fb, fe] = parent->by_first_token.equal_range(x->tokens[0]);
  for (auto it = fb; it != fe; ++it)
    if (it->second == x) {
      parent->by_first_token.erase(it);
      break;
    }
  auto [b, e] = parent->children.equal_range(hash_block(x->tokens));
  for (auto it = b; it != e; ++it)
    if (it->second.get() == x) {
      parent->children.erase(it);
      break;
    }
  --num_nodes_;
  pool_.decref(block);
  if (parent != root_.get() && parent->is_lru_leaf()) lru_leaves_.insert({parent->last_access, parent});
}

int32_t PrefixCache::evict(int32_t n) {
  int32_t freed = 0;
  while (freed < n && !lru_leaves_.empty()) {
    Node* x = lru_leaves_.begin()->second;
    PAGODA_DCHECK(!x->blocked() && pool_.ref_count(x->block) == 1);
    if (on_evict_ && static_cast<int32_t>(x->tokens.size()) == block_size_) on_evict_(x->block, x->key, x->tokens);
    remove_leaf(x);
    ++freed;
    ++num_evictions_;
  }
  return freed;
}

void PrefixCache::set_root_key(const BlockKey& root) {
  PAGODA_CHECK(num_nodes_ == 0);
  root_->key = root;
}

void PrefixCache::for_each_block(const EvictListener& fn) const {
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* x = stack.back();
    stack.pop_back();
    if (x != root_.get() && static_cast<int32_t>(x->tokens.size()) == block_size_) fn(x->block, x->key, x->tokens);
    for (const auto& [h, c] : x->children) stack.push_back(c.get());
  }
}

void PrefixCache::add_holders(std::vector<int32_t>& counts) const {
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* x = stack.back();
    stack.pop_back();
    if (x != root_.get()) ++counts.at(x->block.value);
    for (const auto& [h, c] : x->children) stack.push_back(c.get());
  }
}

Status PrefixCache::check_invariants() const {
  // Post-order walk recomputing what the incremental fields should hold.
  int32_t count = 0, blocked = 0, leaves = 0;
  std::vector<bool> seen(pool_.num_blocks(), false);
  std::unordered_map<const Node*, bool> subtree_blocked;
  std::vector<std::pair<const Node*, bool>> stack = {{root_.get(), false}};
  while (!stack.empty()) {
    auto [x, children_done] = stack.back();
    stack.pop_back();
    if (!children_done) {
      stack.push_back({x, true});
      for (const auto& [h, c] : x->children) {
        if (c->parent != x) return internal_error("prefix cache parent link broken");
        if (h != hash_block(c->tokens)) return internal_error("prefix cache child under a wrong hash");
        stack.push_back({c.get(), false});
      }
      continue;
    }
    if (x == root_.get()) continue;
    ++count;
    const std::string name = "prefix cache node of block " + std::to_string(x->block.value);
    const auto n_tokens = static_cast<int32_t>(x->tokens.size());
    if (n_tokens < 1 || n_tokens > block_size_ || (n_tokens < block_size_ && !x->children.empty()))
      return internal_error("prefix cache node with " + std::to_string(n_tokens) + " tokens" +
                            (x->children.empty() ? "" : " and children"));
    if (x->block.value < 0 || x->block.value >= pool_.num_blocks() || pool_.ref_count(x->block) < 1)
      return internal_error(name + ": a free or invalid block");
    if (n_tokens == block_size_ && x->key != chain_block_key(x->parent->key, x->tokens))
      return internal_error(name + ": hash-chain key out of date");
    if (seen[x->block.value]) return internal_error("block " + std::to_string(x->block.value) + " cached twice");
    seen[x->block.value] = true;
    if (node_of_block_[x->block.value] != x) return internal_error(name + ": block index out of date");
    if (x->pinned != (pool_.ref_count(x->block) > 1)) return internal_error(name + ": pinned flag out of date");
    if (x->parent->by_first_token.count(x->tokens[0]) == 0)
      return internal_error(name + ": missing from its parent's first-token index");
    int32_t blocked_children = 0;
    for (const auto& [h, c] : x->children) blocked_children += subtree_blocked.at(c.get()) ? 1 : 0;
    if (blocked_children != x->num_blocked_children) return internal_error(name + ": blocked-children count wrong");
    subtree_blocked[x] = x->pinned || blocked_children > 0;
    blocked += subtree_blocked[x] ? 1 : 0;
    if (x->is_lru_leaf()) {
      ++leaves;
      if (!lru_leaves_.count({x->last_access, const_cast<Node*>(x)}))
        return internal_error(name + ": evictable leaf not in the LRU set");
    }
  }
  if (count != num_nodes_) return internal_error("prefix cache node count mismatch");
  if (blocked != num_blocked_) return internal_error("prefix cache blocked count mismatch");
  if (leaves != static_cast<int32_t>(lru_leaves_.size()))
    return internal_error("prefix cache LRU set has stale entries");
  int32_t indexed = 0;
  for (const Node* n : node_of_block_) indexed += n ? 1 : 0;
  if (indexed != num_nodes_) return internal_error("prefix cache block index has stale entries");
  return Status::ok();
}

void PrefixCache::clear() {
  // Remove leaves bottom-up, dropping the cache's references.
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* x = stack.back();
    if (!x->children.empty()) {
      stack.push_back(x->children.begin()->second.get());
      continue;
    }
    stack.pop_back();
    if (x == root_.get()) break;
    remove_leaf(x);
  }
  lru_leaves_.clear();
  num_blocked_ = 0;
}

}  // namespace pagoda
