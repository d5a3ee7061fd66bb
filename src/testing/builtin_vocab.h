// A built-in byte-level BPE vocabulary (GPT-2 style) of any size >= 259, for
// random-weight test models that have no tokenizer of their own. Merges are
// learned from a small English text embedded in the source, then extended with
// synthetic merges; every token is reachable by BPE from its own bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace pagoda {

struct BuiltinVocab {
  // Token strings in GPT-2's byte-to-unicode alphabet (space is "Ġ"), unique.
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // TokenType values (tokenizer/vocab.h)
  // "left right" pairs, highest priority first; merge k creates one token.
  std::vector<std::string> merges;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
};

// Ids: 0 "<unk>", 1 "<s>" (BOS), 2 "</s>" (EOS), 3..258 the bytes 0..255,
// then one token per merge. Deterministic. Error if vocab_size < 259.
Result<BuiltinVocab> make_builtin_vocab(int64_t vocab_size);

inline constexpr int32_t kBuiltinVocabFirstByte = 3;
inline constexpr int64_t kBuiltinVocabMinSize = 259;

// GPT-2's printable stand-in for one byte, UTF-8 encoded ("Ġ" for ' ').
std::string gpt2_byte_to_unicode(uint8_t b);

}  // namespace pagoda
