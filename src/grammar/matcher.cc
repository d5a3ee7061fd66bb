#include "grammar/matcher.h"

#include <algorithm>
#include <unordered_set>

#include "grammar/mask_cache.h"

namespace pagoda::grammar {
namespace {

bool contains(const std::vector<Stack>& v, const Stack& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

struct StackHash {
  size_t operator()(const Stack& s) const {
    uint64_t h = 1469598103934665603ull;
    for (const uint32_t x : s) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// The stacks one expansion has visited: a short list (the usual case), a
// hash set once it grows (a long chain of rules must not cost quadratic time).
class SeenSet {
 public:
  void clear() {
    small_.clear();
    big_.clear();
  }
  // False when s was already there.
  bool insert(const Stack& s) {
    if (big_.empty()) {
      if (contains(small_, s)) return false;
      small_.push_back(s);
      if (small_.size() > 32) big_.insert(small_.begin(), small_.end());
      return true;
    }
    return big_.insert(s).second;
  }

 private:
  std::vector<Stack> small_;
  std::unordered_set<Stack, StackHash> big_;
};

// Derives rule references on top of `s` until every resulting stack's top
// is a byte terminal (or the stack is empty). `seen` breaks loops through
// rules that can be empty. Iterative: a chain of rules as long as a hostile
// grammar likes cannot overflow the call stack.
void expand(const Grammar& g, Stack s, std::vector<Stack>* out, SeenSet* seen) {
  thread_local std::vector<Stack> todo;
  const size_t base = todo.size();
  todo.push_back(std::move(s));
  while (todo.size() > base) {
    Stack cur = std::move(todo.back());
    todo.pop_back();
    if (!seen->insert(cur)) continue;
    if (cur.empty() || g.elements[cur.back()].op == Op::kBytes) {
      if (out->size() < Matcher::kMaxStacks) out->push_back(std::move(cur));
      continue;
    }
    const uint32_t pos = cur.back();
    const uint32_t rule = g.elements[pos].arg;
    cur.pop_back();
    // Tail call: a reference that ends its alternative leaves nothing behind.
    if (g.elements[pos + 1].op != Op::kEnd) cur.push_back(pos + 1);
    // Reversed, so alternatives come out in order.
    const auto& alts = g.rule_alts[rule];
    for (size_t i = alts.size(); i-- > 0;) {
      Stack t = cur;
      if (g.elements[alts[i]].op != Op::kEnd) t.push_back(alts[i]);
      todo.push_back(std::move(t));
    }
  }
}

bool accepts(const Grammar& g, std::vector<Stack> stacks, std::string_view bytes) {
  std::vector<Stack> next;
  for (const char c : bytes) {
    advance_stacks(g, stacks, static_cast<uint8_t>(c), &next);
    if (next.empty()) return false;
    stacks.swap(next);
  }
  return true;
}

}  // namespace

void advance_stacks(const Grammar& g, const std::vector<Stack>& in, uint8_t byte, std::vector<Stack>* out) {
  out->clear();
  thread_local SeenSet seen;  // reused: this runs once per trie edge
  seen.clear();
  for (const Stack& s : in) {
    if (s.empty()) continue;
    const uint32_t top = s.back();
    if (!g.byte_sets[g.elements[top].arg].has(byte)) continue;
    Stack t(s.begin(), s.end() - 1);
    if (g.elements[top + 1].op != Op::kEnd) t.push_back(top + 1);
    expand(g, std::move(t), out, &seen);
  }
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  SeenSet seen;
  for (const uint32_t alt : g_->rule_alts[g_->root]) {
    Stack s;
    if (g_->elements[alt].op != Op::kEnd) s.push_back(alt);
    expand(*g_, std::move(s), &stacks_, &seen);
  }
}

bool Matcher::is_complete() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::accept_bytes(std::string_view bytes) {
  std::vector<Stack> cur = stacks_, next;
  for (const char c : bytes) {
    advance_stacks(*g_, cur, static_cast<uint8_t>(c), &next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  stacks_ = std::move(cur);
  return true;
}

bool Matcher::accept_token(const TokenVocab& vocab, int32_t token) {
  const auto& ends = vocab.end_ids();
  if (std::find(ends.begin(), ends.end(), token) != ends.end()) {
    if (!is_complete()) return false;
    stacks_.assign(1, Stack{});
    return true;
  }
  const std::string& piece = vocab.piece(token);
  if (piece.empty()) return false;
  return accept_bytes(piece);
}

void Matcher::fill_mask(const TokenVocab& vocab, TokenMask* mask) const {
  mask->assign(vocab.mask_words(), 0);
  MaskCache& cache = mask_cache(*g_);
  bool complete = false;
  for (const Stack& s : stacks_) {
    if (s.empty()) {
      complete = true;
      continue;
    }
    const std::shared_ptr<const MaskEntry> e = cache.get(*g_, vocab, s);
    for (size_t w = 0; w < mask->size(); ++w) (*mask)[w] |= e->accepted[w];
    for (const int32_t t : e->uncertain) {
      if (!mask_has(*mask, t) && accepts(*g_, {s}, vocab.piece(t))) mask_set(*mask, t);
    }
  }
  if (complete) {
    for (const int32_t t : vocab.end_ids()) mask_set(*mask, t);
  }
}

void reference_mask(const Grammar& g, const std::vector<Stack>& stacks, const TokenVocab& vocab, TokenMask* mask) {
  mask->assign(vocab.mask_words(), 0);
  for (const int32_t t : vocab.sorted_tokens()) {
    if (accepts(g, stacks, vocab.piece(t))) mask_set(*mask, t);
  }
  const bool complete = std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.empty(); });
  if (complete) {
    for (const int32_t t : vocab.end_ids()) mask_set(*mask, t);
  }
}

}  // namespace pagoda::grammar
