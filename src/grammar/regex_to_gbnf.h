// Regular expressions (the ECMAScript subset that structured-output APIs
// send: vLLM's guided_regex, JSON Schema's `pattern`) as GBNF expressions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace pagoda::grammar {

enum class RegexText {
  kRaw,         // the generated text itself must match
  kJsonString,  // the text is the inside of a JSON string: characters that
                // JSON escapes are written escaped, and a class never
                // generates a character that would need an escape
};

// A GBNF expression (no rules of its own) matching exactly the strings the
// regex matches as a whole (^ and $ are implied; written ones may stand at the
// ends of the pattern or of top-level alternatives). Supported: literals and
// escapes (\n \t \xHH \uHHHH \. ...), classes with ranges and negation, \d \w
// \s \D \W \S, `.`, groups ((...), (?:...), (?<name>...)), |, and the
// quantifiers * + ? {m} {m,} {m,n} (a lazy `?` suffix is ignored).
// Backreferences, lookaround, \b and \p{...} are refused with the position.
Result<std::string> regex_to_gbnf(std::string_view regex, RegexText mode);

}  // namespace pagoda::grammar
