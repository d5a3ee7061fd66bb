// SentencePiece-style BPE as llama.cpp runs it: start from UTF-8 characters,
// repeatedly merge the adjacent pair whose concatenation is the vocabulary
// token with the highest score (ties: leftmost), then fall back to <0xXX>
// byte tokens for whatever is not a token.
#include "tokenizer/pair_merger.h"
#include "tokenizer/vocab_index.h"

namespace pagoda::tok {

void spm_encode(const VocabIndex& v, std::string_view text, std::vector<int32_t>* out) {
  const auto pieces = merge_pairs(text, [&](std::string_view l, std::string_view r) -> std::optional<double> {
    // l and r are adjacent views into `text`: their union is one view.
    const int32_t id = v.find(std::string_view(l.data(), l.size() + r.size()));
    if (id < 0) return std::nullopt;
    return v.scores.empty() ? 0.0 : v.scores[id];
  });
  for (std::string_view piece : pieces) {
    const int32_t id = v.find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {  // byte fallback
      const int32_t b = v.byte_ids[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out->push_back(b);
      } else if (v.unk_id >= 0) {
        out->push_back(v.unk_id);
      }
    }
  }
}

}  // namespace pagoda::tok
