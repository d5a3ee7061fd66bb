// The model's vocabulary as a grammar sees it: every token's bytes in a trie
// (tokens sorted by bytes, so a trie node's tokens are one contiguous range),
// so one walk over the trie checks all tokens that share a prefix at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::grammar {

class TokenVocab {
 public:
  struct Node {
    uint32_t edge_begin = 0, edge_end = 0;  // into edges()
    uint32_t tok_begin = 0;                 // sorted_tokens() of this prefix and longer
    uint32_t tok_here_end = 0;              // [tok_begin, tok_here_end): exactly this prefix
    uint32_t tok_end = 0;
  };
  struct Edge {
    uint8_t byte = 0;
    uint32_t node = 0;
  };

  // pieces[id]: the token's text bytes. Tokens with `excluded[id]` (control
  // and end-of-generation tokens) or empty pieces never match a grammar;
  // end_ids are allowed exactly when the grammar is complete.
  TokenVocab(std::vector<std::string> pieces, const std::vector<bool>& excluded, std::vector<int32_t> end_ids);

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  size_t mask_words() const { return (pieces_.size() + 63) / 64; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& sorted_tokens() const { return sorted_; }
  // Distinguishes vocabularies in the grammars' shared mask caches.
  uint64_t uid() const { return uid_; }

 private:
  uint32_t build(uint32_t lo, uint32_t hi, size_t depth);

  std::vector<std::string> pieces_;
  std::vector<int32_t> end_ids_;
  std::vector<int32_t> sorted_;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty prefix)
  std::vector<Edge> edges_;
  uint64_t uid_;
};

}  // namespace pagoda::grammar
