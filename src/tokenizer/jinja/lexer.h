// Jinja lexer with the whitespace rules transformers uses for chat templates:
// trim_blocks=True (one newline after a block or comment tag is dropped),
// lstrip_blocks=True (spaces and tabs before a block or comment tag at the
// start of a line are dropped), `-` strips all whitespace on that side and
// `+` disables lstrip/trim; one trailing newline of the source is dropped
// (keep_trailing_newline=False) and \r\n / \r become \n.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

enum class TokenType {
  kData,        // literal template text (already whitespace-processed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int line;
};

// Throws jinja::Error ("line N: ...") on malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace pagoda::jinja
