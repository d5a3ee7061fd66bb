#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace pagoda::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

int encode(uint32_t cp, uint8_t* b) {
  if (cp < 0x80) {
    b[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// [lo, hi] within one encoding length and surrogate-free.
void split(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>* out) {
  // Split where the encoding length changes.
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && max < hi) {
      split(lo, max, out);
      split(max + 1, hi, out);
      return;
    }
  }
  const int n = encoded_length(lo);
  // Split until every continuation byte below the first differing one spans
  // its whole range, so the byte ranges multiply out to exactly [lo, hi].
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  Utf8Sequence seq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) seq[static_cast<size_t>(i)] = {a[i], b[i]};
  out->push_back(std::move(seq));
}

}  // namespace

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>* out) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  // Surrogates have no UTF-8 encoding.
  if (lo < 0xD800 && hi >= 0xD800) {
    split(lo, 0xD7FF, out);
    if (hi > 0xDFFF) split(0xE000, hi, out);
    return;
  }
  if (lo >= 0xD800 && lo <= 0xDFFF) {
    if (hi <= 0xDFFF) return;
    lo = 0xE000;
  }
  split(lo, hi, out);
}

std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                            bool negate) {
  for (auto& r : ranges) r.second = std::min(r.second, kMaxCodePoint);
  std::erase_if(ranges, [](const auto& r) { return r.first > r.second; });
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (!negate) return merged;
  std::vector<std::pair<uint32_t, uint32_t>> inverse;
  uint32_t next = 0;
  for (const auto& r : merged) {
    if (r.first > next) inverse.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) inverse.emplace_back(next, kMaxCodePoint);
  return inverse;
}

void append_utf8(uint32_t cp, std::string* out) {
  uint8_t b[4];
  const int n = encode(std::min(cp, kMaxCodePoint), b);
  out->append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

bool decode_utf8(const std::string& s, size_t* i, uint32_t* cp) {
  const auto c = static_cast<uint8_t>(s[*i]);
  int n = 0;
  uint32_t v = 0;
  if (c < 0x80) {
    n = 1;
    v = c;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2;
    v = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    v = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    v = c & 0x07;
  } else {
    return false;
  }
  if (*i + static_cast<size_t>(n) > s.size()) return false;
  for (int k = 1; k < n; ++k) {
    const auto d = static_cast<uint8_t>(s[*i + static_cast<size_t>(k)]);
    if ((d & 0xC0) != 0x80) return false;
    v = (v << 6) | (d & 0x3F);
  }
  if (encoded_length(v) != n || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *i += static_cast<size_t>(n);
  *cp = v;
  return true;
}

}  // namespace pagoda::grammar
