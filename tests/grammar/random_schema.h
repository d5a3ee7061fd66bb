// Random JSON Schemas for the grammar stress test, in which a tiny model samples under the schema's grammar with a
// short budget. Every schema forces short output: max_instance_chars() (the longest valid instance, with up to
// kMaxWsPerGap whitespace characters between tokens) stays <= kMaxInstanceChars. Strings carry maxLength <= 8 (or a
// pattern of bounded length, or a fixed-size format), arrays maxItems <= 3, numbers both minimum and maximum within
// [-1000, 1000], objects additionalProperties false, and containers nest at most 3 deep. Every schema is satisfiable.
// Only rng() is drawn (never a std:: distribution), so a logged seed gives the same schema with any standard library.
#pragma once

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace pagoda::test {

inline constexpr size_t kMaxInstanceChars = 350;
inline constexpr size_t kMaxWsPerGap = 2;
// A "number" bounded by minimum/maximum still has an unbounded fraction in JSON Schema; the bound assumes the grammar
// allows at most "." + 16 digits and no exponent (llama.cpp's limit), and a "time" fraction of at most 9 digits.
inline constexpr size_t kMaxFractionChars = 17;
inline constexpr size_t kMaxTimeFractionChars = 10;
inline constexpr size_t kUnbounded = 1000000;

namespace random_schema_detail {

using nlohmann::json;

inline size_t sat_add(size_t a, size_t b) { return std::min(kUnbounded, a + b); }
inline size_t sat_mul(size_t a, size_t b) { return a == 0 || b == 0 ? 0 : std::min(kUnbounded, a * b); }

// Longest match of a pattern in the bounded subset the generator writes (literals, escapes, classes, groups with |,
// ?, {m}, {m,n}); + * and {m,} give kUnbounded. Patterns are anchored, so this bounds the whole string.
class PatternLength {
 public:
  explicit PatternLength(const std::string& p) : p_(p) {}
  size_t max_length() { return alternation(); }

 private:
  size_t alternation() {
    size_t best = sequence();
    while (i_ < p_.size() && p_[i_] == '|') ++i_, best = std::max(best, sequence());
    return best;
  }
  size_t sequence() {
    size_t total = 0;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') total = sat_add(total, quantified(atom()));
    return total;
  }
  size_t atom() {
    const char c = p_[i_++];
    if (c == '^' || c == '$') return 0;
    if (c == '\\') return ++i_, 1;
    if (c == '[') {
      while (i_ < p_.size() && p_[i_] != ']') i_ += p_[i_] == '\\' ? 2 : 1;
      return ++i_, 1;
    }
    if (c != '(') return 1;
    if (p_.compare(i_, 2, "?:") == 0) i_ += 2;
    const size_t inner = alternation();
    return ++i_, inner;  // skips ')'
  }
  size_t quantified(size_t len) {
    if (i_ >= p_.size()) return len;
    const char c = p_[i_];
    if (c == '*' || c == '+') return ++i_, kUnbounded;
    if (c == '?') return ++i_, len;
    if (c != '{') return len;
    const size_t close = p_.find('}', i_);
    const std::string body = p_.substr(i_ + 1, close - i_ - 1);
    i_ = close + 1;
    const size_t comma = body.find(',');
    if (comma == std::string::npos) return sat_mul(len, std::stoul(body));
    if (comma + 1 == body.size()) return kUnbounded;
    return sat_mul(len, std::stoul(body.substr(comma + 1)));
  }
  const std::string& p_;
  size_t i_ = 0;
};

inline size_t digits(double x) { return std::to_string(static_cast<long long>(x)).size(); }

inline size_t string_bound(const json& s) {
  size_t len = kUnbounded;
  if (s.contains("maxLength")) len = s["maxLength"].get<size_t>();
  if (s.contains("pattern")) len = std::min(len, PatternLength(s["pattern"].get<std::string>()).max_length());
  if (s.contains("format")) {
    const std::string f = s["format"].get<std::string>();
    const size_t time = 8 + kMaxTimeFractionChars + 6;  // HH:MM:SS .fraction +HH:MM
    if (f == "date") len = 10;
    if (f == "time") len = time;
    if (f == "date-time") len = 11 + time;
    if (f == "uuid") len = 36;
  }
  return sat_add(len, 2);
}

inline size_t number_bound(const json& s, bool integer) {
  if (!s.contains("minimum") || !s.contains("maximum")) return kUnbounded;
  const size_t whole =
      std::max(digits(std::ceil(s["minimum"].get<double>())), digits(std::floor(s["maximum"].get<double>())));
  return integer ? whole : whole + 1 + kMaxFractionChars;  // + 1 for the sign of "-0.5" when minimum is -1 or 0
}

inline size_t bound(const json& root, const json& s, int depth);

inline size_t object_bound(const json& root, const json& s, int depth) {
  const json& extra = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
  if (!(extra.is_boolean() && !extra.get<bool>())) return kUnbounded;
  size_t total = 2, num = 0;
  if (s.contains("properties"))
    for (const auto& [key, child] : s["properties"].items())
      total = sat_add(total, key.size() + 2 + 1 + bound(root, child, depth + 1) + (num++ ? 1 : 0));
  return sat_add(total, kMaxWsPerGap * std::max<size_t>(1, 4 * num));  // 4 gaps a property: { k : v , ... }
}

inline size_t array_bound(const json& root, const json& s, int depth) {
  if (!s.contains("maxItems")) return kUnbounded;
  const size_t max_items = s["maxItems"].get<size_t>();
  const size_t num_prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
  const json& items = s.contains("items") ? s["items"] : json(true);
  size_t total = 2;
  for (size_t i = 0; i < max_items; ++i) {
    if (i >= num_prefix && items.is_boolean() && !items.get<bool>()) break;
    total = sat_add(total, bound(root, i < num_prefix ? s["prefixItems"][i] : items, depth + 1) + (i ? 1 : 0));
  }
  return sat_add(total, kMaxWsPerGap * std::max<size_t>(1, 2 * max_items));  // [ v , v ]
}

inline size_t bound_for_type(const json& root, const json& s, const std::string& type, int depth) {
  if (type == "string") return string_bound(s);
  if (type == "integer" || type == "number") return number_bound(s, type == "integer");
  if (type == "boolean") return 5;
  if (type == "null") return 4;
  if (type == "object") return object_bound(root, s, depth);
  if (type == "array") return array_bound(root, s, depth);
  return kUnbounded;
}

inline size_t bound(const json& root, const json& s, int depth) {
  if (depth > 20 || s.is_boolean()) return s == json(false) ? 0 : kUnbounded;
  if (s.contains("$ref"))
    return bound(root, root.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), depth + 1);
  if (s.contains("const")) return s["const"].dump().size();
  if (s.contains("enum")) {
    size_t best = 0;
    for (const auto& e : s["enum"]) best = std::max(best, e.dump().size());
    return best;
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key)) {
      size_t best = 0;
      for (const auto& branch : s[key]) best = std::max(best, bound(root, branch, depth + 1));
      return best;
    }
  if (!s.contains("type")) return kUnbounded;
  if (s["type"].is_string()) return bound_for_type(root, s, s["type"].get<std::string>(), depth);
  size_t best = 0;
  for (const auto& t : s["type"]) best = std::max(best, bound_for_type(root, s, t.get<std::string>(), depth));
  return best;
}

