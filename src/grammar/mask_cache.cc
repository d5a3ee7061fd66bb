#include "grammar/mask_cache.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace pagoda::grammar {
namespace {

// One walk of the vocabulary trie from a key stack. A stack that pops past
// the key's bottom "ends": with the whole stack as key that is the end of the
// grammar; otherwise the rest of the token depends on what lies below.
//
// The stack sets met along the walk are interned and their transitions
// memoized: inside a string every node of the trie leads to one of a few
// sets, so most of the walk is a table lookup per trie edge.
class TrieWalk {
 public:
  TrieWalk(const Grammar& g, const TokenVocab& v, bool whole, MaskEntry* e) : g_(g), v_(v), whole_(whole), e_(e) {}

  void run(const Stack& key) { visit(0, intern({key}), false); }

 private:
  struct SetInfo {
    std::vector<Stack> stacks;
    bool ended = false;             // some stack popped past the key's bottom
    std::array<int32_t, 256> next;  // kUnknown, kDead or a set id
  };
  static constexpr int32_t kUnknown = -2, kDead = -1;

  struct SetHash {
    size_t operator()(const std::vector<Stack>& v) const {
      uint64_t h = 1469598103934665603ull;
      for (const Stack& s : v) {
        h = (h ^ s.size()) * 1099511628211ull;
        for (const uint32_t x : s) h = (h ^ x) * 1099511628211ull;
      }
      return static_cast<size_t>(h);
    }
  };

  int32_t intern(std::vector<Stack> stacks) {
    const auto it = ids_.find(stacks);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(sets_.size());
    SetInfo info;
    info.ended = std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.empty(); });
    info.next.fill(kUnknown);
    info.stacks = stacks;
    sets_.push_back(std::move(info));
    ids_.emplace(std::move(stacks), id);
    return id;
  }

  int32_t next(int32_t set, uint8_t byte) {
    int32_t n = sets_[static_cast<size_t>(set)].next[byte];
    if (n != kUnknown) return n;
    advance_stacks(g_, sets_[static_cast<size_t>(set)].stacks, byte, &scratch_);
    n = scratch_.empty() ? kDead : intern(scratch_);
    sets_[static_cast<size_t>(set)].next[byte] = n;
    return n;
  }

  void visit(uint32_t node, int32_t set, bool escaped) {
    const TokenVocab::Node& n = v_.nodes()[node];
    const auto& toks = v_.sorted_tokens();
    // A set exists only when some path consumed this whole prefix.
    for (uint32_t i = n.tok_begin; i < n.tok_here_end; ++i) mask_set(e_->accepted, toks[i]);
    const bool child_escaped = escaped || (sets_[static_cast<size_t>(set)].ended && !whole_);
    for (uint32_t ei = n.edge_begin; ei < n.edge_end; ++ei) {
      const TokenVocab::Edge& edge = v_.edges()[ei];
      const int32_t child = next(set, edge.byte);
      if (child != kDead) {
        visit(edge.node, child, child_escaped);
      } else if (child_escaped) {
        const TokenVocab::Node& c = v_.nodes()[edge.node];
        for (uint32_t i = c.tok_begin; i < c.tok_end; ++i) e_->uncertain.push_back(toks[i]);
      }
    }
  }

  const Grammar& g_;
  const TokenVocab& v_;
  const bool whole_;
  MaskEntry* e_;
  std::vector<SetInfo> sets_;
  std::unordered_map<std::vector<Stack>, int32_t, SetHash> ids_;
  std::vector<Stack> scratch_;
};

}  // namespace

std::shared_ptr<MaskCache> make_mask_cache() { return std::make_shared<MaskCache>(); }

MaskCache& mask_cache(const Grammar& g) { return *g.masks; }

size_t MaskCache::KeyHash::operator()(const std::vector<uint32_t>& k) const {
  uint64_t h = 1469598103934665603ull;
  for (const uint32_t x : k) h = (h ^ x) * 1099511628211ull;
  return static_cast<size_t>(h);
}

size_t MaskCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::shared_ptr<const MaskEntry> MaskCache::get(const Grammar& g, const TokenVocab& vocab, const Stack& stack) {
  const bool whole = stack.size() <= kKeyDepth;
  const size_t depth = std::min<size_t>(stack.size(), kKeyDepth);
  thread_local std::vector<uint32_t> key;  // no allocation per lookup
  key.clear();
  key.push_back(static_cast<uint32_t>(vocab.uid()));
  key.push_back(static_cast<uint32_t>(vocab.uid() >> 32));
  key.push_back(whole ? 1 : 0);
  key.insert(key.end(), stack.end() - static_cast<std::ptrdiff_t>(depth), stack.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
  }
  // Computed outside the lock: two threads may both compute one entry, and
  // both results are the same.
  auto e = std::make_shared<MaskEntry>();
  e->accepted.assign(vocab.mask_words(), 0);
  TrieWalk(g, vocab, whole, e.get()).run(Stack(key.data() + 3, key.data() + key.size()));
  std::sort(e->uncertain.begin(), e->uncertain.end());
  e->uncertain.erase(std::unique(e->uncertain.begin(), e->uncertain.end()), e->uncertain.end());
  // A token accepted on some path needs no check.
  std::erase_if(e->uncertain, [&](int32_t t) { return mask_has(e->accepted, t); });
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.size() >= kMaxEntries) entries_.clear();
  entries_.emplace(key, e);
  return e;
}

}  // namespace pagoda::grammar
