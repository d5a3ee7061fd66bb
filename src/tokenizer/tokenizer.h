// Text <-> token ids for a model, built from GGUF tokenizer metadata with
// llama.cpp's conventions: SentencePiece-style BPE ("llama") and byte-level
// BPE ("gpt2") with per-model pre-tokenizers, special tokens, and UTF-8-safe
// streaming detokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_index.h"

namespace pagoda {

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::GGUFFile& f);
  static Result<std::unique_ptr<Tokenizer>> from_vocab(VocabData v);

  // add_special: prepend BOS / append EOS as the vocabulary's flags say.
  // parse_special: control tokens written in the text (e.g. "<|im_end|>") are
  // matched as those tokens; otherwise they are plain text. User-defined
  // tokens are always matched, as in llama.cpp.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for. Control/unknown tokens give "" unless
  // render_special. Out-of-range ids give "".
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // Concatenated pieces; for SPM with a space prefix, the leading space of the
  // first text token (after any leading control tokens such as BOS) is removed.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }  // -1 if none
  bool is_eog(int32_t id) const { return eog_ids_.count(id) != 0; }
  bool is_control(int32_t id) const;  // control or unknown: not rendered by default
  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.texts.size()); }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool is_spm() const { return spm_; }
  const std::string& chat_template() const { return chat_template_; }
  // Stored text of a token ("" if out of range) and the id of a text (-1).
  std::string_view token_text(int32_t id) const;
  int32_t token_id(std::string_view text) const { return vocab_.find(text); }

 private:
  Tokenizer() = default;
  Status init(VocabData v);
  const std::string& piece_ref(int32_t id, bool render_special) const;
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const;

  tok::VocabIndex vocab_;
  bool spm_ = true;
  tok::PreTokenizer pre_ = tok::PreTokenizer::kDefault;
  bool ignore_merges_ = false;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, eom_id_ = -1;
  std::unordered_set<int32_t> eog_ids_;
  std::vector<int32_t> special_ids_;  // matched in text, longest first
  std::vector<std::string> pieces_;   // token_to_piece without render_special
  std::string chat_template_;
};

// Incremental detokenizer for streaming: push() returns only complete UTF-8
// characters and holds back an unfinished multibyte tail until a later token
// completes it; bytes that can never become valid come out as U+FFFD. Pieces
// are concatenated raw (no leading-space removal: a stream continues a prompt).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}
  std::string push(int32_t id);
  // The held-back bytes, with invalid ones replaced by U+FFFD; resets.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace pagoda
