// Random regular expressions for the grammar tests, each printed twice from one tree: as an ECMAScript regex (to be
// matched against a whole string) and as an equivalent llama.cpp GBNF grammar whose rule `root` accepts exactly the
// same strings. Only bounded quantifiers are drawn, so every language is finite and non-empty, with strings of at most
// kMaxRegexMatchChars characters. Only rng() is drawn, so a logged seed reproduces the case with any standard library.
#pragma once

#include <algorithm>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::test {

inline constexpr size_t kMaxRegexMatchChars = 60;

struct RegexCase {
  std::string regex;  // ECMAScript, for std::regex_match (the whole string must match)
  std::string gbnf;   // one rule, "root ::= ...", using only escapes llama.cpp's parser knows
};

namespace random_regex_detail {

enum class Kind { kLiteral, kClass, kDot, kDigit, kWord, kSpace, kConcat, kAlt, kRepeat };

struct Node {
  Kind kind = Kind::kLiteral;
  std::string text;                           // kLiteral: one or more ASCII characters
  std::vector<std::pair<char, char>> ranges;  // kClass: inclusive ranges of printable ASCII
  bool negated = false;                       // kClass
  int min = 0, max = 0;                       // kRepeat: {min,max}; printed "?" when question
  bool question = false;
  std::vector<Node> children;
};

inline Node make_node(Kind kind) {
  Node n;
  n.kind = kind;
  return n;
}

inline size_t max_length(const Node& n) {
  size_t total = 0;
  switch (n.kind) {
    case Kind::kLiteral: return n.text.size();
    case Kind::kConcat:
      for (const Node& c : n.children) total += max_length(c);
      return total;
    case Kind::kAlt:
      for (const Node& c : n.children) total = std::max(total, max_length(c));
      return total;
    case Kind::kRepeat: return static_cast<size_t>(n.max) * max_length(n.children[0]);
    default: return 1;
  }
}

inline std::string hex_escape(char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(c));
  return buf;
}

// ECMAScript: syntax characters get a backslash outside classes; inside a class only \ ] [ ^ - need one.
inline std::string regex_char(char c, bool in_class) {
  if (c == '\n') return "\\n";
  const std::string special = in_class ? "\\][^-" : "\\^$.|?*+()[]{}/";
  return special.find(c) != std::string::npos ? std::string("\\") + c : std::string(1, c);
}

// GBNF (llama.cpp parse_char knows only \x \u \U \t \r \n \\ \" \[ \]): '-' and '^' inside a class, which would read
// as a range or a negation, are written as \xHH.
inline std::string gbnf_char(char c, bool in_class) {
  if (c == '\n') return "\\n";
  if (c == '\\') return "\\\\";
  if (in_class) {
    if (c == ']' || c == '[') return std::string("\\") + c;
    if (c == '-' || c == '^') return hex_escape(c);
    return std::string(1, c);
  }
  return c == '"' ? "\\\"" : std::string(1, c);
}

inline std::string print_class(const Node& n, bool gbnf) {
  std::string out = n.negated ? "[^" : "[";
  for (const auto& [lo, hi] : n.ranges) {
    out += gbnf ? gbnf_char(lo, true) : regex_char(lo, true);
    if (hi != lo) out.append("-").append(gbnf ? gbnf_char(hi, true) : regex_char(hi, true));
  }
  return out + "]";
}

inline std::string print(const Node& n, bool gbnf);

// An operand of a quantifier: one regex atom or one GBNF element (a GBNF literal of any length is one element).
inline std::string print_atom(const Node& n, bool gbnf) {
  const bool atomic = n.kind == Kind::kClass || n.kind == Kind::kDot || n.kind == Kind::kDigit ||
                      n.kind == Kind::kWord || n.kind == Kind::kSpace || n.kind == Kind::kAlt ||
                      (n.kind == Kind::kLiteral && (gbnf || n.text.size() == 1));
  return atomic ? print(n, gbnf) : "(" + print(n, gbnf) + ")";
}

inline std::string print(const Node& n, bool gbnf) {
  std::string out;
  switch (n.kind) {
    case Kind::kLiteral:
      for (char c : n.text) out += gbnf ? gbnf_char(c, false) : regex_char(c, false);
      return gbnf ? "\"" + out + "\"" : out;
    case Kind::kClass: return print_class(n, gbnf);
    // ECMAScript "." also excludes \r, U+2028 and U+2029; the explicit class is read the same way by both syntaxes.
    case Kind::kDot: return "[^\\n\\r]";
    case Kind::kDigit: return gbnf ? "[0-9]" : "\\d";
    case Kind::kWord: return gbnf ? "[0-9A-Za-z_]" : "\\w";
    case Kind::kSpace: return gbnf ? "[ \\t\\n\\r\\x0B\\x0C]" : "\\s";
    case Kind::kConcat:
      for (const Node& c : n.children) out += (gbnf && !out.empty() ? " " : "") + print(c, gbnf);
      return out;
    case Kind::kAlt:
      for (const Node& c : n.children) out += (out.empty() ? "" : gbnf ? " | " : "|") + print(c, gbnf);
      return "(" + out + ")";
    case Kind::kRepeat:
      out = print_atom(n.children[0], gbnf);
      if (n.question) return out + "?";
      if (n.min == n.max) return out + "{" + std::to_string(n.min) + "}";
      return out + "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
  }
  return out;
}

