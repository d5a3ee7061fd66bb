#include "grammar/token_vocab.h"

#include <algorithm>
#include <atomic>

namespace pagoda::grammar {

TokenVocab::TokenVocab(std::vector<std::string> pieces, const std::vector<bool>& excluded, std::vector<int32_t> end_ids)
    : pieces_(std::move(pieces)), end_ids_(std::move(end_ids)) {
  static std::atomic<uint64_t> next_uid{1};
  uid_ = next_uid.fetch_add(1);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!pieces_[i].empty() && !(i < excluded.size() && excluded[i])) sorted_.push_back(static_cast<int32_t>(i));
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const std::string& pa = pieces_[static_cast<size_t>(a)];
    const std::string& pb = pieces_[static_cast<size_t>(b)];
    return pa != pb ? pa < pb : a < b;
  });
  build(0, static_cast<uint32_t>(sorted_.size()), 0);
}

// The node of sorted_[lo, hi), which all share their first `depth` bytes.
uint32_t TokenVocab::build(uint32_t lo, uint32_t hi, size_t depth) {
  const auto id = static_cast<uint32_t>(nodes_.size());
  nodes_.emplace_back();
  uint32_t here = lo;
  while (here < hi && pieces_[static_cast<size_t>(sorted_[here])].size() == depth) ++here;
  std::vector<Edge> children;
  for (uint32_t i = here; i < hi;) {
    const auto byte = static_cast<uint8_t>(pieces_[static_cast<size_t>(sorted_[i])][depth]);
    uint32_t j = i;
    while (j < hi && static_cast<uint8_t>(pieces_[static_cast<size_t>(sorted_[j])][depth]) == byte) ++j;
    children.push_back({byte, build(i, j, depth + 1)});
    i = j;
  }
  Node& n = nodes_[id];
  n.tok_begin = lo;
  n.tok_here_end = here;
  n.tok_end = hi;
  n.edge_begin = static_cast<uint32_t>(edges_.size());
  edges_.insert(edges_.end(), children.begin(), children.end());
  n.edge_end = static_cast<uint32_t>(edges_.size());
  return id;
}

}  // namespace pagoda::grammar
