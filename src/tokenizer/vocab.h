// The tokenizer's vocabulary as plain data, filled from GGUF metadata
// (llama.cpp's tokenizer.ggml.* keys) or built in memory by tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda {
namespace gguf {
class GGUFFile;
}

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabData {
  std::string model = "llama";  // "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre;              // tokenizer.ggml.pre; "" = default
  std::vector<std::string> tokens;
  std::vector<float> scores;           // SPM merge priorities; empty = all 0
  std::vector<TokenType> token_types;  // empty = all normal
  std::vector<std::string> merges;     // BPE: "left right", rank = index
  // Special ids; -1 = absent (from_vocab then applies llama.cpp's defaults).
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  std::optional<bool> add_bos;
  std::optional<bool> add_eos;
  std::optional<bool> add_space_prefix;
  std::string chat_template;
};

// Reads the tokenizer.* metadata of a GGUF file.
Result<VocabData> vocab_from_gguf(const gguf::GGUFFile& f);

}  // namespace pagoda
