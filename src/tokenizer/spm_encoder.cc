// SentencePiece-style BPE as llama.cpp runs it: start from UTF-8 characters,
// repeatedly merge the adjacent pair whose concatenation is the vocabulary
// token with the highest score (ties: leftmost), then fall back to <0xXX>
// byte tokens for whatever is not a token.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_index.h"

namespace pagoda::tok {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the text
  size_t len;     // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t len;
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const VocabIndex& v, std::string_view text) : v_(v), text_(text) {}

  void run(std::vector<int32_t>* out) {
    for (size_t off = 0; off < text_.size();) {
      const size_t n = std::min(text_.size() - off, utf8_lead_len(static_cast<uint8_t>(text_[off])));
      const int idx = static_cast<int>(symbols_.size());
      symbols_.push_back({idx - 1, off + n == text_.size() ? -1 : idx + 1, off, n});
      off += n;
    }
    for (size_t i = 1; i < symbols_.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[b.left];
      Symbol& r = symbols_[b.right];
      // Stale entry: one side was merged into something else since.
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    if (symbols_.empty()) return;
    for (int i = 0; i != -1; i = symbols_[i].next) emit(symbols_[i], out);
  }

 private:
  void try_add(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    const std::string_view s = text_.substr(l.offset, l.len + r.len);
    const int32_t id = v_.find(s);
    if (id < 0) return;
    const float score = v_.scores.empty() ? 0.0f : v_.scores[id];
    queue_.push({left, right, score, s.size()});
  }

  void emit(const Symbol& s, std::vector<int32_t>* out) const {
    const std::string_view piece = text_.substr(s.offset, s.len);
    const int32_t id = v_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    for (char c : piece) {
      const int32_t b = v_.byte_ids[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out->push_back(b);
      } else if (v_.unk_id >= 0) {
        out->push_back(v_.unk_id);
      }
    }
  }

  const VocabIndex& v_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

void spm_encode(const VocabIndex& v, std::string_view text, std::vector<int32_t>* out) {
  SpmSession(v, text).run(out);
}

}  // namespace pagoda::tok
