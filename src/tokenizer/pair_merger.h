// The merge loop shared by SentencePiece-style BPE (highest score first) and
// byte-level BPE (lowest merge rank first): start from the UTF-8 characters
// of a text and repeatedly merge the adjacent pair with the highest priority
// (ties: leftmost) until no pair can merge.
#pragma once

#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace pagoda::tok {

// `priority(left, right)` gives a pair's priority, or nullopt when the pair
// does not merge. Returns the final pieces of `text`, in order.
template <class Priority>
std::vector<std::string_view> merge_pairs(std::string_view text, Priority&& priority) {
  struct Symbol {
    int prev;
    int next;
    size_t offset;
    size_t len;  // 0 once merged into its left neighbour
  };
  struct Bigram {
    int left;
    int right;
    double priority;
    size_t len;                              // of left + right when queued, to detect stale entries
    bool operator<(const Bigram& o) const {  // "lower" pops later
      return priority < o.priority || (priority == o.priority && left > o.left);
    }
  };
  std::vector<Symbol> symbols;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(text.size() - off, utf8_lead_len(static_cast<uint8_t>(text[off])));
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, off + n == text.size() ? -1 : idx + 1, off, n});
    off += n;
  }
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const std::optional<double> p = priority(text.substr(l.offset, l.len), text.substr(r.offset, r.len));
    if (p) queue.push({left, right, *p, l.len + r.len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale entry: one side was merged into something else since.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  std::vector<std::string_view> pieces;
  if (symbols.empty()) return pieces;
  for (int i = 0; i != -1; i = symbols[i].next) pieces.push_back(text.substr(symbols[i].offset, symbols[i].len));
  return pieces;
}

}  // namespace pagoda::tok
