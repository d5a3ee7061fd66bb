#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "grammar/grammar.h"
#include "grammar/regex_to_gbnf.h"

namespace pagoda::grammar {
namespace {

// Schemas keep their key order: properties are generated in the order the
// schema lists them.
using json = nlohmann::ordered_json;

// The rules every JSON grammar may use. Whitespace is at most one space
// between tokens (compact JSON: free whitespace lets a model pad forever, a
// known failure of unconstrained JSON grammars), and digits are bounded, so a
// value always ends.
const std::map<std::string, std::string>& primitive_rules() {
  static const std::map<std::string, std::string> kRules = {
      {"space", R"(" "?)"},
      {"value", "object | array | string | number | boolean | null"},
      {"object", R"("{" space ( string ":" space value ( "," space string ":" space value )* )? "}" space)"},
      {"array", R"("[" space ( value ( "," space value )* )? "]" space)"},
      {"string", R"("\"" char* "\"" space)"},
      // No lone surrogate escapes: JSON parsers reject them.
      {"char",
       R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))"},
      {"number", R"("-"? integral-part ( "." decimal-part )? ( [eE] [-+]? [0-9]{1,2} )? space)"},
      {"integer", R"("-"? integral-part space)"},
      {"integral-part", R"("0" | [1-9] [0-9]{0,15})"},
      {"decimal-part", "[0-9]{1,16}"},
      {"boolean", R"(( "true" | "false" ) space)"},
      {"null", R"("null" space)"},
      {"date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"},
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
      {"date-time", R"(date "T" time)"},
      {"uuid", R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})"},
  };
  return kRules;
}

const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> kDeps = {
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"space", "string", "value"}},
      {"array", {"space", "value"}},
      {"string", {"char", "space"}},
      {"number", {"integral-part", "decimal-part", "space"}},
      {"integer", {"integral-part", "space"}},
      {"boolean", {"space"}},
      {"null", {"space"}},
      {"date-time", {"date", "time"}},
  };
  return kDeps;
}

// Digits of a non-negative value, up to 16 (the number rules' limit).
constexpr int64_t kMaxMagnitude = 9999999999999999;  // 16 digits

std::string digits_range(const std::string& lo, const std::string& hi) {
  // lo and hi have the same length and lo <= hi.
  if (lo.empty()) return "";
  if (lo.size() == 1) return lo == hi ? gbnf_literal(lo) : "[" + lo + "-" + hi + "]";
  if (lo[0] == hi[0]) return gbnf_literal(lo.substr(0, 1)) + " " + digits_range(lo.substr(1), hi.substr(1));
  const size_t rest = lo.size() - 1;
  const bool lo_rest_min = lo.substr(1) == std::string(rest, '0');
  const bool hi_rest_max = hi.substr(1) == std::string(rest, '9');
  std::vector<std::string> alts;
  char first_full = lo[0], last_full = hi[0];
  if (!lo_rest_min) {
    alts.push_back(gbnf_literal(lo.substr(0, 1)) + " (" + digits_range(lo.substr(1), std::string(rest, '9')) + ")");
    ++first_full;
  }
  if (!hi_rest_max) --last_full;
  if (first_full <= last_full) {
    const std::string head = first_full == last_full ? gbnf_literal(std::string(1, first_full))
                                                     : "[" + std::string(1, first_full) + "-" + last_full + "]";
    alts.push_back(head + " [0-9]{" + std::to_string(rest) + "}");
  }
  if (!hi_rest_max)
    alts.push_back(gbnf_literal(hi.substr(0, 1)) + " (" + digits_range(std::string(rest, '0'), hi.substr(1)) + ")");
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "(" + out + ")";
}

// Non-negative integers in [a, b] without leading zeros.
std::string nonneg_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  for (size_t d = sa.size(); d <= sb.size(); ++d) {
    std::string lo = sa;
    if (d != sa.size()) lo = std::string(1, '1').append(d - 1, '0');
    const std::string hi = d == sb.size() ? sb : std::string(d, '9');
    alts.push_back(digits_range(lo, hi));
  }
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "(" + out + ")";
}

