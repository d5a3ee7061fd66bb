#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace pagoda::tok {

UnicodeClass unicode_class(uint32_t cp) {
  if (cp > 0x10FFFF) return UnicodeClass::kOther;
  // Last run whose first code point is <= cp.
  const ClassRun* end = kClassRuns + kNumClassRuns;
  const ClassRun* it = std::upper_bound(kClassRuns, end, cp, [](uint32_t v, const ClassRun& r) { return v < r.first; });
  return (it - 1)->cls;
}

bool is_unicode_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t utf8_lead_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

namespace {

// Expected sequence length of a lead byte and the allowed range of the second
// byte (stricter than 80..BF for E0, ED, F0, F4); 0 if the byte cannot lead.
struct LeadInfo {
  int len;
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes from `pos` that form a valid sequence or a valid prefix of
// one (0 if the byte cannot start one), and whether the sequence is complete.
int match_sequence(std::string_view s, size_t pos, bool* complete) {
  const LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
  *complete = false;
  if (info.len == 0) return 0;
  if (info.len == 1) {
    *complete = true;
    return 1;
  }
  int n = 1;
  for (; n < info.len && pos + n < s.size(); ++n) {
    const uint8_t c = static_cast<uint8_t>(s[pos + n]);
    const uint8_t lo = n == 1 ? info.lo : 0x80;
    const uint8_t hi = n == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) return n;
  }
  *complete = n == info.len;
  return n;
}

}  // namespace

std::vector<CodeUnit> decode_utf8(std::string_view text) {
  std::vector<CodeUnit> out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    bool complete = false;
    const int n = match_sequence(text, pos, &complete);
    if (!complete) {
      out.push_back({kInvalidCodePoint, static_cast<uint32_t>(pos), 1});
      ++pos;
      continue;
    }
    const auto* b = reinterpret_cast<const uint8_t*>(text.data() + pos);
    uint32_t cp = 0;
    switch (n) {
      case 1: cp = b[0]; break;
      case 2: cp = ((b[0] & 0x1Fu) << 6) | (b[1] & 0x3Fu); break;
      case 3: cp = ((b[0] & 0x0Fu) << 12) | ((b[1] & 0x3Fu) << 6) | (b[2] & 0x3Fu); break;
      default: cp = ((b[0] & 0x07u) << 18) | ((b[1] & 0x3Fu) << 12) | ((b[2] & 0x3Fu) << 6) | (b[3] & 0x3Fu);
    }
    out.push_back({cp, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
    pos += n;
  }
  return out;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_incomplete_tail(std::string_view bytes) {
  // An unfinished sequence is at most 3 bytes long, so only the last 3 lead
  // positions can start one.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const uint8_t b = static_cast<uint8_t>(bytes[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    bool complete = false;
    const int m = match_sequence(bytes, pos, &complete);
    return (!complete && m == static_cast<int>(back)) ? back : 0;
  }
  return 0;
}

std::string sanitize_utf8(std::string_view bytes) {
  // One U+FFFD per maximal invalid subpart, as Python and WHATWG decoders do.
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    const int n = match_sequence(bytes, pos, &complete);
    if (complete) {
      out.append(bytes.substr(pos, n));
    } else {
      out += "\xEF\xBF\xBD";
    }
    pos += n > 0 ? n : 1;
  }
  return out;
}

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 512> cp_to_byte;  // every alphabet code point is < 512

  ByteAlphabet() {
    cp_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
      append_utf8(cp, &byte_to_char[b]);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet kAlphabet;
  return kAlphabet;
}

}  // namespace

const std::string& byte_to_bpe_char(uint8_t b) { return alphabet().byte_to_char[b]; }

int bpe_char_to_byte(uint32_t cp) { return cp < 512 ? alphabet().cp_to_byte[cp] : -1; }

}  // namespace pagoda::tok
