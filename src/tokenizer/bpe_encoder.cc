// Byte-level BPE as llama.cpp runs it: each pre-tokenized word is mapped to
// GPT-2's byte alphabet, split into characters, and the adjacent pair with the
// lowest merge rank (ties: leftmost) is merged until no ranked pair remains.
#include "tokenizer/pair_merger.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_index.h"

namespace pagoda::tok {
namespace {

void bpe_word(const VocabIndex& v, std::string_view word, std::string& key, std::vector<int32_t>* out) {
  const auto pieces = merge_pairs(word, [&](std::string_view l, std::string_view r) -> std::optional<double> {
    key.assign(l);
    key += ' ';
    key += r;
    auto it = v.merge_ranks.find(key);
    if (it == v.merge_ranks.end()) return std::nullopt;
    return -static_cast<double>(it->second);  // lowest rank merges first
  });
  for (std::string_view piece : pieces) {
    const int32_t id = v.find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Not a token (the merges are incomplete): llama.cpp emits whatever single
    // bytes of the mapped text are tokens and drops the rest.
    for (char c : piece) {
      const int32_t b = v.find(std::string_view(&c, 1));
      if (b >= 0) out->push_back(b);
    }
  }
}

}  // namespace

void bpe_encode(const VocabIndex& v, PreTokenizer pre, bool ignore_merges, std::string_view text,
                std::vector<int32_t>* out) {
  std::string mapped, key;
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
    bpe_word(v, mapped, key, out);
  }
}

}  // namespace pagoda::tok
