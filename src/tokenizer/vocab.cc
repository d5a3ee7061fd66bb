#include "tokenizer/vocab.h"

#include "gguf/gguf_file.h"

namespace pagoda {
namespace {

// Special ids are stored as u32 with 0xFFFFFFFF (or any negative) for "none".
int32_t special_id(const gguf::GGUFFile& f, const char* key) {
  const std::optional<int64_t> v = f.get_int(key);
  if (!v || *v < 0 || *v > INT32_MAX) return -1;
  return static_cast<int32_t>(*v);
}

}  // namespace

Result<VocabData> vocab_from_gguf(const gguf::GGUFFile& f) {
  VocabData v;
  const std::optional<std::string> model = f.get_string("tokenizer.ggml.model");
  if (!model) return not_found("GGUF file has no tokenizer (tokenizer.ggml.model missing)");
  v.model = *model;
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("");

  const std::vector<std::string>* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr) return data_loss("GGUF tokenizer: tokenizer.ggml.tokens missing or not a string array");
  v.tokens = *tokens;
  if (f.find("tokenizer.ggml.scores") != nullptr) {
    const std::vector<double>* scores = f.get_float_array("tokenizer.ggml.scores");
    if (scores == nullptr) return data_loss("GGUF tokenizer: tokenizer.ggml.scores is not a float array");
    v.scores.assign(scores->begin(), scores->end());
  }
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    const std::vector<int64_t>* types = f.get_int_array("tokenizer.ggml.token_type");
    if (types == nullptr) return data_loss("GGUF tokenizer: tokenizer.ggml.token_type is not an integer array");
    v.token_types.reserve(types->size());
    for (int64_t t : *types) {
      // Unknown type codes behave like undefined ones.
      v.token_types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::kUndefined);
    }
  }
  if (f.find("tokenizer.ggml.merges") != nullptr) {
    const std::vector<std::string>* merges = f.get_string_array("tokenizer.ggml.merges");
    if (merges == nullptr) return data_loss("GGUF tokenizer: tokenizer.ggml.merges is not a string array");
    v.merges = *merges;
  }

  v.bos_id = special_id(f, "tokenizer.ggml.bos_token_id");
  v.eos_id = special_id(f, "tokenizer.ggml.eos_token_id");
  v.eot_id = special_id(f, "tokenizer.ggml.eot_token_id");
  v.eom_id = special_id(f, "tokenizer.ggml.eom_token_id");
  v.unk_id = special_id(f, "tokenizer.ggml.unknown_token_id");
  v.pad_id = special_id(f, "tokenizer.ggml.padding_token_id");
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  v.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return v;
}

}  // namespace pagoda