// Draws one schema. `depth` counts the enclosing objects and arrays; a container is drawn only below kMaxDepth.
class Generator {
 public:
  explicit Generator(std::mt19937& rng) : rng_(rng) {}

  json root() {
    if (chance(30)) make_defs();
    const size_t r = below(100);
    json s = r < 70 ? object(0) : r < 85 ? array(0) : scalar();
    if (!defs_.empty()) s[defs_key_] = defs_;
    return s;
  }

 private:
  static constexpr int kMaxDepth = 3;

  size_t below(size_t n) { return rng_() % n; }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  int between(int lo, int hi) { return lo + static_cast<int>(below(static_cast<size_t>(hi - lo + 1))); }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  // Scalars or flat objects, so that a $ref never adds more than one level of nesting and never recurses.
  void make_defs() {
    defs_key_ = chance(75) ? "$defs" : "definitions";
    const int n = between(1, 2);
    for (int i = 0; i < n; ++i)
      defs_[std::string("d").append(std::to_string(i))] = chance(40) ? object(kMaxDepth - 1) : scalar();
  }

  json any(int depth) {
    if (!defs_.empty() && chance(15)) {
      const std::string name = "d" + std::to_string(below(defs_.size()));
      if (!defs_[name].contains("properties") || depth < kMaxDepth) return {{"$ref", "#/" + defs_key_ + "/" + name}};
    }
    const int container_percent = depth == 0 ? 60 : depth == 1 ? 30 : depth == 2 ? 15 : 0;
    if (chance(container_percent)) return chance(55) ? object(depth) : array(depth);
    if (chance(10)) {
      json branches = json::array();
      for (int i = between(2, 3); i > 0; --i)
        branches.push_back(chance(20) && depth < kMaxDepth ? any(depth) : scalar());
      return {{"anyOf", branches}};
    }
    return scalar();
  }

  json object(int depth) {
    static const std::vector<std::string> kNames = {"a",    "b",    "id", "name",  "name2", "x",    "y1",  "ok",
                                                    "tags", "kind", "v",  "count", "item",  "flag", "z_z", "c-d"};
    json props = json::object(), required = json::array();
    const int n = between(1, 4);
    while (static_cast<int>(props.size()) < n) {
      const std::string name = pick(kNames);
      if (props.contains(name)) continue;
      props[name] = any(depth + 1);
      if (chance(50)) required.push_back(name);
    }
    json s = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
    if (!required.empty()) s["required"] = required;
    return s;
  }

