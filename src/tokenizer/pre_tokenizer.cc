// Each llama.cpp regex is a matcher `size_t f(chunk, pos)` giving the length
// of the match starting at pos (0 = none). Like unicode_regex_split, every
// regex of a list is applied in turn to each piece left by the previous ones;
// text between matches stays as pieces of its own, and anchors/lookaheads see
// only the current piece.
#include "tokenizer/pre_tokenizer.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace pagoda::tok {
namespace {

enum : uint8_t { kL = 1, kN = 2, kP = 4, kWs = 8, kInRange = 16 };
constexpr uint32_t kOut = 0xFFFFFFFFu;

struct Text {
  std::vector<CodeUnit> units;
  std::vector<uint8_t> flags;
};

uint8_t flags_of(uint32_t cp) {
  if (cp == kInvalidCodePoint) return kInRange;  // behaves like a symbol
  uint8_t f = kInRange;
  if (is_unicode_whitespace(cp)) f |= kWs;
  switch (unicode_class(cp)) {
    case UnicodeClass::kLetter: f |= kL; break;
    case UnicodeClass::kNumber: f |= kN; break;
    case UnicodeClass::kPunctuation: f |= kP; break;
    default: break;
  }
  return f;
}

// A piece [begin, end) of the text; positions outside read as "nothing".
struct Chunk {
  const Text& t;
  size_t begin, end;
  uint32_t cp(size_t i) const { return i >= begin && i < end ? t.units[i].cp : kOut; }
  uint8_t fl(size_t i) const { return i >= begin && i < end ? t.flags[i] : 0; }
  size_t run(size_t pos, uint8_t mask) const {  // length of a run of units with a flag
    size_t n = 0;
    while (fl(pos + n) & mask) ++n;
    return n;
  }
};

bool is_cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive.
size_t contraction(const Chunk& c, size_t pos, bool icase) {
  if (c.cp(pos) != '\'') return 0;
  const uint32_t a = icase ? ascii_lower(c.cp(pos + 1)) : c.cp(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = icase ? ascii_lower(c.cp(pos + 2)) : c.cp(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ given the whitespace run at pos.
size_t whitespace_tail(const Chunk& c, size_t pos) {
  const size_t n = c.run(pos, kWs);
  if (n > 1 && c.cp(pos + n) != kOut) return n - 1;
  return n;
}

bool other(uint8_t f) { return (f & kInRange) && !(f & (kWs | kL | kN)); }

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Chunk& c, size_t pos) {
  if (size_t n = contraction(c, pos, false)) return n;
  const size_t sp = c.cp(pos) == ' ' ? 1 : 0;
  const uint8_t f = c.fl(pos + sp);
  if (f & kL) return sp + c.run(pos + sp, kL);
  if (f & kN) return sp + c.run(pos + sp, kN);
  if (other(f)) {
    size_t n = sp;
    while (other(c.fl(pos + n))) ++n;
    return n;
  }
  const size_t ws = whitespace_tail(c, pos);
  return ws > 0 ? ws : 1;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3(const Chunk& c, size_t pos, size_t max_digits) {
  if (size_t n = contraction(c, pos, true)) return n;
  const uint32_t cp = c.cp(pos);
  const uint8_t f = c.fl(pos);
  if (!is_cr_lf(cp) && !(f & kN) && ((f & kL) || (c.fl(pos + 1) & kL))) {
    return 1 + c.run(pos + 1, kL);
  }
  if (f & kN) {
    const size_t n = c.run(pos, kN);
    return n < max_digits ? n : max_digits;
  }
  const size_t sp = cp == ' ' ? 1 : 0;
  if (other(c.fl(pos + sp))) {
    size_t n = sp;
    while (other(c.fl(pos + n))) ++n;
    while (is_cr_lf(c.cp(pos + n))) ++n;
    return n;
  }
  size_t num_ws = 0, last_crlf_end = 0;
  for (; c.fl(pos + num_ws) & kWs; ++num_ws) {
    if (is_cr_lf(c.cp(pos + num_ws))) last_crlf_end = num_ws + 1;
  }
  if (last_crlf_end > 0) return last_crlf_end;
  const size_t ws = whitespace_tail(c, pos);
  return ws > 0 ? ws : 1;
}

size_t match_llama3_digits3(const Chunk& c, size_t pos) { return match_llama3(c, pos, 3); }
size_t match_llama3_digits1(const Chunk& c, size_t pos) { return match_llama3(c, pos, 1); }

size_t match_number(const Chunk& c, size_t pos) { return c.fl(pos) & kN ? 1 : 0; }
size_t match_numbers(const Chunk& c, size_t pos) { return c.run(pos, kN); }
size_t match_cr_or_lf(const Chunk& c, size_t pos) { return is_cr_lf(c.cp(pos)) ? 1 : 0; }

bool is_ascii_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }
size_t match_three_ascii_digits(const Chunk& c, size_t pos) {
  return is_ascii_digit(c.cp(pos)) && is_ascii_digit(c.cp(pos + 1)) && is_ascii_digit(c.cp(pos + 2)) ? 3 : 0;
}

// Runs of units satisfying pred, with one optional leading whitespace: \s?[X]+
template <typename Pred>
size_t ws_opt_run(const Chunk& c, size_t pos, Pred pred) {
  auto run_from = [&](size_t p) {
    size_t n = 0;
    while (c.cp(p + n) != kOut && pred(c.cp(p + n), c.fl(p + n))) ++n;
    return n;
  };
  if (c.fl(pos) & kWs) {
    if (size_t n = run_from(pos + 1)) return 1 + n;
  }
  return run_from(pos);
}

template <typename Pred>
size_t run_of(const Chunk& c, size_t pos, Pred pred) {
  size_t n = 0;
  while (c.cp(pos + n) != kOut && pred(c.cp(pos + n), c.fl(pos + n))) ++n;
  return n;
}

// [\p{P}\$\+<=>\^~\|]+ (default) and the same with ` (falcon).
bool default_punct(uint32_t cp, uint8_t f) {
  return (f & kP) || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' || cp == '~' ||
         cp == '|';
}
size_t match_default_punct(const Chunk& c, size_t pos) { return run_of(c, pos, default_punct); }
size_t match_falcon_punct(const Chunk& c, size_t pos) {
  return run_of(c, pos, [](uint32_t cp, uint8_t f) { return default_punct(cp, f) || cp == '`'; });
}

// Cased letters (Lu/Ll/Lt) as listed in DeepSeek LLM's tokenizer regex.
constexpr uint32_t kDeepseekLetters[][2] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
    {0x376, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

bool deepseek_letter(uint32_t cp, uint8_t) {
  for (const auto& r : kDeepseekLetters) {
    if (cp < r[0]) return false;
    if (cp <= r[1]) return true;
  }
  return false;
}

// [!-/:-~！-／：-～‘-‟　-。]
bool deepseek_punct(uint32_t cp, uint8_t) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
         (cp >= 0xFF1A && cp <= 0xFF5E) || (cp >= 0x2018 && cp <= 0x201F) || (cp >= 0x3000 && cp <= 0x3002);
}

// [一-龥ࠀ-一가-퟿]
bool cjk(uint32_t cp, uint8_t) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x0800 && cp <= 0x4E00) || (cp >= 0xAC00 && cp <= 0xD7FF);
}

size_t match_deepseek_letters(const Chunk& c, size_t pos) { return ws_opt_run(c, pos, deepseek_letter); }
size_t match_deepseek_punct(const Chunk& c, size_t pos) { return ws_opt_run(c, pos, deepseek_punct); }
size_t match_cjk(const Chunk& c, size_t pos) { return run_of(c, pos, cjk); }
size_t match_ws_letters(const Chunk& c, size_t pos) {
  return ws_opt_run(c, pos, [](uint32_t, uint8_t f) { return (f & kL) != 0; });
}
size_t match_ws_punct(const Chunk& c, size_t pos) {
  return ws_opt_run(c, pos, [](uint32_t, uint8_t f) { return (f & kP) != 0; });
}
// \s+$ : the whitespace suffix of the piece.
size_t match_trailing_ws(const Chunk& c, size_t pos) {
  if (c.fl(pos - 1) & kWs) return 0;  // the run from pos-1 already failed: stay linear
  const size_t n = c.run(pos, kWs);
  return n > 0 && pos + n == c.end ? n : 0;
}

using Matcher = size_t (*)(const Chunk&, size_t);

// Splits one piece into matches and the gaps between them; appends lengths.
void split_chunk(const Chunk& c, Matcher match, std::vector<size_t>* lens) {
  size_t gap_start = c.begin;
  size_t pos = c.begin;
  while (pos < c.end) {
    const size_t n = match(c, pos);
    if (n == 0) {
      ++pos;
      continue;
    }
    if (pos > gap_start) lens->push_back(pos - gap_start);
    lens->push_back(n);
    pos += n;
    gap_start = pos;
  }
  if (c.end > gap_start) lens->push_back(c.end - gap_start);
}

std::vector<Matcher> matchers_for(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2: return {match_gpt2};
    case PreTokenizer::kLlama3: return {match_llama3_digits3};
    case PreTokenizer::kQwen2: return {match_llama3_digits1};
    case PreTokenizer::kDeepseekLlm:
      return {match_cr_or_lf, match_deepseek_letters, match_deepseek_punct, match_trailing_ws,
              match_cjk,      match_numbers};
    case PreTokenizer::kDeepseekCoder:
      return {match_cr_or_lf, match_ws_letters, match_ws_punct, match_cjk, match_number};
    case PreTokenizer::kFalcon: return {match_falcon_punct, match_gpt2, match_three_ascii_digits};
    case PreTokenizer::kStarcoder: return {match_number, match_gpt2};
    case PreTokenizer::kDefault: break;
  }
  return {match_default_punct, match_gpt2, match_numbers, match_three_ascii_digits};
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view name, bool* known) {
  struct Entry {
    std::string_view name;
    PreTokenizer kind;
  };
  static constexpr Entry kNames[] = {
      {"", PreTokenizer::kDefault},
      {"default", PreTokenizer::kDefault},
      {"gpt-2", PreTokenizer::kGpt2},
      {"gpt2", PreTokenizer::kGpt2},
      {"phi-2", PreTokenizer::kGpt2},
      {"mpt", PreTokenizer::kGpt2},
      {"olmo", PreTokenizer::kGpt2},
      {"jais", PreTokenizer::kGpt2},
      {"jina-es", PreTokenizer::kGpt2},
      {"jina-de", PreTokenizer::kGpt2},
      {"jina-v1-en", PreTokenizer::kGpt2},
      {"jina-v2-es", PreTokenizer::kGpt2},
      {"jina-v2-de", PreTokenizer::kGpt2},
      {"jina-v2-code", PreTokenizer::kGpt2},
      {"roberta-bpe", PreTokenizer::kGpt2},
      {"gigachat", PreTokenizer::kGpt2},
      {"trillion", PreTokenizer::kGpt2},
      {"llama3", PreTokenizer::kLlama3},
      {"llama-v3", PreTokenizer::kLlama3},
      {"llama-bpe", PreTokenizer::kLlama3},
      {"falcon3", PreTokenizer::kLlama3},
      {"falcon-h1", PreTokenizer::kLlama3},
      {"pixtral", PreTokenizer::kLlama3},
      {"dbrx", PreTokenizer::kLlama3},
      {"smaug-bpe", PreTokenizer::kLlama3},
      {"qwen2", PreTokenizer::kQwen2},
      {"deepseek-r1-qwen", PreTokenizer::kQwen2},
      {"stablelm2", PreTokenizer::kQwen2},
      {"hunyuan", PreTokenizer::kQwen2},
      {"deepseek-llm", PreTokenizer::kDeepseekLlm},
      {"deepseek-coder", PreTokenizer::kDeepseekCoder},
      {"falcon", PreTokenizer::kFalcon},
      {"starcoder", PreTokenizer::kStarcoder},
      {"refact", PreTokenizer::kStarcoder},
      {"command-r", PreTokenizer::kStarcoder},
      {"smollm", PreTokenizer::kStarcoder},
      {"codeshell", PreTokenizer::kStarcoder},
      {"exaone", PreTokenizer::kStarcoder},
      {"minerva-7b", PreTokenizer::kStarcoder},
  };
  for (const Entry& e : kNames) {
    if (e.name == name) {
      *known = true;
      return e.kind;
    }
  }
  *known = false;
  return PreTokenizer::kGpt2;
}

std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text) {
  Text t;
  t.units = decode_utf8(text);
  t.flags.reserve(t.units.size());
  for (const CodeUnit& u : t.units) t.flags.push_back(flags_of(u.cp));

  std::vector<size_t> lens = {t.units.size()};
  std::vector<size_t> next;
  for (Matcher m : matchers_for(kind)) {
    next.clear();
    size_t start = 0;
    for (size_t len : lens) {
      split_chunk(Chunk{t, start, start + len}, m, &next);
      start += len;
    }
    lens.swap(next);
  }

  std::vector<std::string_view> words;
  words.reserve(lens.size());
  size_t unit = 0;
  for (size_t len : lens) {
    if (len == 0) continue;
    const size_t b = t.units[unit].byte_offset;
    const CodeUnit& last = t.units[unit + len - 1];
    words.push_back(text.substr(b, last.byte_offset + last.byte_len - b));
    unit += len;
  }
  return words;
}

}  // namespace pagoda::tok
