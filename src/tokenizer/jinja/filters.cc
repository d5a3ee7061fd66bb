// Jinja filters (`x|name(args)`) and tests (`x is name(args)`) that chat
// templates use. `tojson` follows transformers, which overrides jinja2's own:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/py_string.h"

namespace pagoda::jinja {
namespace {

bool flag(const Value* v, bool dflt) { return v ? v->truthy() : dflt; }

// Dotted attribute path ("a.b.0") as jinja's make_attrgetter resolves it.
Value get_path(Interpreter& in, const Value& v, const std::string& path) {
  Value cur = v;
  for (const auto& part : py_split(path, std::string("."), -1, false)) {
    const bool digits = !part.empty() && part.size() < 18 && part.find_first_not_of("0123456789") == std::string::npos;
    cur = in.get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.as_string())) : v;
}

CallArgs shift_args(const CallArgs& a, size_t n) {
  CallArgs out;
  for (size_t i = n; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.keyword = a.keyword;
  return out;
}

std::optional<int64_t> parse_int(std::string s) {
  s = py_strip(s, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  size_t pos = 0;
  try {
    const long long v = std::stoll(s, &pos, 10);
    if (pos == s.size()) return v;
  } catch (...) {
  }
  return std::nullopt;
}

std::optional<double> parse_float(std::string s) {
  s = py_strip(s, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  size_t pos = 0;
  try {
    const double v = std::stod(s, &pos);
    if (pos == s.size()) return v;
  } catch (...) {
  }
  return std::nullopt;
}

Value select_filter(Interpreter& in, const Value& seq, const CallArgs& a, bool by_attr, bool keep) {
  std::vector<Value> out;
  const size_t skip = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string()) fail("selectattr/rejectattr need an attribute name");
    attr = a.positional[0].as_string();
  }
  const bool has_test = a.positional.size() > skip;
  std::string test;
  if (has_test) {
    if (!a.positional[skip].is_string()) fail("the test name must be a string");
    test = a.positional[skip].as_string();
  }
  const CallArgs test_args = shift_args(a, skip + 1);
  for (const auto& item : in.iterate(seq)) {
    in.count_steps();
    const Value v = by_attr ? get_path(in, item, attr) : item;
    const bool pass = has_test ? in.apply_test(test, v, test_args) : v.truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_filter(Interpreter& in, const Value& seq, const CallArgs& a) {
  std::vector<Value> out;
  const Value* attr = a.get(SIZE_MAX, "attribute");
  for (const auto& item : in.iterate(seq)) {
    in.count_steps();
    if (attr) {
      Value v = get_path(in, item, attr->str());
      const Value* dflt = a.get(SIZE_MAX, "default");
      out.push_back(v.is_undefined() && dflt ? *dflt : v);
    } else {
      if (a.positional.empty() || !a.positional[0].is_string()) fail("map() needs a filter name or attribute=");
      out.push_back(in.apply_filter(a.positional[0].as_string(), item, shift_args(a, 1)));
    }
  }
  return Value::list(std::move(out));
}

Value sort_filter(Interpreter& in, const Value& seq, const CallArgs& a) {
  std::vector<Value> items = in.iterate(seq);
  const bool reverse = flag(a.get(0, "reverse"), false);
  const bool cs = flag(a.get(1, "case_sensitive"), false);
  const Value* attr = a.get(2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(sort_key(attr ? get_path(in, v, attr->str()) : v, cs), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? value_less(y.first, x.first) : value_less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value indent_filter(const std::string& s, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  const std::string ind = w && w->is_string()
                              ? w->as_string()
                              : std::string(static_cast<size_t>(std::clamp<int64_t>(w ? w->to_int() : 4, 0, 256)), ' ');
  const std::vector<std::string> lines = py_splitlines(s + "\n");
  std::string out;
  if (flag(a.get(2, "blank"), false)) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + ind : "") + lines[i];
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + (lines[i].empty() ? "" : ind);
      out += lines[i];
    }
  }
  return Value(flag(a.get(1, "first"), false) ? ind + out : out);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Value Interpreter::apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value(static_cast<int64_t>(code_point_count(v.as_string())));
    if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().items.size()));
    if (v.is_dict() && !v.is_namespace()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
    if (v.is_undefined()) return Value(0);
    fail(std::string("object of type '") + v.type_name() + "' has no len()");
  }
  if (name == "default" || name == "d") {
    if (v.is_undefined() || (flag(a.get(1, "boolean"), false) && !v.truthy())) {
      const Value* d = a.get(0, "default_value");
      return d ? *d : Value("");
    }
    return v;
  }
  if (name == "tojson") {
    JsonOptions o;
    o.ensure_ascii = flag(a.get(0, "ensure_ascii"), false);
    const Value* indent = a.get(1, "indent");
    if (indent && indent->is_string()) {
      o.indent_str = indent->as_string();
      o.item_separator = ",";
    } else if (indent && !indent->is_none()) {
      o.indent = static_cast<int>(std::clamp<int64_t>(indent->to_int(), 0, 64));
      o.item_separator = ",";
    }
    const Value* seps = a.get(2, "separators");
    if (seps && seps->is_list() && seps->as_list().items.size() == 2) {
      o.item_separator = seps->as_list().items[0].str();
      o.key_separator = seps->as_list().items[1].str();
    }
    o.sort_keys = flag(a.get(3, "sort_keys"), false);
    std::string s = to_json(v, o);
    check_size(s.size());
    return Value(std::move(s));
  }
  if (name == "trim")
    return Value(py_strip(v.str(),
                          a.get(0, "chars") && a.get(0, "chars")->is_string()
                              ? std::optional<std::string>(a.get(0, "chars")->as_string())
                              : std::nullopt,
                          true, true));
  if (name == "string") return Value(v.str());
  if (name == "upper") return Value(py_upper(v.str()));
  if (name == "lower") return Value(py_lower(v.str()));
  if (name == "title") return Value(py_title(v.str()));
  if (name == "capitalize") return Value(py_capitalize(v.str()));
  if (name == "safe") return v;
  if (name == "e" || name == "escape") return Value(html_escape(v.str()));
  if (name == "list") return Value::list(iterate(v));
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value* attr = a.get(1, "attribute");
    const Value* sep = a.get(0, "d");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first && sep) out += sep->str();
      first = false;
      out += (attr ? get_path(*this, item, attr->str()) : item).str();
      check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict() || v.is_namespace()) fail("can only get item pairs from a mapping");
    std::vector<Value> out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({Value(k), x}, true));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort expects a mapping");
    const bool cs = flag(a.get(0, "case_sensitive"), false);
    const bool by_value = a.get(1, "by") && a.get(1, "by")->str() == "value";
    const bool reverse = flag(a.get(2, "reverse"), false);
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.as_dict().items) pairs.push_back(Value::list({Value(k), x}, true));
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& p, const Value& q) {
      const Value& x = p.as_list().items[by_value ? 1 : 0];
      const Value& y = q.as_list().items[by_value ? 1 : 0];
      return reverse ? value_less(sort_key(y, cs), sort_key(x, cs)) : value_less(sort_key(x, cs), sort_key(y, cs));
    });
    return Value::list(std::move(pairs));
  }
  if (name == "int") {
    if (v.is_int()) return v;
    if (v.is_bool()) return Value(v.to_int());
    if (v.is_float() && std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18) {
      return Value(static_cast<int64_t>(v.as_float()));
    }
    if (v.is_string()) {
      if (auto i = parse_int(v.as_string())) return Value(*i);
      if (auto f = parse_float(v.as_string()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18) {
        return Value(static_cast<int64_t>(*f));
      }
    }
    const Value* d = a.get(0, "default");
    return d ? *d : Value(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.to_float());
    if (v.is_string()) {
      if (auto f = parse_float(v.as_string())) return Value(*f);
    }
    const Value* d = a.get(0, "default");
    return d ? *d : Value(0.0);
  }
  if (name == "abs") {
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    if (v.is_number()) return Value(v.to_int() < 0 ? -v.to_int() : v.to_int());
    fail(std::string("bad operand type for abs(): '") + v.type_name() + "'");
  }
  if (name == "round") {
    if (!v.is_number()) fail("round() needs a number");
    const int64_t p = std::clamp<int64_t>(a.get(0, "precision") ? a.get(0, "precision")->to_int() : 0, 0, 15);
    const std::string method = a.get(1, "method") ? a.get(1, "method")->str() : "common";
    const double scale = std::pow(10.0, static_cast<double>(p)), x = v.to_float() * scale;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value(r / scale);
  }
  if (name == "replace") {
    std::string r = py_replace(v.str(), a.get(0, "old") ? a.get(0, "old")->str() : "",
                               a.get(1, "new") ? a.get(1, "new")->str() : "",
                               a.get(2, "count") && !a.get(2, "count")->is_none() ? a.get(2, "count")->to_int() : -1);
    check_size(r.size());
    return Value(std::move(r));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = code_points(v.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "unique" || name == "min" || name == "max") {
    const bool cs = flag(a.get(0, "case_sensitive"), false);
    const Value* attr = a.get(1, "attribute");
    std::vector<Value> out;
    std::vector<Value> keys;
    for (const auto& item : iterate(v)) {
      count_steps();
      const Value key = sort_key(attr ? get_path(*this, item, attr->str()) : item, cs);
      if (name == "unique") {
        bool seen = false;
        for (const auto& k : keys) seen = seen || values_equal(k, key);
        if (!seen) keys.push_back(key), out.push_back(item);
      } else if (out.empty() || (name == "min" ? value_less(key, keys[0]) : value_less(keys[0], key))) {
        keys.assign(1, key);
        out.assign(1, item);
      }
    }
    if (name == "unique") return Value::list(std::move(out));
    return out.empty() ? Value::undefined("no " + name + " item, sequence was empty") : out[0];
  }
  if (name == "sum") {
    const Value* attr = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value acc = start ? *start : Value(0);
    for (const auto& item : iterate(v)) acc = eval_binary("+", acc, attr ? get_path(*this, item, attr->str()) : item);
    return acc;
  }
  if (name == "map") return map_filter(*this, v, a);
  if (name == "select" || name == "reject") return select_filter(*this, v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select_filter(*this, v, a, true, name == "selectattr");
  if (name == "sort") return sort_filter(*this, v, a);
  if (name == "indent") return indent_filter(v.str(), a);
  if (name == "attr") return get_attr(v, a.get(0, "name") ? a.get(0, "name")->str() : "");
  fail("no filter named '" + name + "'");
}

bool Interpreter::apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  const Value* arg = a.get(0, "other");
  auto need_arg = [&]() -> const Value& {
    if (!arg) fail("test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && py_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && py_upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) v.require_defined(), fail("test '" + name + "' needs an integer");
    if (name != "divisibleby") return (v.to_int() % 2 != 0) == (name == "odd");
    const Value& d = need_arg();
    if (!d.is_int() || d.as_int() == 0) fail("divisibleby needs a non-zero integer");
    return v.to_int() % d.as_int() == 0;
  }
  if (name == "sameas") return values_equal(v, need_arg()) && v.kind() == need_arg().kind();
  if (name == "in") return value_contains(need_arg(), v);
  static const std::pair<const char*, const char*> kCompare[] = {
      {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
      {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
  for (const auto& [test, op] : kCompare) {
    if (name == test) return eval_compare(op, v, need_arg());
  }
  fail("no test named '" + name + "'");
}

}  // namespace pagoda::jinja
