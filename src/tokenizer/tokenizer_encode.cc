// Tokenizer::encode: split out special tokens, then run SPM or BPE on the
// text between them (llama.cpp's tokenizer_st_partition + tokenize).
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

struct Fragment {
  int32_t token;  // >= 0: a special token; -1: raw text [begin, begin+len)
  size_t begin;
  size_t len;
};

// Splits every raw fragment on all occurrences of `needle`, leftmost first.
void split_on(std::string_view text, std::string_view needle, int32_t id, std::vector<Fragment>* frags) {
  bool any = false;
  for (const Fragment& f : *frags) {
    if (f.token < 0 && text.substr(f.begin, f.len).find(needle) != std::string_view::npos) {
      any = true;
      break;
    }
  }
  if (!any) return;
  std::vector<Fragment> out;
  out.reserve(frags->size() + 2);
  for (const Fragment& f : *frags) {
    if (f.token >= 0) {
      out.push_back(f);
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.len);
    size_t pos = 0;
    for (size_t hit; (hit = raw.find(needle, pos)) != std::string_view::npos; pos = hit + needle.size()) {
      if (hit > pos) out.push_back({-1, f.begin + pos, hit - pos});
      out.push_back({id, 0, 0});
    }
    if (pos < raw.size()) out.push_back({-1, f.begin + pos, raw.size() - pos});
  }
  frags->swap(out);
}

}  // namespace

void Tokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const {
  if (!spm_) {
    tok::bpe_encode(vocab_, pre_, ignore_merges_, text, out);
    return;
  }
  // SPM: spaces become U+2581, and text that starts the input or follows a
  // special token gets a leading space (add_space_prefix), as llama.cpp does.
  std::string escaped;
  escaped.reserve(text.size() * 2 + 3);
  if (add_space_prefix_ && after_special) escaped += "\xE2\x96\x81";
  for (char c : text) {
    if (c == ' ') {
      escaped += "\xE2\x96\x81";
    } else {
      escaped += c;
    }
  }
  tok::spm_encode(vocab_, escaped, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  bool has_byte[256] = {};  // cheap filter: most special tokens cannot occur
  for (char c : text) has_byte[static_cast<uint8_t>(c)] = true;
  for (int32_t id : special_ids_) {
    const TokenType t = vocab_.types[id];
    if (!parse_special && (t == TokenType::kControl || t == TokenType::kUnknown)) continue;
    const std::string& s = vocab_.texts[id];
    if (s.size() > text.size() || !has_byte[static_cast<uint8_t>(s[0])]) continue;
    split_on(text, s, id, &frags);
  }

  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_id_);
  bool after_special = true;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_text(text.substr(f.begin, f.len), after_special, &out);
      after_special = false;
    }
  }
  if (add_special && add_eos_) out.push_back(eos_id_);
  return out;
}

}  // namespace pagoda
