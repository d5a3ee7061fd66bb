#include "kv/prefix_cache.h"

#include <algorithm>
#include <queue>
#include <string>
#include <xxhash.h>

#include "core/check.h"

namespace pagoda {

struct PrefixCache::Node {
  std::vector<int32_t> tokens;  // exactly block_size tokens (empty at the root)
  int32_t block = -1;
  Node* parent = nullptr;
  uint64_t last_access = 0;
  // Children by hash of their block's tokens; collisions share a bucket.
  std::unordered_multimap<uint64_t, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(BlockPool& pool, int32_t block_size)
    : pool_(pool), block_size_(block_size), root_(std::make_unique<Node>()) {}

PrefixCache::~PrefixCache() { clear(); }

uint64_t PrefixCache::hash_block(std::span<const int32_t> t) const {
  return XXH3_64bits(t.data(), t.size() * sizeof(int32_t));
}

PrefixCache::Node* PrefixCache::find_child(const Node* n, std::span<const int32_t> t) const {
  auto [b, e] = n->children.equal_range(hash_block(t));
  for (auto it = b; it != e; ++it)
    if (std::equal(t.begin(), t.end(), it->second->tokens.begin())) return it->second.get();
  return nullptr;
}

std::vector<int32_t> PrefixCache::match(std::span<const int32_t> tokens, int32_t max_blocks) {
  std::vector<int32_t> blocks;
  const uint64_t now = ++clock_;
  Node* n = root_.get();
  for (size_t off = 0; off + block_size_ <= tokens.size() && static_cast<int32_t>(blocks.size()) < max_blocks;
       off += block_size_) {
    n = find_child(n, tokens.subspan(off, block_size_));
    if (!n) break;
    n->last_access = now;
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

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks) {
  const uint64_t now = ++clock_;
  Node* n = root_.get();
  for (size_t i = 0; (i + 1) * block_size_ <= tokens.size() && i < blocks.size(); ++i) {
    const auto t = tokens.subspan(i * block_size_, block_size_);
    Node* child = find_child(n, t);
    if (!child) {
      auto node = std::make_unique<Node>();
      node->tokens.assign(t.begin(), t.end());
      node->block = blocks[i];
      node->parent = n;
      pool_.incref(BlockId{blocks[i]});
      child = node.get();
      n->children.emplace(hash_block(t), std::move(node));
      ++num_nodes_;
    }
    child->last_access = now;
    n = child;
  }
}

int32_t PrefixCache::num_evictable() const {
  // A node is evictable when it and its whole subtree are cache-only.
  int32_t count = 0;
  std::vector<std::pair<const Node*, bool>> stack;  // (node, children done)
  std::unordered_map<const Node*, bool> all_free;
  stack.push_back({root_.get(), false});
  while (!stack.empty()) {
    auto [n, done] = stack.back();
    stack.pop_back();
    if (!done) {
      stack.push_back({n, true});
      for (const auto& [h, c] : n->children) stack.push_back({c.get(), false});
      continue;
    }
    bool free_subtree = n == root_.get() || pool_.ref_count(BlockId{n->block}) == 1;
    for (const auto& [h, c] : n->children) free_subtree = free_subtree && all_free[c.get()];
    all_free[n] = free_subtree;
    if (free_subtree && n != root_.get()) ++count;
  }
  return count;
}

int32_t PrefixCache::evict(int32_t n) {
  // Min-heap of evictable leaves by last access; parents join as they empty.
  using Item = std::pair<uint64_t, Node*>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* x = stack.back();
    stack.pop_back();
    for (auto& [h, c] : x->children) stack.push_back(c.get());
    if (x != root_.get() && x->children.empty() && pool_.ref_count(BlockId{x->block}) == 1)
      heap.push({x->last_access, x});
  }
  int32_t freed = 0;
  while (freed < n && !heap.empty()) {
    Node* x = heap.top().second;
    heap.pop();
    Node* parent = x->parent;
    pool_.decref(BlockId{x->block});
    auto [b, e] = parent->children.equal_range(hash_block(x->tokens));
    for (auto it = b; it != e; ++it)
      if (it->second.get() == x) {
        parent->children.erase(it);
        break;
      }
    --num_nodes_;
    ++freed;
    ++num_evictions_;
    if (parent != root_.get() && parent->children.empty() && pool_.ref_count(BlockId{parent->block}) == 1)
      heap.push({parent->last_access, parent});
  }
  return freed;
}

void PrefixCache::add_holders(std::vector<int32_t>& counts) const {
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* x = stack.back();
    stack.pop_back();
    if (x != root_.get()) ++counts.at(x->block);
    for (const auto& [h, c] : x->children) stack.push_back(c.get());
  }
}

Status PrefixCache::check_invariants() const {
  int32_t count = 0;
  std::vector<const Node*> stack = {root_.get()};
  std::vector<bool> seen(pool_.num_blocks(), false);
  while (!stack.empty()) {
    const Node* x = stack.back();
    stack.pop_back();
    if (x != root_.get()) {
      ++count;
      if (static_cast<int32_t>(x->tokens.size()) != block_size_)
        return internal_error("prefix cache node with " + std::to_string(x->tokens.size()) + " tokens");
      if (x->block < 0 || x->block >= pool_.num_blocks() || pool_.ref_count(BlockId{x->block}) < 1)
        return internal_error("prefix cache node holds a free or invalid block " + std::to_string(x->block));
      if (seen[x->block]) return internal_error("block " + std::to_string(x->block) + " cached twice");
      seen[x->block] = true;
    }
    for (const auto& [h, c] : x->children) {
      if (c->parent != x) return internal_error("prefix cache parent link broken");
      if (h != hash_block(c->tokens)) return internal_error("prefix cache child under a wrong hash");
      stack.push_back(c.get());
    }
  }
  if (count != num_nodes_) return internal_error("prefix cache node count mismatch");
  return Status::ok();
}

void PrefixCache::clear() {
  while (!root_->children.empty()) {
    // Remove leaves bottom-up, dropping the cache's references.
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
      Node* x = stack.back();
      stack.pop_back();
      for (auto it = x->children.begin(); it != x->children.end();) {
        if (it->second->children.empty()) {
          pool_.decref(BlockId{it->second->block});
          --num_nodes_;
          it = x->children.erase(it);
        } else {
          stack.push_back(it->second.get());
          ++it;
        }
      }
    }
  }
}

}  // namespace pagoda