  json array(int depth) {
    json s = {{"type", "array"}};
    int max_items = below(8) == 0 ? 0 : between(1, 3);  // [] only, now and then
    if (chance(20)) {  // a tuple: prefixItems, then either nothing more or more of `items`
      json prefix = json::array();
      for (int i = between(1, 2); i > 0; --i) prefix.push_back(any(depth + 1));
      s["prefixItems"] = prefix;
      if (chance(50)) {
        s["items"] = false;
        max_items = std::min(max_items, static_cast<int>(prefix.size()));
      } else {
        s["items"] = any(depth + 1);
      }
    } else {
      s["items"] = any(depth + 1);
    }
    s["maxItems"] = max_items;
    if (chance(40)) s["minItems"] = between(0, max_items);
    return s;
  }

  json scalar() {
    switch (below(12)) {
      case 0:
      case 1: return string_schema("string");
      case 2: return pattern_schema();
      case 3: return {{"type", "string"}, {"format", pick<std::string>({"date", "time", "date-time", "uuid"})}};
      case 4:
      case 5: return number_schema("integer");
      case 6: return number_schema("number");
      case 7: return {{"type", pick<std::string>({"boolean", "null", "boolean"})}};
      case 8: return enum_schema();
      case 9: return {{"const", pick(const_values())}};
      case 10: return nullable();
      default: return chance(50) ? string_schema("string") : number_schema("integer");
    }
  }

  json string_schema(json type) {
    json s = {{"type", type}, {"maxLength", between(0, 8)}};
    if (chance(40)) s["minLength"] = between(0, s["maxLength"].get<int>());
    return s;
  }

  json number_schema(json type) {
    static const std::vector<std::pair<int, int>> kRanges = {
        {0, 9}, {0, 100}, {-50, 200}, {1, 12}, {-1000, 1000}, {-5, 5}, {0, 1}, {7, 7}, {-1000, -990}, {100, 999}};
    std::pair<int, int> r = pick(kRanges);
    if (chance(30)) {
      r.first = between(-1000, 1000);
      r.second = between(r.first, 1000);
    }
    return {{"type", type}, {"minimum", r.first}, {"maximum", r.second}};
  }

  json nullable() {
    switch (below(4)) {
      case 0: return string_schema(json::array({"string", "null"}));
      case 1: return number_schema(json::array({"integer", "null"}));
      case 2: return {{"type", json::array({"boolean", "null"})}};
      default: {  // both constraint sets apply, each to its own type
        json s = number_schema(json::array({"string", "integer"}));
        s["maxLength"] = between(0, 8);
        return s;
      }
    }
  }

  static const std::vector<json>& const_values() {
    static const std::vector<json> kValues = {"fixed", "",    0,       42,    -7,     2.5,
                                              true,    false, nullptr, "a b", "q\"t", json::array({1, "x"})};
    return kValues;
  }

  json enum_schema() {
    static const std::vector<std::vector<json>> kEnums = {{"red", "green", "blue"},
                                                          {"a", "b"},
                                                          {"yes", "no", nullptr},
                                                          {1, 2, 3},
                                                          {0, -1, 2.5},
                                                          {"x", 1, nullptr},
                                                          {"", "x y"},
                                                          {true, "true"},
                                                          {"up", "down", "left", "right"},
                                                          {"b\\s", "q\"t", "nl\n"},
                                                          {nullptr}};
    return {{"enum", pick(kEnums)}};
  }

  // Anchored, bounded patterns over ASCII letters, digits and - _ . only, so no JSON escaping is ever needed.
  json pattern_schema() {
    static const std::vector<std::string> kAtoms = {"[a-z]",  "[A-Z]",    "[0-9]", "[a-f0-9]", "\\d",
                                                    "[xyz_]", "[A-Z0-9]", "a",     "Q",        "7",
                                                    "-",      "_",        "\\.",   "(ab|cd)",  "(x|yz|0)"};
    std::string p = "^";
    for (int i = between(1, 4); i > 0; --i) {
      p += pick(kAtoms);
      const size_t q = below(5);
      const int lo = between(0, 3), hi = between(std::max(lo, 1), 4);
      if (q == 1) p += "?";
      if (q == 2) p += "{" + std::to_string(hi) + "}";
      if (q == 3) p += "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    }
    return {{"type", "string"}, {"pattern", p + "$"}};
  }

  std::mt19937& rng_;
  json defs_ = json::object();
  std::string defs_key_;
};

}  // namespace random_schema_detail

// Characters in the longest instance `schema` allows, including kMaxWsPerGap whitespace characters between any two
// tokens and around the value; string characters count one each (a \uXXXX escape would be 6). kUnbounded when some
// string, array, number or object in it is unbounded. Understands the schemas random_schema() writes, not all schemas.
inline size_t max_instance_chars(const nlohmann::json& schema) {
  return random_schema_detail::sat_add(random_schema_detail::bound(schema, schema, 0), 2 * kMaxWsPerGap);
}

// A random satisfiable schema whose longest instance is at most kMaxInstanceChars characters (see the file comment).
// Oversized draws are thrown away and drawn again, so the result depends only on the state of `rng`.
inline nlohmann::json random_schema(std::mt19937& rng) {
  while (true) {
    nlohmann::json s = random_schema_detail::Generator(rng).root();
    if (max_instance_chars(s) <= kMaxInstanceChars) return s;
  }
}

}  // namespace pagoda::test
