// An independent JSON Schema (2020-12 subset) validator for the grammar tests: it checks what the grammar engine
// generated without sharing any code with src/grammar/, so a bug in the engine's schema handling cannot hide itself.
// Supported: boolean schemas, type, properties, required, additionalProperties, enum, const, items, prefixItems,
// minItems, maxItems, minLength, maxLength (code points), pattern (std::regex_search), format (date, time,
// date-time, uuid), minimum, maximum, exclusiveMinimum, exclusiveMaximum, anyOf, oneOf, allOf, not, local $ref, and
// draft-7 tuples (items as an array, additionalItems).
// Any other keyword is ignored, as the spec asks of unknown keywords.
#pragma once

#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace pagoda::test {
namespace schema_validator_detail {

using nlohmann::json;

// A schema that refers to itself without consuming input ({"$ref": "#"}) would recurse forever.
inline constexpr int kMaxDepth = 200;

struct Context {
  const json& root;
  std::string* why;
};

inline bool fail(const Context& ctx, const std::string& path, const std::string& reason) {
  if (ctx.why) *ctx.why = "at " + (path.empty() ? std::string("/") : path) + ": " + reason;
  return false;
}

// JSON-pointer escaping of one key, so a path stays unambiguous for keys holding '/' or '~'.
inline std::string pointer_key(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}

inline size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // every byte but a continuation byte starts a code point
  return n;
}

inline bool type_matches(const std::string& type, const json& v) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d;  // 3.0 is an integer in JSON Schema
  }
  return false;
}

// Reads exactly `n` digits at s[*pos] into *out.
inline bool read_digits(const std::string& s, size_t* pos, int n, int* out) {
  if (*pos + n > s.size()) return false;
  *out = 0;
  for (int i = 0; i < n; ++i) {
    const char c = s[*pos + i];
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    *out = *out * 10 + (c - '0');
  }
  *pos += n;
  return true;
}
inline bool read_char(const std::string& s, size_t* pos, char c) {
  if (*pos >= s.size() || s[*pos] != c) return false;
  ++*pos;
  return true;
}

// YYYY-MM-DD with month 01-12 and day 01-31 (the day is not checked against the month).
inline bool parse_date(const std::string& s, size_t* pos) {
  int y, m, d;
  return read_digits(s, pos, 4, &y) && read_char(s, pos, '-') && read_digits(s, pos, 2, &m) && m >= 1 && m <= 12 &&
         read_char(s, pos, '-') && read_digits(s, pos, 2, &d) && d >= 1 && d <= 31;
}
// HH:MM:SS, optional fraction, optional "Z" or +HH:MM / -HH:MM.
inline bool parse_time(const std::string& s, size_t* pos) {
  int h, m, sec;
  if (!(read_digits(s, pos, 2, &h) && h <= 23 && read_char(s, pos, ':') && read_digits(s, pos, 2, &m) && m <= 59 &&
        read_char(s, pos, ':') && read_digits(s, pos, 2, &sec) && sec <= 59))
    return false;
  if (read_char(s, pos, '.')) {
    const size_t start = *pos;
    while (*pos < s.size() && std::isdigit(static_cast<unsigned char>(s[*pos]))) ++*pos;
    if (*pos == start) return false;
  }
  if (read_char(s, pos, 'Z')) return true;
  if (read_char(s, pos, '+') || read_char(s, pos, '-'))
    return read_digits(s, pos, 2, &h) && h <= 23 && read_char(s, pos, ':') && read_digits(s, pos, 2, &m) && m <= 59;
  return true;
}
inline bool format_matches(const std::string& format, const std::string& s) {
  size_t pos = 0;
  if (format == "date") return parse_date(s, &pos) && pos == s.size();
  if (format == "time") return parse_time(s, &pos) && pos == s.size();
  if (format == "date-time")
    return parse_date(s, &pos) && read_char(s, &pos, 'T') && parse_time(s, &pos) && pos == s.size();
  if (format == "uuid") {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
    }
    return true;
  }
  return true;  // formats this validator does not know are annotations only
}

// Patterns are compiled once per thread; a test validates thousands of values against the same few patterns.
inline const std::regex& compiled(const std::string& pattern) {
  thread_local std::map<std::string, std::regex> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first;
  return it->second;
}

