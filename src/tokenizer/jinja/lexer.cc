#include "tokenizer/jinja/lexer.h"

#include <optional>

#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(TokenType::kData, src_.substr(pos_), line_);
        advance(src_.size());
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = at(tag + 2) == '-' || at(tag + 2) == '+' ? at(tag + 2) : 0;
      const size_t after_open = tag + 2 + (sign ? 1 : 0);
      std::string text = src_.substr(pos_, tag - pos_);
      strip_before(text, sign, kind != '{');
      if (!text.empty()) emit(TokenType::kData, std::move(text), line_);
      advance(after_open);
      line_starting_ = false;
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && is_raw_begin()) {
        lex_raw();
      } else {
        lex_tag(kind == '%');
      }
    }
    emit(TokenType::kEof, "", line_);
    return std::move(out_);
  }

 private:
  char at(size_t i) const { return i < src_.size() ? src_[i] : '\0'; }
  bool starts(size_t i, std::string_view s) const { return src_.compare(i, s.size(), s) == 0; }

  [[noreturn]] void error(int line, const std::string& msg) const { fail("line " + std::to_string(line) + ": " + msg); }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      const char c = at(i + 1);
      if (c == '{' || c == '%' || c == '#') return i;
    }
    return std::string::npos;
  }

  void emit(TokenType t, std::string text, int line) { out_.push_back({t, std::move(text), line}); }

  void advance(size_t to) {
    for (size_t i = pos_; i < to; ++i) line_ += src_[i] == '\n';
    line_starting_ = to > pos_ && src_[to - 1] == '\n';
    pos_ = to;
  }

  // `-` strips all trailing whitespace of the text; lstrip_blocks strips the
  // blanks between the last newline and a block/comment tag.
  void strip_before(std::string& text, char sign, bool block_like) const {
    if (sign == '-') {
      text = py_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && block_like) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          py_strip(std::string_view(text).substr(l_pos), std::nullopt, true, false).empty()) {
        text.resize(l_pos);
      }
    }
  }

  size_t skip_space(size_t i) const {
    size_t len = 0;
    while (i < src_.size() && is_py_space(utf8_decode(src_, i, &len))) i += len;
    return i;
  }

  void lex_comment() {
    const int line = line_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) error(line, "missing end of comment tag '#}'");
    const char sign = end > pos_ ? src_[end - 1] : 0;
    size_t next = end + 2;
    if (sign == '-')
      next = skip_space(next);
    else if (sign != '+' && at(next) == '\n')
      ++next;
    advance(next);
  }

  bool is_raw_begin() const {
    size_t i = skip_space(pos_);
    if (!starts(i, "raw")) return false;
    i = skip_space(i + 3);
    return starts(i, "%}") || starts(i, "-%}");
  }

  void lex_raw() {
    const int line = line_;
    size_t i = skip_space(skip_space(pos_) + 3);
    i = starts(i, "-%}") ? skip_space(i + 3) : i + 2;
    advance(i);
    for (size_t t = find_tag(pos_); t != std::string::npos; t = find_tag(t + 1)) {
      if (src_[t + 1] != '%') continue;
      const char sign = at(t + 2) == '-' || at(t + 2) == '+' ? at(t + 2) : 0;
      size_t j = skip_space(t + 2 + (sign ? 1 : 0));
      if (!starts(j, "endraw")) continue;
      j = skip_space(j + 6);
      size_t next;
      if (starts(j, "-%}"))
        next = skip_space(j + 3);
      else if (starts(j, "+%}"))
        next = j + 3;
      else if (starts(j, "%}"))
        next = at(j + 2) == '\n' ? j + 3 : j + 2;
      else
        continue;
      std::string text = src_.substr(pos_, t - pos_);
      strip_before(text, sign, true);
      if (!text.empty()) emit(TokenType::kData, std::move(text), line);
      advance(next);
      return;
    }
    error(line, "missing end of raw directive ('{% endraw %}')");
  }

  void lex_tag(bool block) {
    const int open_line = line_;
    emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin, block ? "{%" : "{{", line_);
    int depth = 0;
    while (true) {
      advance(skip_space(pos_));
      if (pos_ >= src_.size()) {
        error(open_line, std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") +
                             "' to close the tag opened here");
      }
      if (depth == 0 && end_tag(block)) return;
      lex_token(depth);
    }
  }

  bool end_tag(bool block) {
    const std::string_view close = block ? "%}" : "}}";
    size_t next;
    if (src_[pos_] == '-' && starts(pos_ + 1, close)) {
      next = skip_space(pos_ + 3);
    } else if (block && src_[pos_] == '+' && starts(pos_ + 1, close)) {
      next = pos_ + 3;
    } else if (starts(pos_, close)) {
      next = pos_ + 2;
      if (block && at(next) == '\n') ++next;
    } else {
      return false;
    }
    emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd, std::string(close), line_);
    advance(next);
    return true;
  }

  void lex_token(int& depth) {
    const char c = src_[pos_];
    const size_t start = pos_;
    if (is_digit(c)) {
      size_t i = pos_;
      auto digits = [&] {
        while (is_digit(at(i)) || (at(i) == '_' && is_digit(at(i + 1)))) ++i;
      };
      digits();
      bool is_float = false;
      const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
      if (!after_dot && at(i) == '.' && is_digit(at(i + 1))) {
        ++i, digits(), is_float = true;
      }
      if (!after_dot && (at(i) == 'e' || at(i) == 'E')) {
        size_t j = i + 1;
        if (at(j) == '+' || at(j) == '-') ++j;
        if (is_digit(at(j))) i = j, digits(), is_float = true;
      }
      std::string text;
      for (size_t k = start; k < i; ++k)
        if (src_[k] != '_') text += src_[k];
      emit(is_float ? TokenType::kFloat : TokenType::kInt, std::move(text), line_);
      advance(i);
    } else if (is_name_start(c)) {
      size_t i = pos_;
      while (is_name_char(at(i))) ++i;
      emit(TokenType::kName, src_.substr(pos_, i - pos_), line_);
      advance(i);
    } else if (c == '\'' || c == '"') {
      lex_string(c);
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                   ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};
      for (const char* op : kOps) {
        if (starts(pos_, op)) {
          const std::string s(op);
          if (s == "(" || s == "[" || s == "{") ++depth;
          if ((s == ")" || s == "]" || s == "}") && depth > 0) --depth;
          emit(TokenType::kOp, s, line_);
          advance(pos_ + s.size());
          return;
        }
      }
      error(line_, std::string("unexpected character '") + c + "' in tag");
    }
  }

  void lex_string(char quote) {
    const int line = line_;
    std::string value;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) error(line, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      i = unescape(i + 1, value, line);
    }
    emit(TokenType::kString, std::move(value), line);
    advance(i + 1);
  }

  // Python "unicode-escape" decoding of the escape starting at src_[i].
  size_t unescape(size_t i, std::string& out, int line) {
    if (i >= src_.size()) error(line, "unterminated string literal");
    const char e = src_[i];
    switch (e) {
      case '\n': return i + 1;
      case '\\': out += '\\'; return i + 1;
      case '\'': out += '\''; return i + 1;
      case '"': out += '"'; return i + 1;
      case 'a': out += '\a'; return i + 1;
      case 'b': out += '\b'; return i + 1;
      case 'f': out += '\f'; return i + 1;
      case 'n': out += '\n'; return i + 1;
      case 'r': out += '\r'; return i + 1;
      case 't': out += '\t'; return i + 1;
      case 'v': out += '\v'; return i + 1;
      default: break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t v = 0;
      size_t j = i;
      while (j < i + 3 && at(j) >= '0' && at(j) <= '7') v = v * 8 + static_cast<uint32_t>(at(j++) - '0');
      utf8_append(out, v);
      return j;
    }
    const int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (width == 0) {
      out += '\\';
      return i;  // unknown escape: the backslash stays, the char is read next
    }
    uint32_t v = 0;
    for (int k = 1; k <= width; ++k) {
      const int h = hex_value(at(i + static_cast<size_t>(k)));
      if (h < 0) error(line, "truncated \\" + std::string(1, e) + " escape in string literal");
      v = v * 16 + static_cast<uint32_t>(h);
    }
    if (v > 0x10FFFF) error(line, "illegal Unicode character in string literal");
    utf8_append(out, v);
    return i + 1 + static_cast<size_t>(width);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace pagoda::jinja
