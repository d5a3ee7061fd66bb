#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "gguf/gguf_file.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

// Texts llama.cpp treats as end-of-turn / end-of-generation tokens.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",        "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>",   "_<EOT>",     "<|end_of_text|>", "<end_of_utterance>",
};

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s->size());
  size_t pos = 0;
  for (size_t hit; (hit = s->find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(*s, pos, hit - pos);
    out += to;
  }
  out.append(*s, pos, std::string::npos);
  s->swap(out);
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string bpe_text_to_bytes(std::string_view text) {
  std::string out;
  for (const tok::CodeUnit& u : tok::decode_utf8(text)) {
    const int b = u.cp == tok::kInvalidCodePoint ? -1 : tok::bpe_char_to_byte(u.cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(u.byte_offset, u.byte_len));  // not in the alphabet: keep as is
    }
  }
  return out;
}

int32_t valid_id_or(int32_t id, int32_t fallback, size_t n) {
  if (id >= 0 && static_cast<size_t>(id) < n) return id;
  return fallback >= 0 && static_cast<size_t>(fallback) < n ? fallback : -1;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::GGUFFile& f) {
  PAGODA_ASSIGN_OR_RETURN(VocabData v, vocab_from_gguf(f));
  return from_vocab(std::move(v));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(VocabData v) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  PAGODA_RETURN_IF_ERROR(t->init(std::move(v)));
  return t;
}

Status Tokenizer::init(VocabData v) {
  const size_t n = v.tokens.size();
  if (v.model == "llama") {
    spm_ = true;
  } else if (v.model == "gpt2") {
    spm_ = false;
  } else {
    return unimplemented("tokenizer model '" + v.model + "' is not supported (only 'llama' and 'gpt2')");
  }
  if (n == 0) return data_loss("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return data_loss("tokenizer vocabulary is too large");
  if (!v.scores.empty() && v.scores.size() != n) {
    return data_loss("tokenizer has " + std::to_string(v.scores.size()) + " scores for " + std::to_string(n) +
                     " tokens");
  }
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return data_loss("tokenizer has " + std::to_string(v.token_types.size()) + " token types for " + std::to_string(n) +
                     " tokens");
  }
  if (!spm_ && v.merges.empty()) return data_loss("byte-level BPE tokenizer has no merges");

  vocab_.texts = std::move(v.tokens);
  vocab_.scores = std::move(v.scores);
  vocab_.types = std::move(v.token_types);
  if (vocab_.types.empty()) vocab_.types.assign(n, TokenType::kNormal);
  vocab_.text_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) vocab_.text_to_id[vocab_.texts[i]] = static_cast<int32_t>(i);
  vocab_.merge_ranks.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    vocab_.merge_ranks.emplace(std::move(v.merges[i]), static_cast<int32_t>(i));
  }
  std::fill(std::begin(vocab_.byte_ids), std::end(vocab_.byte_ids), -1);
  if (spm_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      int32_t id = vocab_.find(name);
      if (id < 0) id = vocab_.find(std::string(1, static_cast<char>(b)));
      vocab_.byte_ids[b] = id;
    }
  }

  // Defaults follow llama.cpp: SPM has <unk>=0, <s>=1, </s>=2 and adds BOS.
  if (spm_) {
    bos_id_ = valid_id_or(v.bos_id, 1, n);
    eos_id_ = valid_id_or(v.eos_id, 2, n);
    vocab_.unk_id = valid_id_or(v.unk_id, 0, n);
    add_space_prefix_ = v.add_space_prefix.value_or(true);
  } else {
    bool known = false;
    pre_ = tok::pre_tokenizer_from_name(v.pre, &known);
    if (!known) {
      std::fprintf(stderr, "pagoda: warning: unknown pre-tokenizer '%s', using gpt-2's\n", v.pre.c_str());
    }
    ignore_merges_ = pre_ == tok::PreTokenizer::kLlama3;
    bos_id_ = valid_id_or(v.bos_id, -1, n);
    eos_id_ = valid_id_or(v.eos_id, -1, n);
    vocab_.unk_id = valid_id_or(v.unk_id, -1, n);
  }
  add_bos_ = v.add_bos.value_or(spm_ || pre_ == tok::PreTokenizer::kLlama3) && bos_id_ >= 0;
  add_eos_ = v.add_eos.value_or(false) && eos_id_ >= 0;
  eom_id_ = valid_id_or(v.eom_id, -1, n);
  eot_id_ = valid_id_or(v.eot_id, -1, n);
  for (size_t i = 0; eot_id_ < 0 && i < std::size(kEotTexts); ++i) eot_id_ = vocab_.find(kEotTexts[i]);
  for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog_ids_.insert(id);
  }
  for (std::string_view text : kEogTexts) {
    const int32_t id = vocab_.find(text);
    if (id >= 0) eog_ids_.insert(id);
  }
  chat_template_ = std::move(v.chat_template);

  for (size_t i = 0; i < n; ++i) {
    const TokenType t = vocab_.types[i];
    const bool special = t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
    if (special && !vocab_.texts[i].empty()) special_ids_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](int32_t a, int32_t b) { return vocab_.texts[a].size() > vocab_.texts[b].size(); });

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = vocab_.texts[i];
    switch (vocab_.types[i]) {
      case TokenType::kUserDefined: pieces_[i] = text; break;
      case TokenType::kNormal:
        if (spm_) {
          pieces_[i] = text;
          replace_all(&pieces_[i], kSpaceMarker, " ");
        } else {
          pieces_[i] = bpe_text_to_bytes(text);
        }
        break;
      case TokenType::kByte:
        if (spm_) {
          const int b = parse_byte_token(text);
          if (b >= 0) pieces_[i] = std::string(1, static_cast<char>(b));
        } else {
          pieces_[i] = bpe_text_to_bytes(text);
        }
        break;
      default:  // control, unknown, unused, undefined: not rendered
        break;
    }
  }
  return Status::ok();
}

bool Tokenizer::is_control(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const TokenType t = vocab_.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return vocab_.texts[id];
}

const std::string& Tokenizer::piece_ref(int32_t id, bool render_special) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocab_size()) return kEmpty;
  if (render_special && is_control(id)) return vocab_.texts[id];
  return pieces_[id];
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const { return piece_ref(id, render_special); }

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool strip_space = spm_ && add_space_prefix_;
  for (int32_t id : ids) {
    const std::string& piece = piece_ref(id, render_special);
    if (strip_space && piece.empty() && is_control(id)) continue;  // e.g. BOS before the text
    if (strip_space && !piece.empty() && piece[0] == ' ') {
      out.append(piece, 1, std::string::npos);
    } else {
      out += piece;
    }
    strip_space = false;
  }
  return out;
}

}  // namespace pagoda
