// Byte-level BPE pre-tokenizers: split text into words the way the regex
// lists of llama.cpp's BPE tokenizer do, one hand-written matcher per regex
// (no regex engine: \p{L} and friends come from the Unicode class table).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagoda::tok {

enum class PreTokenizer {
  kDefault,  // llama.cpp's fallback list for BPE without a pre type
  kGpt2,     // gpt-2, mpt, olmo, phi-2, jais, jina-*, roberta-bpe
  kLlama3,   // llama3, llama-bpe, dbrx, smaug-bpe, ...
  kQwen2,    // qwen2, stablelm2: llama3 with single digits
  kDeepseekLlm,
  kDeepseekCoder,
  kFalcon,
  kStarcoder,  // starcoder, refact, command-r, smollm, codeshell, ...
};

// Maps tokenizer.ggml.pre to a pre-tokenizer; `*known` is false when the name
// is not recognized (the caller then uses the returned kGpt2 with a warning).
PreTokenizer pre_tokenizer_from_name(std::string_view name, bool* known);

// Splits `text` into words (byte ranges of the text, in order, covering all of
// it). Invalid UTF-8 bytes are kept as single-byte units of their own class.
std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text);

}  // namespace pagoda::tok