class Generator {
 public:
  explicit Generator(std::mt19937& rng) : rng_(rng) {}

  Node node(int depth) {
    const size_t r = below(100);
    if (depth >= 3 || (depth > 0 && r < 40)) return leaf();
    if (r < 60) return composite(Kind::kConcat, depth, between(2, 4));
    if (r < 80) return composite(Kind::kAlt, depth, between(2, 3));
    Node n = make_node(Kind::kRepeat);
    n.children.push_back(node(depth + 1));
    const size_t q = below(10);
    n.question = q < 3;
    n.min = q < 3 ? 0 : between(0, 3);
    n.max = q < 3 ? 1 : q < 6 ? std::max(n.min, 1) : between(std::max(n.min, 1), 4);
    if (q >= 3 && q < 6) n.min = n.max;  // {m}
    return n;
  }

 private:
  size_t below(size_t n) { return rng_() % n; }
  int between(int lo, int hi) { return lo + static_cast<int>(below(static_cast<size_t>(hi - lo + 1))); }

  Node composite(Kind kind, int depth, int num_children) {
    Node n = make_node(kind);
    for (int i = 0; i < num_children; ++i) n.children.push_back(node(depth + 1));
    return n;
  }

  // Mostly letters and digits, sometimes a character that needs escaping in one syntax or the other.
  char literal_char() {
    static const std::string kSpecial = ".*+?()[]{}|\\\" \n^$-/#'";
    static const std::string kPlain = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789";
    return below(10) < 3 ? kSpecial[below(kSpecial.size())] : kPlain[below(kPlain.size())];
  }
  char printable() { return static_cast<char>(0x20 + below(0x7F - 0x20)); }

  Node char_class() {
    static const std::vector<std::pair<char, char>> kNamed = {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'a', 'f'}};
    static const std::string kAwkward = "]\\-^[\" .";
    Node n = make_node(Kind::kClass);
    n.negated = below(4) == 0;
    for (int i = between(1, 3); i > 0; --i) {
      const size_t r = below(10);
      if (r < 4) {
        n.ranges.push_back(kNamed[below(kNamed.size())]);
      } else if (r < 7) {
        const char lo = printable();
        n.ranges.emplace_back(lo, static_cast<char>(std::min<int>(0x7E, lo + static_cast<int>(below(16)))));
      } else {
        const char c = r < 9 ? kAwkward[below(kAwkward.size())] : printable();
        n.ranges.emplace_back(c, c);
      }
    }
    return n;
  }

  Node leaf() {
    const size_t r = below(10);
    if (r < 4) {
      Node n = make_node(Kind::kLiteral);
      for (int i = between(1, 4); i > 0; --i) n.text += literal_char();
      return n;
    }
    if (r < 7) return char_class();
    if (r < 8) return make_node(Kind::kDot);
    return make_node(r == 8 ? Kind::kDigit : below(2) ? Kind::kWord : Kind::kSpace);
  }

  std::mt19937& rng_;
};

inline void append_utf32(const std::string& s, std::wstring* out) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : b >> 5 == 6 ? 2 : b >> 4 == 14 ? 3 : 4;
    char32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out->push_back(static_cast<wchar_t>(cp));
    i += len;
  }
}

}  // namespace random_regex_detail

// A random case whose language is finite, non-empty and holds no string longer than kMaxRegexMatchChars.
inline RegexCase random_regex_case(std::mt19937& rng) {
  using namespace random_regex_detail;
  while (true) {
    const Node root = Generator(rng).node(0);
    if (max_length(root) <= kMaxRegexMatchChars) return {print(root, false), "root ::= " + print(root, true)};
  }
}

// Whole-string match of a UTF-8 string, one code point at a time (std::wregex over UTF-32, wchar_t being 32 bits on
// Linux). std::regex over the bytes would let a negated class match one byte of a multi-byte character only, while
// GBNF's [^...] consumes a whole code point; matching code points makes the two syntaxes agree on non-ASCII text.
inline bool regex_full_match(const std::string& regex, const std::string& utf8) {
  static_assert(sizeof(wchar_t) == 4, "needs a 32-bit wchar_t");
  std::wstring pattern, text;
  random_regex_detail::append_utf32(regex, &pattern);
  random_regex_detail::append_utf32(utf8, &text);
  return std::regex_match(text, std::wregex(pattern, std::regex::ECMAScript));
}

}  // namespace pagoda::test
