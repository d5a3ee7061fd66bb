#include "tokenizer/jinja/py_string.h"

#include <algorithm>

namespace pagoda::jinja {

uint32_t utf8_decode(std::string_view s, size_t pos, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  int n = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 1, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3, cp = b0 & 0x07;
  } else {
    *len = 1;
    return b0;
  }
  if (pos + n >= s.size()) {
    *len = 1;
    return b0;
  }
  for (int i = 1; i <= n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      *len = 1;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *len = static_cast<size_t>(n) + 1;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_py_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    offs.push_back(i);
    utf8_decode(s, i, &len);
  }
  offs.push_back(s.size());
  return offs;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++n) utf8_decode(s, i, &len);
  return n;
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    utf8_decode(s, i, &len);
    out.emplace_back(s.substr(i, len));
  }
  return out;
}

namespace {

std::vector<uint32_t> decode_all(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0, len = 0; i < s.size(); i += len) cps.push_back(utf8_decode(s, i, &len));
  return cps;
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<uint32_t> set = chars ? decode_all(*chars) : std::vector<uint32_t>{};
  auto strip_it = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_py_space(cp);
  };
  const std::vector<size_t> offs = code_point_offsets(s);
  size_t b = 0, e = offs.size() - 1;  // code point range [b, e)
  size_t len = 0;
  if (left) {
    while (b < e && strip_it(utf8_decode(s, offs[b], &len))) ++b;
  }
  if (right) {
    while (e > b && strip_it(utf8_decode(s, offs[e - 1], &len))) --e;
  }
  return std::string(s.substr(offs[b], offs[e] - offs[b]));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit && end >= sep->size()) {
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Whitespace split over code points.
  const std::vector<size_t> offs = code_point_offsets(s);
  const size_t n = offs.size() - 1;
  size_t len = 0;
  auto space = [&](size_t i) { return is_py_space(utf8_decode(s, offs[i], &len)); };
  auto piece = [&](size_t b, size_t e) { return std::string(s.substr(offs[b], offs[e] - offs[b])); };
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && space(i)) ++i;
      if (i == n) break;
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(piece(i, n));
        break;
      }
      size_t j = i;
      while (j < n && !space(j)) ++j;
      parts.push_back(piece(i, j));
      i = j;
    }
    return parts;
  }
  size_t e = n;
  while (true) {
    while (e > 0 && space(e - 1)) --e;
    if (e == 0) break;
    if (static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(piece(0, e));
      break;
    }
    size_t b = e;
    while (b > 0 && !space(b - 1)) --b;
    parts.push_back(piece(b, e));
    e = b;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0, len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = utf8_decode(s, i, &len);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
                     cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    lines.emplace_back(s.substr(start, i - start));
    if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++len;
    start = i + len;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    // Python inserts repl before every code point and at the end.
    const std::vector<size_t> offs = code_point_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (done++ < count) out += repl;
      out += s.substr(offs[i], offs[i + 1] - offs[i]);
    }
    if (done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  for (int64_t done = 0; done < count; ++done) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += repl;
    pos = hit + old.size();
  }
  out += s.substr(pos);
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(code_point_count(s.substr(0, hit)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(code_point_count(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

namespace {

// Pairs where the even code point is upper case and the odd one lower case
// (Latin Extended-A runs), or the reverse.
bool even_upper_pair(uint32_t c) { return (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177); }
bool odd_upper_pair(uint32_t c) { return (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E); }

}  // namespace

uint32_t cp_upper(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c == 0x131) return 'I';  // dotless i
  if (even_upper_pair(c)) return c & ~1u;
  if (odd_upper_pair(c)) return (c & 1u) ? c : c - 1;
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3CB) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t cp_lower(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c == 0x130) return c;  // İ lowers to two code points in Python; left as is
  if (even_upper_pair(c)) return c | 1u;
  if (odd_upper_pair(c)) return (c & 1u) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

namespace {

template <typename F>
std::string map_code_points(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = utf8_decode(s, i, &len);
    const uint32_t m = f(cp, i);
    if (m == cp)
      out.append(s.substr(i, len));  // keeps invalid bytes as they were
    else
      utf8_append(out, m);
  }
  return out;
}

bool is_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

}  // namespace

std::string py_upper(std::string_view s) {
  std::string out = map_code_points(s, [](uint32_t c, size_t) { return cp_upper(c); });
  if (out.find("\xC3\x9F") != std::string::npos) out = py_replace(out, "\xC3\x9F", "SS", -1);  // ß
  return out;
}

std::string py_lower(std::string_view s) {
  return map_code_points(s, [](uint32_t c, size_t) { return cp_lower(c); });
}

std::string py_capitalize(std::string_view s) {
  return map_code_points(s, [](uint32_t c, size_t i) { return i == 0 ? cp_upper(c) : cp_lower(c); });
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_code_points(s, [&](uint32_t c, size_t) {
    const uint32_t m = prev_cased ? cp_lower(c) : cp_upper(c);
    prev_cased = is_cased(c);
    return m;
  });
}

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  std::vector<int64_t> idx;
  if (st == 0) return idx;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, lo, hi);
  };
  if (st > 0) {
    const int64_t b = clamp(start, 0, 0, n), e = clamp(stop, n, 0, n);
    for (int64_t i = b; i < e; i += st) {
      idx.push_back(i);
      if (st >= e - i) break;
    }
  } else {
    const int64_t b = clamp(start, n - 1, -1, n - 1), e = clamp(stop, -1, -1, n - 1);
    for (int64_t i = b; i > e; i += st) {
      idx.push_back(i);
      if (-(st + 1) >= i - e - 1) break;
    }
  }
  return idx;
}

}  // namespace pagoda::jinja
