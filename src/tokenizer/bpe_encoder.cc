// Byte-level BPE as llama.cpp runs it: each pre-tokenized word is mapped to
// GPT-2's byte alphabet, split into characters, and the adjacent pair with the
// lowest merge rank (ties: leftmost) is merged until no ranked pair remains.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_index.h"

namespace pagoda::tok {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the mapped word
  size_t len;     // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  size_t len;  // of left + right when queued, to detect stale entries
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class BpeWord {
 public:
  BpeWord(const VocabIndex& v, const std::string& word) : v_(v), word_(word) {}

  void run(std::vector<int32_t>* out) {
    for (size_t off = 0; off < word_.size();) {
      const size_t n = std::min(word_.size() - off, utf8_lead_len(static_cast<uint8_t>(word_[off])));
      const int idx = static_cast<int>(symbols_.size());
      symbols_.push_back({idx - 1, off + n == word_.size() ? -1 : idx + 1, off, n});
      off += n;
    }
    for (size_t i = 1; i < symbols_.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[b.left];
      Symbol& r = symbols_[b.right];
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
  std::string_view text_of(const Symbol& s) const { return std::string_view(word_).substr(s.offset, s.len); }

  void try_add(int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view l = text_of(symbols_[left]);
    const std::string_view r = text_of(symbols_[right]);
    key_.assign(l);
    key_ += ' ';
    key_ += r;
    auto it = v_.merge_ranks.find(key_);
    if (it == v_.merge_ranks.end()) return;
    queue_.push({left, right, it->second, l.size() + r.size()});
  }

  void emit(const Symbol& s, std::vector<int32_t>* out) const {
    const std::string_view piece = text_of(s);
    const int32_t id = v_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    // Not a token (the merges are incomplete): llama.cpp emits whatever single
    // bytes of the mapped text are tokens and drops the rest.
    for (char c : piece) {
      const int32_t b = v_.find(std::string_view(&c, 1));
      if (b >= 0) out->push_back(b);
    }
  }

  const VocabIndex& v_;
  const std::string& word_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
  std::string key_;
};

}  // namespace

void bpe_encode(const VocabIndex& v, PreTokenizer pre, bool ignore_merges, std::string_view text,
                std::vector<int32_t>* out) {
  std::string mapped;
  for (std::string_view word : pre_tokenize(pre, text)) {
    mapped.clear();
    for (char c : word) mapped += byte_to_bpe_char(static_cast<uint8_t>(c));
    if (ignore_merges) {
      const int32_t id = v.find(mapped);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
    }
    BpeWord(v, mapped).run(out);
  }
}

}  // namespace pagoda::tok