inline bool validate(const Context& ctx, const json& schema, const json& v, const std::string& path, int depth);

inline bool validate_ref(const Context& ctx, const std::string& ref, const json& v, const std::string& path,
                         int depth) {
  if (ref.empty() || ref[0] != '#') return fail(ctx, path, "unsupported non-local $ref " + ref);
  const json* target = nullptr;
  try {
    target = &ctx.root.at(json::json_pointer(ref.substr(1)));  // covers #/$defs/X, #/definitions/X and #
  } catch (const json::exception&) {
    return fail(ctx, path, "unresolvable $ref " + ref);
  }
  return validate(ctx, *target, v, path, depth + 1);
}

inline bool validate_number(const Context& ctx, const json& s, const json& v, const std::string& path) {
  const double x = v.get<double>();
  if (s.contains("minimum") && s["minimum"].is_number() && x < s["minimum"].get<double>())
    return fail(ctx, path, v.dump() + " < minimum " + s["minimum"].dump());
  if (s.contains("maximum") && s["maximum"].is_number() && x > s["maximum"].get<double>())
    return fail(ctx, path, v.dump() + " > maximum " + s["maximum"].dump());
  if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && x <= s["exclusiveMinimum"].get<double>())
    return fail(ctx, path, v.dump() + " <= exclusiveMinimum " + s["exclusiveMinimum"].dump());
  if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && x >= s["exclusiveMaximum"].get<double>())
    return fail(ctx, path, v.dump() + " >= exclusiveMaximum " + s["exclusiveMaximum"].dump());
  return true;
}

inline bool validate_string(const Context& ctx, const json& s, const json& v, const std::string& path) {
  const std::string& str = v.get_ref<const std::string&>();
  const size_t len = count_code_points(str);
  if (s.contains("minLength") && len < s["minLength"].get<size_t>())
    return fail(ctx, path, "length " + std::to_string(len) + " < minLength " + s["minLength"].dump());
  if (s.contains("maxLength") && len > s["maxLength"].get<size_t>())
    return fail(ctx, path, "length " + std::to_string(len) + " > maxLength " + s["maxLength"].dump());
  if (s.contains("pattern")) {
    bool found = false;
    try {
      found = std::regex_search(str, compiled(s["pattern"].get<std::string>()));
    } catch (const std::regex_error&) {
      return fail(ctx, path, "pattern " + s["pattern"].dump() + " is not a valid std::regex");
    }
    if (!found) return fail(ctx, path, v.dump() + " does not match pattern " + s["pattern"].dump());
  }
  if (s.contains("format") && s["format"].is_string() && !format_matches(s["format"].get<std::string>(), str))
    return fail(ctx, path, v.dump() + " is not a valid " + s["format"].get<std::string>());
  return true;
}

inline bool validate_array(const Context& ctx, const json& s, const json& v, const std::string& path, int depth) {
  if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
    return fail(ctx, path, std::to_string(v.size()) + " items < minItems " + s["minItems"].dump());
  if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
    return fail(ctx, path, std::to_string(v.size()) + " items > maxItems " + s["maxItems"].dump());
  // Draft 7 spelled prefixItems / items as an array-valued items / additionalItems; both spellings are read.
  const bool old_tuple = s.contains("items") && s["items"].is_array();
  const char* prefix_key = old_tuple ? "items" : "prefixItems";
  const char* rest_key = old_tuple ? "additionalItems" : "items";
  size_t num_prefix = 0;
  if (s.contains(prefix_key)) {
    num_prefix = s[prefix_key].size();
    for (size_t i = 0; i < num_prefix && i < v.size(); ++i)
      if (!validate(ctx, s[prefix_key][i], v[i], path + "/" + std::to_string(i), depth + 1)) return false;
  }
  if (s.contains(rest_key))  // covers only the elements after the prefix
    for (size_t i = num_prefix; i < v.size(); ++i)
      if (!validate(ctx, s[rest_key], v[i], path + "/" + std::to_string(i), depth + 1)) return false;
  return true;
}

