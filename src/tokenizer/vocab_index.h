// Internal: the lookup structures the SPM and BPE encoders share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace pagoda::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct VocabIndex {
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<TokenType> types;
  StringMap text_to_id;   // later duplicates win, as in llama.cpp
  StringMap merge_ranks;  // "left right" -> rank (first occurrence wins)
  int32_t byte_ids[256];  // SPM byte fallback token per byte, or -1
  int32_t unk_id = -1;

  int32_t find(std::string_view text) const {
    auto it = text_to_id.find(text);
    return it == text_to_id.end() ? -1 : it->second;
  }
};

// SentencePiece-style: `text` already has spaces escaped to U+2581.
void spm_encode(const VocabIndex& v, std::string_view text, std::vector<int32_t>* out);

// Byte-level BPE over the words of the given pre-tokenizer.
void bpe_encode(const VocabIndex& v, PreTokenizer pre, bool ignore_merges, std::string_view text,
                std::vector<int32_t>* out);

}  // namespace pagoda::tok
