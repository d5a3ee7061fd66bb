#include "grammar/regex_to_gbnf.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace pagoda::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kMaxRepeat = 4096;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's \s: white space and line terminators.
const Ranges kSpace = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// `.`: anything but a line terminator.
const Ranges kDot = {{0, '\n' - 1}, {'\n' + 1, '\r' - 1}, {'\r' + 1, 0x2027}, {0x202A, 0x10FFFF}};

std::string hex_escape(uint32_t cp) {
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  }
  return buf;
}

std::string class_char(uint32_t cp) {
  const bool plain = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return plain ? std::string(1, static_cast<char>(cp)) : hex_escape(cp);
}

class RegexConverter {
 public:
  RegexConverter(std::string_view re, RegexText mode) : re_(re), mode_(mode) {}

  Result<std::string> run() {
    std::string out;
    if (!alternation(0, &out)) return error_;
    if (pos_ != re_.size()) {
      fail(re_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
      return error_;
    }
    return "(" + out + ")";
  }

 private:
  bool fail(const std::string& what) {
    error_ =
        invalid_argument("regex: " + what + " at offset " + std::to_string(pos_) + " of \"" + std::string(re_) + "\"");
    return false;
  }
  bool at_end() const { return pos_ >= re_.size(); }
  char peek() const { return at_end() ? '\0' : re_[pos_]; }

  bool alternation(int depth, std::string* out) {
    while (true) {
      std::string seq;
      if (!sequence(depth, &seq)) return false;
      *out += seq.empty() ? "\"\"" : seq;
      if (peek() != '|') return true;
      ++pos_;
      *out += " | ";
    }
  }

  bool sequence(int depth, std::string* out) {
    bool first = true;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        if (depth != 0 || !first) return fail("'^' is only supported at the start");
        ++pos_;
        continue;
      }
      if (peek() == '$') {
        ++pos_;
        if (depth != 0 || !(at_end() || peek() == '|')) {
          --pos_;
          return fail("'$' is only supported at the end");
        }
        continue;
      }
      std::string atom_text;
      if (!atom(depth, &atom_text)) return false;
      if (!quantifiers(&atom_text)) return false;
      if (!out->empty()) *out += ' ';
      *out += atom_text;
      first = false;
    }
    return true;
  }

  bool quantifiers(std::string* atom_text) {
    while (!at_end()) {
      const char c = peek();
      std::string q;
      if (c == '*' || c == '+' || c == '?') {
        q = std::string(1, c);
        ++pos_;
      } else if (c == '{') {
        const size_t save = pos_;
        ++pos_;
        uint32_t m = 0, n = 0;
        bool has_n = false, comma = false;
        if (!number(&m)) {
          pos_ = save;  // a literal '{' (ECMAScript annex B)
          return true;
        }
        if (peek() == ',') {
          comma = true;
          ++pos_;
          has_n = number(&n);
        }
        if (peek() != '}') {
          pos_ = save;
          return true;
        }
        ++pos_;
        if (m > kMaxRepeat || (has_n && n > kMaxRepeat)) return fail("repetition count above 4096");
        if (has_n && n < m) return fail("repetition {m,n} with n < m");
        q = std::string("{").append(std::to_string(m));
        if (comma) q.append(",").append(has_n ? std::to_string(n) : std::string());
        q.append("}");
      } else {
        return true;
      }
      if (peek() == '?') ++pos_;  // lazy: same language
      // Appends, not operator+: GCC 12 warns falsely (-Wrestrict) on the latter.
      std::string wrapped = "(";
      wrapped.append(*atom_text).append(")").append(q);
      *atom_text = std::move(wrapped);
    }
    return true;
  }

  bool number(uint32_t* out) {
    if (peek() < '0' || peek() > '9') return false;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(peek() - '0'), uint64_t{1} << 32);
      ++pos_;
    }
    *out = static_cast<uint32_t>(std::min<uint64_t>(v, 0xFFFFFFFFu));
    return true;
  }

  bool atom(int depth, std::string* out) {
    const char c = peek();
    if (c == '(') {
      if (depth >= 256) return fail("groups nest deeper than 256");
      ++pos_;
      if (peek() == '?') {
        ++pos_;
        if (peek() == ':') {
          ++pos_;
        } else if (peek() == '<' && pos_ + 1 < re_.size() && re_[pos_ + 1] != '=' && re_[pos_ + 1] != '!') {
          while (!at_end() && peek() != '>') ++pos_;
          if (at_end()) return fail("unterminated group name");
          ++pos_;
        } else {
          return fail("lookaround assertions are not supported");
        }
      }
      std::string inner;
      if (!alternation(depth + 1, &inner)) return false;
      if (peek() != ')') return fail("missing ')'");
      ++pos_;
      *out = "(" + inner + ")";
      return true;
    }
    if (c == '[') return char_class(out);
    if (c == '.') {
      ++pos_;
      return emit_class(kDot, out);
    }
    if (c == '*' || c == '+' || c == '?') return fail("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      Ranges cls;
      uint32_t cp = 0;
      bool is_class = false;
      if (!escape(&cp, &cls, &is_class, false)) return false;
      return is_class ? emit_class(cls, out) : emit_literal(cp, out);
    }
    uint32_t cp;
    if (!next_code_point(&cp)) return false;
    return emit_literal(cp, out);
  }

  bool next_code_point(uint32_t* cp) {
    const std::string rest(re_.substr(pos_, 4));
    size_t i = 0;
    if (!decode_utf8(rest, &i, cp)) return fail("invalid UTF-8");
    pos_ += i;
    return true;
  }

  bool hex(int digits, uint32_t* cp) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return fail("bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    *cp = v;
    return true;
  }

  // After a backslash: a single character, or a class (\d \w \s and their
  // negations).
  bool escape(uint32_t* cp, Ranges* cls, bool* is_class, bool in_class) {
    if (at_end()) return fail("trailing backslash");
    const char e = peek();
    ++pos_;
    auto set_class = [&](const Ranges& r, bool negate) {
      *cls = normalize_ranges(r, negate);
      *is_class = true;
      return true;
    };
    switch (e) {
      case 'd': return set_class(kDigit, false);
      case 'D': return set_class(kDigit, true);
      case 'w': return set_class(kWord, false);
      case 'W': return set_class(kWord, true);
      case 's': return set_class(kSpace, false);
      case 'S': return set_class(kSpace, true);
      case 'n': *cp = '\n'; return true;
      case 'r': *cp = '\r'; return true;
      case 't': *cp = '\t'; return true;
      case 'f': *cp = '\f'; return true;
      case 'v': *cp = '\v'; return true;
      case '0': *cp = 0; return true;
      case 'x': return hex(2, cp);
      case 'u':
        if (peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (peek() != '}' && n < 7) {
            uint32_t d = 0;
            if (!hex(1, &d)) return false;
            v = v * 16 + d;
            ++n;
          }
          if (peek() != '}' || n == 0 || v > 0x10FFFF) return fail("bad \\u{...} escape");
          ++pos_;
          *cp = v;
          return true;
        }
        return hex(4, cp);
      case 'b':
        if (in_class) {
          *cp = '\b';
          return true;
        }
        --pos_;
        return fail("word boundaries (\\b) are not supported");
      case 'B': --pos_; return fail("\\B is not supported");
      case 'p':
      case 'P': --pos_; return fail("Unicode property classes are not supported");
      default:
        if (e >= '1' && e <= '9') {
          --pos_;
          return fail("backreferences are not supported");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          --pos_;
          return fail(std::string("unknown escape \\") + e);
        }
        *cp = static_cast<uint8_t>(e);
        return true;
    }
  }

  bool char_class(std::string* out) {
    ++pos_;  // [
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    Ranges ranges;
    while (at_end() || peek() != ']') {
      if (at_end()) return fail("unterminated character class");
      uint32_t lo = 0;
      bool is_class = false;
      Ranges cls;
      if (peek() == '\\') {
        ++pos_;
        if (!escape(&lo, &cls, &is_class, true)) return false;
      } else if (!next_code_point(&lo)) {
        return false;
      }
      if (is_class) {
        ranges.insert(ranges.end(), cls.begin(), cls.end());
        continue;
      }
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < re_.size() && re_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          if (!escape(&hi, &cls, &is_class, true)) return false;
          if (is_class) return fail("a class shorthand cannot end a range");
        } else if (!next_code_point(&hi)) {
          return false;
        }
        if (hi < lo) return fail("character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;  // ]
    return emit_class(normalize_ranges(std::move(ranges), negate), out);
  }

  bool emit_class(const Ranges& ranges, std::string* out) {
    Ranges r = ranges;
    if (mode_ == RegexText::kJsonString) {
      // Characters JSON must escape are left out: a sound subset.
      r = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
      Ranges both;
      for (const auto& a : ranges) {
        for (const auto& b : r) {
          const uint32_t lo = std::max(a.first, b.first), hi = std::min(a.second, b.second);
          if (lo <= hi) both.emplace_back(lo, hi);
        }
      }
      r = normalize_ranges(std::move(both), false);
      if (r.empty()) return fail("this class only matches characters a JSON string must escape");
    }
    if (r.empty()) return fail("this class matches nothing");
    std::string s = "[";
    for (const auto& [lo, hi] : r) {
      s += class_char(lo);
      if (hi != lo) s.append("-").append(class_char(hi));
    }
    *out = s + "]";
    return true;
  }

  bool emit_literal(uint32_t cp, std::string* out) {
    std::string text;
    if (mode_ == RegexText::kJsonString && (cp < 0x20 || cp == '"' || cp == '\\')) {
      switch (cp) {
        case '"': text = "\\\""; break;
        case '\\': text = "\\\\"; break;
        case '\n': text = "\\n"; break;
        case '\r': text = "\\r"; break;
        case '\t': text = "\\t"; break;
        case '\b': text = "\\b"; break;
        case '\f': text = "\\f"; break;
        default: {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", cp);
          text = buf;
        }
      }
    } else {
      append_utf8(cp, &text);
    }
    *out = gbnf_literal(text);
    return true;
  }

  std::string_view re_;
  RegexText mode_;
  size_t pos_ = 0;
  Status error_;
};

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view regex, RegexText mode) { return RegexConverter(regex, mode).run(); }

}  // namespace pagoda::grammar