inline bool validate_object(const Context& ctx, const json& s, const json& v, const std::string& path, int depth) {
  if (s.contains("required"))
    for (const auto& name : s["required"])
      if (!v.contains(name.get<std::string>())) return fail(ctx, path, "missing required property " + name.dump());
  const json* props = s.contains("properties") ? &s["properties"] : nullptr;
  const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  for (const auto& [key, child] : v.items()) {
    const std::string child_path = path + "/" + pointer_key(key);
    if (props && props->contains(key)) {
      if (!validate(ctx, (*props)[key], child, child_path, depth + 1)) return false;
    } else if (extra && !validate(ctx, *extra, child, child_path, depth + 1)) {
      if (extra->is_boolean()) return fail(ctx, path, "additional property \"" + key + "\" not allowed");
      return false;
    }
  }
  return true;
}

// Runs every branch with a scratch reason so that one failing branch does not overwrite the caller's message.
inline int count_matches(const Context& ctx, const json& branches, const json& v, const std::string& path, int depth,
                         std::string* first_reason) {
  int n = 0;
  for (const auto& branch : branches) {
    std::string reason;
    if (validate(Context{ctx.root, &reason}, branch, v, path, depth + 1))
      ++n;
    else if (first_reason->empty())
      *first_reason = reason;
  }
  return n;
}

inline bool validate_combinators(const Context& ctx, const json& s, const json& v, const std::string& path, int depth) {
  if (s.contains("allOf"))
    for (const auto& branch : s["allOf"])
      if (!validate(ctx, branch, v, path, depth + 1)) return false;
  std::string reason;
  if (s.contains("anyOf") && count_matches(ctx, s["anyOf"], v, path, depth, &reason) == 0)
    return fail(ctx, path, "matches no anyOf branch (first: " + reason + ")");
  if (s.contains("oneOf")) {
    reason.clear();
    const int n = count_matches(ctx, s["oneOf"], v, path, depth, &reason);
    if (n > 1) return fail(ctx, path, "matches " + std::to_string(n) + " oneOf branches");
    if (n == 0) return fail(ctx, path, "matches no oneOf branch (first: " + reason + ")");
  }
  if (s.contains("not")) {
    std::string ignored;
    if (validate(Context{ctx.root, &ignored}, s["not"], v, path, depth + 1)) return fail(ctx, path, "matches `not`");
  }
  return true;
}

inline bool validate(const Context& ctx, const json& s, const json& v, const std::string& path, int depth) {
  if (depth > kMaxDepth) return fail(ctx, path, "schema recursion too deep");
  if (s.is_boolean()) return s.get<bool>() || fail(ctx, path, "schema false allows nothing");
  if (!s.is_object()) return fail(ctx, path, "schema is neither an object nor a boolean");
  if (s.contains("$ref") && !validate_ref(ctx, s["$ref"].get<std::string>(), v, path, depth)) return false;
  if (s.contains("type")) {
    const json& t = s["type"];
    bool ok = false;
    if (t.is_string())
      ok = type_matches(t.get<std::string>(), v);
    else
      for (const auto& one : t) ok = ok || type_matches(one.get<std::string>(), v);
    if (!ok) return fail(ctx, path, v.dump() + " is not of type " + t.dump());
  }
  if (s.contains("const") && v != s["const"]) return fail(ctx, path, v.dump() + " != const " + s["const"].dump());
  if (s.contains("enum")) {
    bool found = false;
    // nlohmann compares 1 and 1.0 as equal, as JSON Schema does.
    for (const auto& e : s["enum"]) found = found || v == e;
    if (!found) return fail(ctx, path, v.dump() + " is not in enum " + s["enum"].dump());
  }
  if (v.is_number() && !validate_number(ctx, s, v, path)) return false;
  if (v.is_string() && !validate_string(ctx, s, v, path)) return false;
  if (v.is_array() && !validate_array(ctx, s, v, path, depth)) return false;
  if (v.is_object() && !validate_object(ctx, s, v, path, depth)) return false;
  return validate_combinators(ctx, s, v, path, depth);
}

}  // namespace schema_validator_detail

// True when `value` is valid against `schema` (whose $refs resolve against `schema` itself, the root). On failure,
// when `why` is not null, writes a short reason with a JSON-pointer path, e.g. "at /items/2: 7 > maximum 5".
inline bool validate_json(const nlohmann::json& schema, const nlohmann::json& value, std::string* why) {
  return schema_validator_detail::validate(schema_validator_detail::Context{schema, why}, schema, value, "", 0);
}

}  // namespace pagoda::test
