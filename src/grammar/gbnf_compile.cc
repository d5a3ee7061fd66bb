// GBNF text -> Grammar: a recursive-descent parser that lowers as it parses
// (literals to byte elements, classes to UTF-8 rules, repetitions to
// right-recursive rules), then the checks of grammar/grammar_check.cc.
#include <map>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/grammar_check.h"
#include "grammar/utf8_ranges.h"

namespace pagoda::grammar {
namespace {

// Repetition counts above this are refused: {m,n} is expanded into copies.
constexpr uint32_t kMaxRepeat = 4096;
// Elements after expansion, and parenthesis nesting: a hostile grammar
// (many large repetitions, or deep nesting) is refused before it costs
// memory or call stack.
constexpr size_t kMaxElements = size_t{1} << 20;
constexpr int kMaxNesting = 256;

using Seq = std::vector<Element>;
using Alts = std::vector<Seq>;

class Compiler {
 public:
  explicit Compiler(std::string_view text) : s_(text) {}

  Result<std::shared_ptr<const Grammar>> run() {
    skip_space(true);
    while (pos_ < s_.size()) {
      if (!parse_rule()) return error_;
      skip_space(true);
    }
    for (size_t r = 0; r < names_.size(); ++r) {
      if (!defined_[r]) return fail_at(first_use_[r], "rule '" + names_[r] + "' is used but never defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) return invalid_argument("grammar: no 'root' rule");
    auto g = std::make_shared<Grammar>();
    g->source = std::string(s_);
    g->byte_sets = std::move(sets_);
    g->rule_names = names_;
    g->root = root->second;
    for (const Alts& alts : rules_) {
      std::vector<uint32_t> starts;
      for (const Seq& seq : alts) {
        starts.push_back(static_cast<uint32_t>(g->elements.size()));
        g->elements.insert(g->elements.end(), seq.begin(), seq.end());
        g->elements.push_back({Op::kEnd, 0});
      }
      g->rule_alts.push_back(std::move(starts));
    }
    PAGODA_RETURN_IF_ERROR(check_grammar(*g));
    return std::shared_ptr<const Grammar>(std::move(g));
  }

 private:
  // --- errors -----------------------------------------------------------
  Status fail_at(size_t at, const std::string& what) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    error_ =
        invalid_argument("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
    return error_;
  }
  bool fail(const std::string& what) {
    fail_at(pos_, what);
    return false;
  }

  // --- lexing -----------------------------------------------------------
  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }
  // Skips blanks and comments; newlines too when `newlines` (inside
  // parentheses or after ::=, as in llama.cpp).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  // A rule continues on the next line when that line starts with '|'.
  bool continues_on_next_line() {
    size_t p = pos_;
    while (p < s_.size()) {
      const char c = s_[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < s_.size() && s_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    if (p < s_.size() && s_[p] == '|') {
      pos_ = p;
      return true;
    }
    return false;
  }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }
  bool parse_hex(int digits, uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return fail("expected " + std::to_string(digits) + " hex digits");
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) return fail("code point above U+10FFFF");
    *out = v;
    return true;
  }
  // One character of a literal or class: an escape or a UTF-8 code point.
  bool parse_char(uint32_t* cp) {
    if (at_end()) return fail("unexpected end of grammar");
    if (peek() == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case 't': *cp = '\t'; return true;
        case 'f': *cp = '\f'; return true;
        case 'v': *cp = '\v'; return true;
        case '0': *cp = 0; return true;
        case 'x': return parse_hex(2, cp);
        case 'u': return parse_hex(4, cp);
        case 'U': return parse_hex(8, cp);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'':
        case '/': *cp = static_cast<uint8_t>(e); return true;
        default: --pos_; return fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    const std::string rest(s_.substr(pos_, 4));
    size_t i = 0;
    if (!decode_utf8(rest, &i, cp)) return fail("invalid UTF-8");
    pos_ += i;
    return true;
  }

  // --- building ---------------------------------------------------------
  uint32_t rule_id(const std::string& name, size_t at) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(names_.size());
    ids_.emplace(name, id);
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    first_use_.push_back(at);
    return id;
  }
  uint32_t new_rule(const std::string& base, Alts alts) {
    std::string name;
    do {
      name = base + "-" + std::to_string(++generated_);
    } while (ids_.count(name));
    const uint32_t id = rule_id(name, pos_);
    rules_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }
  uint32_t byte_set(const ByteSet& set) {
    const auto key = set.bits;
    const auto it = set_ids_.find(key);
    if (it != set_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(sets_.size());
    sets_.push_back(set);
    set_ids_.emplace(key, id);
    return id;
  }
  Element byte_element(uint8_t lo, uint8_t hi) {
    ByteSet set;
    set.add_range(lo, hi);
    return {Op::kBytes, byte_set(set)};
  }
  // A character class: one byte element when every code point is ASCII,
  // otherwise a rule of UTF-8 alternatives (memoized per class).
  Seq char_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
    const auto memo = class_rules_.find(ranges);
    if (memo != class_rules_.end()) return {memo->second};
    std::vector<Utf8Sequence> seqs;
    for (const auto& r : ranges) utf8_sequences(r.first, r.second, &seqs);
    ByteSet ascii;
    Alts alts;
    for (const Utf8Sequence& seq : seqs) {
      if (seq.size() == 1) {
        ascii.add_range(seq[0].lo, seq[0].hi);
        continue;
      }
      Seq alt;
      for (const ByteRange& br : seq) alt.push_back(byte_element(br.lo, br.hi));
      alts.push_back(std::move(alt));
    }
    if (alts.empty()) {
      // An empty class is kept as an empty byte set: check_grammar reports
      // the rule that can then never finish.
      return {Element{Op::kBytes, byte_set(ascii)}};
    }
    if (!ascii.empty()) alts.insert(alts.begin(), Seq{Element{Op::kBytes, byte_set(ascii)}});
    const Element e{Op::kRule, new_rule(current_ + "-char", std::move(alts))};
    class_rules_.emplace(ranges, e);
    return {e};
  }

  // --- parsing ----------------------------------------------------------
  bool parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    if (name.empty()) return fail("expected a rule name");
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") return fail("expected '::=' after rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, start);
    if (defined_[id]) return fail_at(start, "rule '" + name + "' is defined twice").is_ok();
    defined_[id] = true;
    current_ = name;
    Alts alts;
    if (!parse_alternates(false, &alts)) return false;
    rules_[id] = std::move(alts);
    if (!at_end() && peek() != '\n' && peek() != '\r')
      return fail("unexpected character '" + std::string(1, peek()) + "'");
    return true;
  }
  bool parse_alternates(bool nested, Alts* out) {
    while (true) {
      Seq seq;
      if (!parse_sequence(nested, &seq)) return false;
      out->push_back(std::move(seq));
      if (peek() == '|' || (!nested && continues_on_next_line())) {
        ++pos_;
        skip_space(true);
        continue;
      }
      return true;
    }
  }
  bool parse_sequence(bool nested, Seq* out) {
    while (!at_end()) {
      const char c = peek();
      Seq unit;
      if (c == '"') {
        ++pos_;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') return fail("unterminated string literal");
          uint32_t cp;
          if (!parse_char(&cp)) return false;
          std::string bytes;
          append_utf8(cp, &bytes);
          for (const char b : bytes) unit.push_back(byte_element(static_cast<uint8_t>(b), static_cast<uint8_t>(b)));
        }
        ++pos_;
        if (unit.empty()) {
          skip_space(nested);
          if (is_postfix(peek())) return fail("repetition of an empty literal");
          continue;
        }
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (peek() == '^') {
          negate = true;
          ++pos_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (peek() != ']') {
          if (at_end()) return fail("unterminated character class");
          uint32_t lo, hi;
          if (!parse_char(&lo)) return false;
          hi = lo;
          if (peek() == '-' && peek(1) != ']' && pos_ + 1 < s_.size()) {
            ++pos_;
            if (!parse_char(&hi)) return false;
            if (hi < lo) return fail("character range is reversed");
          }
          ranges.emplace_back(lo, hi);
        }
        ++pos_;
        unit = char_class(normalize_ranges(std::move(ranges), negate));
      } else if (c == '.') {
        ++pos_;
        unit = char_class(normalize_ranges({{0, 0x10FFFF}}, false));
      } else if (c == '(') {
        if (++nesting_ > kMaxNesting) return fail("parentheses nest deeper than 256");
        ++pos_;
        skip_space(true);
        Alts alts;
        if (!parse_alternates(true, &alts)) return false;
        if (peek() != ')') return fail("expected ')'");
        ++pos_;
        --nesting_;
        if (alts.size() == 1 && !is_postfix(peek())) {
          unit = std::move(alts[0]);
        } else {
          unit = {Element{Op::kRule, new_rule(current_, std::move(alts))}};
        }
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        const std::string name = parse_name();
        unit = {Element{Op::kRule, rule_id(name, at)}};
      } else {
        break;
      }
      skip_space(nested);
      while (is_postfix(peek())) {
        if (!apply_postfix(&unit)) return false;
        skip_space(nested);
      }
      num_elements_ += unit.size();
      if (num_elements_ > kMaxElements) return fail("the grammar is too large once repetitions are expanded");
      out->insert(out->end(), unit.begin(), unit.end());
    }
    return true;
  }
  static bool is_postfix(char c) { return c == '*' || c == '+' || c == '?' || c == '{'; }
  bool parse_count(uint32_t* out) {
    if (peek() < '0' || peek() > '9') return fail("expected a number");
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kMaxRepeat) return fail("repetition count above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    *out = static_cast<uint32_t>(v);
    return true;
  }
  bool apply_postfix(Seq* unit) {
    const char op = peek();
    ++pos_;
    uint32_t min = 0, max = 0;
    bool unbounded = false;
    if (op == '*') {
      unbounded = true;
    } else if (op == '+') {
      min = 1;
      unbounded = true;
    } else if (op == '?') {
      max = 1;
    } else {
      skip_space(true);
      if (!parse_count(&min)) return false;
      skip_space(true);
      max = min;
      if (peek() == ',') {
        ++pos_;
        skip_space(true);
        if (peek() == '}') {
          unbounded = true;
        } else {
          if (!parse_count(&max)) return false;
          if (max < min) return fail("repetition {m,n} with n < m");
        }
        skip_space(true);
      }
      if (peek() != '}') return fail("expected '}'");
      ++pos_;
    }
    num_elements_ += size_t{min} + 3 * size_t{unbounded ? 1 : max - min};
    if (num_elements_ > kMaxElements) return fail("the grammar is too large once repetitions are expanded");
    *unit = repeat(*unit, min, max, unbounded);
    return true;
  }
  // x{min,max} (or x{min,}) as min copies followed by a star rule or nested
  // optional rules: x (x (x)?)? for the optional part.
  Seq repeat(Seq x, uint32_t min, uint32_t max, bool unbounded) {
    if (x.size() != 1) x = {Element{Op::kRule, new_rule(current_, {x})}};
    Seq out;
    for (uint32_t i = 0; i < min; ++i) out.push_back(x[0]);
    if (unbounded) {
      const uint32_t star = rule_id_reserved();
      rules_[star] = {Seq{x[0], Element{Op::kRule, star}}, Seq{}};
      out.push_back({Op::kRule, star});
      return out;
    }
    Element tail{};
    bool have_tail = false;
    for (uint32_t i = min; i < max; ++i) {
      Seq body{x[0]};
      if (have_tail) body.push_back(tail);
      tail = {Op::kRule, new_rule(current_, {body, Seq{}})};
      have_tail = true;
    }
    if (have_tail) out.push_back(tail);
    return out;
  }
  uint32_t rule_id_reserved() { return new_rule(current_, {}); }

  std::string_view s_;
  size_t pos_ = 0;
  Status error_;
  std::string current_;  // the rule being parsed (names generated rules)
  std::vector<Alts> rules_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, Element> class_rules_;
  int generated_ = 0;
  int nesting_ = 0;
  size_t num_elements_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_gbnf(std::string_view text) { return Compiler(text).run(); }

std::string gbnf_literal(std::string_view utf8) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (const char ch : utf8) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;  // UTF-8 passes through: the parser decodes it
    }
  }
  out += '"';
  return out;
}

}  // namespace pagoda::grammar
