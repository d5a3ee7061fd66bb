// Structured-output requests as GBNF text: JSON Schema (OpenAI's
// response_format json_schema, vLLM's guided_json), any JSON object
// (json_object), a choice among strings (guided_choice) and a regex
// (guided_regex). compile_gbnf turns the text into the grammar that
// constrains sampling.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::grammar {

// A grammar whose sentences are exactly... a sound subset of the instances of
// `schema` (every generated value validates). Supported: boolean schemas,
// type (and type lists), properties, required, additionalProperties (false or
// absent: only the listed properties, in their order; with no properties
// listed, any keys with values of the additionalProperties schema), enum,
// const, items, prefixItems, minItems, maxItems, minLength, maxLength,
// pattern (regex_to_gbnf; not together with min/maxLength), format (date,
// time, date-time, uuid; other formats are not enforced), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (numbers with bounds take integer values
// or, where the bounds allow a whole unit, decimals), anyOf, oneOf (as anyOf:
// the branches must not overlap), allOf of object schemas (merged), and local
// $ref (#/...), recursive ones included. Errors name the schema path.
// `root`: the name of the schema's rule (others are named after it), so the
// text can be part of a larger grammar.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& root = "root");

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string json_object_gbnf();

// Exactly one of the strings.
Result<std::string> choice_to_gbnf(const std::vector<std::string>& choices);

// Text matching the regex as a whole.
Result<std::string> regex_gbnf(std::string_view regex);

}  // namespace pagoda::grammar