// Integers in [lo, hi] (either side open), as a GBNF expression.
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t l = lo.value_or(-kMaxMagnitude), h = hi.value_or(kMaxMagnitude);
  std::vector<std::string> alts;
  if (l < 0) alts.push_back("\"-\" " + nonneg_range(h < 0 ? -h : 1, -l));
  if (h >= 0) alts.push_back(nonneg_range(std::max<int64_t>(l, 0), h));
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "(" + out + ")";
}

bool is_count(const nlohmann::ordered_json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; }

std::string sanitize(const std::string& s) {
  std::string out;
  for (const char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  return out.empty() ? "x" : out;
}

class SchemaConverter {
 public:
  SchemaConverter(const json& root, std::string root_name) : root_(root), root_name_(std::move(root_name)) {}

  Result<std::string> run() {
    auto body = visit(root_, "#", root_name_);
    if (!body) return body.status();
    rules_[root_name_] = *body;
    std::string out;
    // The schema's rule first, then the rest in name order.
    out += root_name_ + " ::= " + rules_[root_name_] + "\n";
    for (const auto& [name, text] : rules_) {
      if (name != root_name_) out += name + " ::= " + text + "\n";
    }
    return out;
  }

 private:
  Status error(const std::string& path, const std::string& what) {
    return invalid_argument("json_schema: at " + path + ": " + what);
  }

  std::string use(const std::string& primitive) {
    if (rules_.count(primitive)) return primitive;
    rules_[primitive] = primitive_rules().at(primitive);
    const auto deps = primitive_deps().find(primitive);
    if (deps != primitive_deps().end()) {
      for (const std::string& d : deps->second) use(d);
    }
    return primitive;
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name = sanitize(hint);
    for (int i = 2; rules_.count(name) || primitive_rules().count(name); ++i)
      name = sanitize(hint) + "-" + std::to_string(i);
    rules_[name] = body;
    return name;
  }

  static std::string alternatives(const std::vector<std::string>& alts) {
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
  }

  Result<std::string> visit(const json& s, const std::string& path, const std::string& name) {
    if (++depth_ > 64) return error(path, "the schema nests too deeply");
    auto r = visit_inner(s, path, name);
    --depth_;
    return r;
  }

  Result<std::string> visit_inner(const json& s, const std::string& path, const std::string& name) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return error(path, "the schema `false` accepts no value");
      return use("value");
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    if (s.contains("$ref")) return ref(s["$ref"], path);
    if (s.contains("const")) return gbnf_literal(s["const"].dump()) + " " + use("space");
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return error(path + "/enum", "must be a non-empty array");
      std::vector<std::string> alts;
      for (const json& v : e) alts.push_back(gbnf_literal(v.dump()));
      return alternatives(alts) + " " + use("space");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) return error(path + "/" + key, "must be a non-empty array");
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        auto a = visit(list[i], path + "/" + key + "/" + std::to_string(i), name + "-" + std::to_string(i));
        if (!a) return a.status();
        alts.push_back(*a);
      }
      return alternatives(alts);
    }
    if (s.contains("allOf")) return all_of(s, path, name);
    if (s.contains("type") && s["type"].is_array()) {
      const json& types = s["type"];
      if (types.empty()) return error(path + "/type", "must not be empty");
      std::vector<std::string> alts;
      for (const json& t : types) {
        json one = s;
        one["type"] = t;
        auto a = visit(one, path, name + "-" + (t.is_string() ? t.get<std::string>() : "t"));
        if (!a) return a.status();
        alts.push_back(*a);
      }
      return alternatives(alts);
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) return error(path + "/type", "must be a string or an array of strings");
      type = s["type"].get<std::string>();
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      type = "array";
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      type = "string";
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      type = "number";
    } else {
      return use("value");
    }
    if (type == "object") return object(s, path, name);
    if (type == "array") return array(s, path, name);
    if (type == "string") return string(s, path);
    if (type == "integer" || type == "number") return number(s, path, type == "integer");
    if (type == "boolean") return use("boolean");
    if (type == "null") return use("null");
    return error(path + "/type", "unknown type \"" + type + "\"");
  }

  Result<std::string> ref(const json& r, const std::string& path) {
    if (!r.is_string()) return error(path + "/$ref", "must be a string");
    const std::string target = r.get<std::string>();
    const auto known = refs_.find(target);
    if (known != refs_.end()) return known->second;
    if (target.empty() || target[0] != '#')
      return error(path + "/$ref", "only local references (\"#/...\") are supported, not \"" + target + "\"");
    const json* node = nullptr;
    try {
      const json::json_pointer ptr(target.substr(1));
      if (root_.contains(ptr)) node = &root_.at(ptr);
    } catch (const json::exception&) {
    }
    if (!node) return error(path + "/$ref", "\"" + target + "\" does not resolve");
    const size_t slash = target.rfind('/');
    const std::string rule = new_rule("ref-" + target.substr(slash == std::string::npos ? 1 : slash + 1), "");
    refs_[target] = rule;  // before visiting: recursive references resolve to it
    auto body = visit(*node, target, rule);
    if (!body) return body.status();
    rules_[rule] = *body;
    return rule;
  }

  // allOf of object schemas: their properties and required lists merged.
  Result<std::string> all_of(const json& s, const std::string& path, const std::string& name) {
    const json& list = s["allOf"];
    if (!list.is_array() || list.empty()) return error(path + "/allOf", "must be a non-empty array");
    json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < list.size(); ++i) {
      const json* part = &list[i];
      for (int hops = 0; part->is_object() && part->contains("$ref") && hops < 16; ++hops) {
        const json& r = (*part)["$ref"];
        if (!r.is_string() || r.get<std::string>().empty() || r.get<std::string>()[0] != '#') break;
        try {
          const json::json_pointer ptr(r.get<std::string>().substr(1));
          if (!root_.contains(ptr)) break;
          part = &root_.at(ptr);
        } catch (const json::exception&) {
          break;
        }
      }
      const bool is_object = part->is_object() &&
                             (part->contains("properties") || (part->contains("type") && (*part)["type"] == "object"));
      if (!is_object) return error(path + "/allOf/" + std::to_string(i), "allOf is supported for object schemas only");
      if (part->contains("properties")) {
        for (const auto& [k, v] : (*part)["properties"].items()) merged["properties"][k] = v;
      }
      if (part->contains("required")) {
        for (const json& k : (*part)["required"]) merged["required"].push_back(k);
      }
    }
    merged["type"] = "object";
    return visit(merged, path, name);
  }

  Result<std::string> object(const json& s, const std::string& path, const std::string& name) {
    const std::string sp = use("space");
    json props = s.value("properties", json::object());
    if (!props.is_object()) return error(path + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return error(path + "/required", "must be an array of names");
      for (const json& k : s["required"]) {
        if (!k.is_string()) return error(path + "/required", "must be an array of names");
        required.insert(k.get<std::string>());
        if (!props.contains(k.get<std::string>())) props[k.get<std::string>()] = true;
      }
    }
    const json additional = s.value("additionalProperties", json(true));
    if (props.empty()) {
      if (additional.is_boolean() && !additional.get<bool>()) return "\"{\" " + sp + " \"}\" " + sp;
      auto v = visit(additional, path + "/additionalProperties", name + "-value");
      if (!v) return v.status();
      const std::string kv = new_rule(name + "-kv", use("string") + " \":\" " + sp + " " + *v);
      return "\"{\" " + sp + " ( " + kv + " ( \",\" " + sp + " " + kv + " )* )? \"}\" " + sp;
    }
    // Properties in their listed order; first[i] / after[i] are "properties
    // i.. when nothing / something was written before" (commas).
    std::vector<std::string> names, kvs;
    for (const auto& [k, v] : props.items()) {
      auto value = visit(v, path + "/properties/" + k, name + "-" + k);
      if (!value) return value.status();
      names.push_back(k);
      kvs.push_back(
          new_rule(name + "-" + k + "-kv", gbnf_literal(json(k).dump()) + " " + sp + " \":\" " + sp + " " + *value));
    }
    std::string first_next = "\"\"", after_next = "\"\"";
    for (size_t j = names.size(); j-- > 0;) {
      const bool req = required.count(names[j]) != 0;
      const std::string after_body = "\",\" " + sp + " " + kvs[j] + " " + after_next + (req ? "" : " | " + after_next);
      const std::string first_body = kvs[j] + " " + after_next + (req ? "" : " | " + first_next);
      after_next = new_rule(name + "-after-" + std::to_string(j), after_body);
      first_next = new_rule(name + "-from-" + std::to_string(j), first_body);
    }
    return "\"{\" " + sp + " " + first_next + " \"}\" " + sp;
  }

  Result<std::string> array(const json& s, const std::string& path, const std::string& name) {
    const std::string sp = use("space");
    int64_t min_items = 0, max_items = -1;
    if (s.contains("minItems")) {
      if (!is_count(s["minItems"])) return error(path + "/minItems", "must be a non-negative integer");
      min_items = s["minItems"].get<int64_t>();
    }
    if (s.contains("maxItems")) {
      if (!is_count(s["maxItems"])) return error(path + "/maxItems", "must be a non-negative integer");
      max_items = s["maxItems"].get<int64_t>();
    }
    if (min_items > 4096 || max_items > 4096) return error(path, "minItems/maxItems above 4096 are not supported");
    if (max_items >= 0 && max_items < min_items) return error(path, "maxItems is below minItems");
    const json items = s.value("items", json(true));
    const bool items_allowed = !(items.is_boolean() && !items.get<bool>());
    std::string item;
    if (items_allowed) {
      auto it = visit(items, path + "/items", name + "-item");
      if (!it) return it.status();
      item = *it;
    }
    if (s.contains("prefixItems")) {
      const json& prefix = s["prefixItems"];
      if (!prefix.is_array()) return error(path + "/prefixItems", "must be an array");
      // Exactly n items: the prefix, then `items` up to minItems.
      auto n = static_cast<int64_t>(prefix.size());
      n = std::max(n, min_items);
      if (max_items >= 0) n = std::min(n, max_items);
      if (!items_allowed && n > static_cast<int64_t>(prefix.size()))
        return error(path, "minItems needs more items than prefixItems allows");
      std::string body = "\"[\" " + sp;
      for (int64_t i = 0; i < n; ++i) {
        std::string el = item;
        if (i < static_cast<int64_t>(prefix.size())) {
          auto p = visit(prefix[static_cast<size_t>(i)], path + "/prefixItems/" + std::to_string(i),
                         name + "-" + std::to_string(i));
          if (!p) return p.status();
          el = *p;
        }
        body += (i ? " \",\" " + sp + " " : " ") + el;
      }
      return body + " \"]\" " + sp;
    }
    if (!items_allowed || max_items == 0) {
      if (min_items > 0) return error(path, "minItems needs items, but items is false");
      return "\"[\" " + sp + " \"]\" " + sp;
    }
    // The item is written twice below: as a rule, so nested arrays do not
    // double the grammar at every level.
    if (item.find(' ') != std::string::npos) item = new_rule(name + "-item", item);
    const std::string rest = "( \",\" " + sp + " " + item + " )";
    std::string count;
    if (max_items < 0) {
      count = min_items <= 1 ? "*" : "{" + std::to_string(min_items - 1) + ",}";
    } else {
      count = "{" + std::to_string(std::max<int64_t>(min_items - 1, 0)) + "," + std::to_string(max_items - 1) + "}";
    }
    const std::string list = item + " " + rest + count;
    if (min_items == 0) return "\"[\" " + sp + " ( " + list + " )? \"]\" " + sp;
    return "\"[\" " + sp + " " + list + " \"]\" " + sp;
  }

  Result<std::string> string(const json& s, const std::string& path) {
    const std::string sp = use("space");
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return error(path + "/pattern", "must be a string");
      if (has_len) return error(path, "pattern together with minLength/maxLength is not supported");
      auto re = regex_to_gbnf(s["pattern"].get<std::string>(), RegexText::kJsonString);
      if (!re) return error(path + "/pattern", re.status().message());
      return "\"\\\"\" " + *re + " \"\\\"\" " + sp;
    }
    if (s.contains("format") && s["format"].is_string() && !has_len) {
      const std::string f = s["format"].get<std::string>();
      if (f == "date" || f == "time" || f == "date-time" || f == "uuid")
        return "\"\\\"\" " + use(f) + " \"\\\"\" " + sp;
    }
    if (!has_len) return use("string");
    int64_t min_len = 0, max_len = -1;
    if (s.contains("minLength")) {
      if (!is_count(s["minLength"])) return error(path + "/minLength", "must be a non-negative integer");
      min_len = s["minLength"].get<int64_t>();
    }
    if (s.contains("maxLength")) {
      if (!is_count(s["maxLength"])) return error(path + "/maxLength", "must be a non-negative integer");
      max_len = s["maxLength"].get<int64_t>();
    }
    if (min_len > 4096 || max_len > 4096) return error(path, "minLength/maxLength above 4096 are not supported");
    if (max_len >= 0 && max_len < min_len) return error(path, "maxLength is below minLength");
    use("char");
    const std::string count =
        "{" + std::to_string(min_len) + "," + (max_len >= 0 ? std::to_string(max_len) : std::string()) + "}";
    return "\"\\\"\" char" + count + " \"\\\"\" " + sp;
  }

  // Bounds as integers: the smallest / largest whole value allowed.
  Result<std::string> number(const json& s, const std::string& path, bool integer) {
    const std::string sp = use("space");
    std::optional<double> lo, hi;
    bool lo_excl = false, hi_excl = false;
    auto get = [&](const char* key, std::optional<double>* out) -> Status {
      if (!s.contains(key)) return Status::ok();
      if (!s[key].is_number()) return error(path + "/" + key, "must be a number");
      *out = s[key].get<double>();
      return Status::ok();
    };
    PAGODA_RETURN_IF_ERROR(get("minimum", &lo));
    PAGODA_RETURN_IF_ERROR(get("maximum", &hi));
    std::optional<double> xlo, xhi;
    PAGODA_RETURN_IF_ERROR(get("exclusiveMinimum", &xlo));
    PAGODA_RETURN_IF_ERROR(get("exclusiveMaximum", &xhi));
    if (xlo && (!lo || *xlo >= *lo)) {
      lo = xlo;
      lo_excl = true;
    }
    if (xhi && (!hi || *xhi <= *hi)) {
      hi = xhi;
      hi_excl = true;
    }
    if (!lo && !hi) return use(integer ? "integer" : "number");
    const double limit = static_cast<double>(kMaxMagnitude);
    std::optional<int64_t> ilo, ihi;
    // Bounds beyond 16 digits are refused (or, on the open side, dropped)
    // before any conversion to int64, which they could overflow.
    if (lo && *lo > limit) return error(path, "the minimum is beyond 16 digits");
    if (hi && *hi < -limit) return error(path, "the maximum is beyond 16 digits");
    if (lo && *lo > -limit) ilo = static_cast<int64_t>(lo_excl ? std::floor(*lo) + 1 : std::ceil(*lo));
    if (hi && *hi < limit) ihi = static_cast<int64_t>(hi_excl ? std::ceil(*hi) - 1 : std::floor(*hi));
    if (ilo && *ilo > kMaxMagnitude) return error(path, "the minimum is beyond 16 digits");
    if (ihi && *ihi < -kMaxMagnitude) return error(path, "the maximum is beyond 16 digits");
    if (ilo && ihi && *ilo > *ihi) return error(path, "no whole number lies within these bounds");
    std::string expr = int_range(ilo, ihi);
    if (!integer) {
      // k.ddd lies in [k, k + 1): allowed for non-negative k >= the minimum
      // with k + 1 <= the maximum.
      const int64_t flo = std::max<int64_t>(ilo.value_or(0), 0);
      std::optional<int64_t> fhi;
      if (hi && *hi < limit) fhi = static_cast<int64_t>(std::floor(*hi)) - 1;
      if (!fhi || *fhi >= flo) {
        expr = "( " + expr + " | " + int_range(flo, fhi.value_or(kMaxMagnitude)) + " \".\" [0-9]{1,15} )";
      }
    }
    return expr + " " + sp;
  }

  const json& root_;
  std::string root_name_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const json& schema, const std::string& root) {
  return SchemaConverter(schema, root).run();
}

std::string json_object_gbnf() {
  std::string out = "root ::= object\n";
  for (const char* r : {"space", "value", "object", "array", "string", "char", "number", "integral-part",
                        "decimal-part", "boolean", "null"}) {
    out += std::string(r) + " ::= " + primitive_rules().at(r) + "\n";
  }
  return out;
}

Result<std::string> choice_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("guided_choice: must list at least one choice");
  std::string out = "root ::=";
  for (size_t i = 0; i < choices.size(); ++i) out += (i ? " | " : " ") + gbnf_literal(choices[i]);
  return out + "\n";
}

Result<std::string> regex_gbnf(std::string_view regex) {
  auto re = regex_to_gbnf(regex, RegexText::kRaw);
  if (!re) return re.status();
  return "root ::= " + *re + "\n";
}

}  // namespace pagoda::grammar
