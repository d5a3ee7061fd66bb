#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/jinja/py_string.h"

namespace pagoda::jinja {

void fail(const std::string& message) { throw Error(message); }

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::move(l));
}

Value Value::function(std::string name, Function fn) {
  return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(fn)}));
}

Value make_dict() { return Value(std::make_shared<Dict>()); }

bool Value::is_namespace() const { return is_dict() && as_dict().is_namespace; }
bool Value::is_tuple() const { return is_list() && as_list().is_tuple; }

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().items.empty();
    case Kind::kDict: return is_namespace() || !as_dict().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_tuple() ? "tuple" : "list";
    case Kind::kDict: return is_namespace() ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

void Value::require_defined() const {
  if (is_undefined()) fail(undefined_hint().empty() ? "value is undefined" : undefined_hint());
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17"
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::atoi(sci.c_str() + e + 1);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = utf8_decode(s, i, &len);
    if (cp == '\\')
      out += "\\\\";
    else if (cp == static_cast<uint32_t>(quote))
      out += std::string("\\") + quote;
    else if (cp == '\n')
      out += "\\n";
    else if (cp == '\r')
      out += "\\r";
    else if (cp == '\t')
      out += "\\t";
    else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0 && len > 1) || cp == 0xAD) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", cp);
      out += b;
    } else {
      out.append(s.substr(i, len));
    }
  }
  return out + quote;
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(as_int());
    case Kind::kFloat: return float_repr(as_float());
    case Kind::kString: return string_repr(as_string());
    case Kind::kList: {
      const List& l = as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      return out + (l.is_tuple ? ")" : "]");
    }
    case Kind::kDict: {
      if (is_namespace()) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::kCallable: return "<function " + as_callable().name + ">";
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_float() == b.to_float();
    return a.to_int() == b.to_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.as_string() == b.as_string();
    case Kind::kList: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !values_equal(v, *w)) return false;
      }
      return true;
    }
    case Kind::kCallable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_float() < b.to_float();
    return a.to_int() < b.to_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  a.require_defined();
  b.require_defined();
  fail(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" + b.type_name() + "'");
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = utf8_decode(s, i, &len);
    char b[16];
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(b, sizeof(b), "\\u%04x", cp);
      }
      out += b;
    } else {
      out.append(s.substr(i, len));
    }
  }
  out += '"';
}

namespace {

void json_newline(std::string& out, const JsonOptions& o, int level) {
  out += '\n';
  for (int i = 0; i < level; ++i) {
    if (o.indent >= 0)
      out.append(static_cast<size_t>(o.indent), ' ');
    else
      out += o.indent_str;
  }
}

void to_json_rec(std::string& out, const Value& v, const JsonOptions& o, int level) {
  if (level > 512) fail("tojson: value nested too deeply");
  const bool pretty = o.indent >= 0 || !o.indent_str.empty();
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return;
    }
    case Kind::kString: append_json_string(out, v.as_string(), o.ensure_ascii); return;
    case Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) json_newline(out, o, level + 1);
        to_json_rec(out, items[i], o, level + 1);
      }
      if (pretty) json_newline(out, o, level);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) json_newline(out, o, level + 1);
        append_json_string(out, items[i]->first, o.ensure_ascii);
        out += o.key_separator;
        to_json_rec(out, items[i]->second, o, level + 1);
      }
      if (pretty) json_newline(out, o, level);
      out += '}';
      return;
    }
    default: break;
  }
  fail(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  to_json_rec(out, v, options, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j, int max_depth) {
  if (max_depth <= 0) fail("JSON input nested too deeply");
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value(j.get<bool>());
    case T::number_integer: return Value(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case T::number_float: return Value(j.get<double>());
    case T::string: return Value(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, max_depth - 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->set(it.key(), from_json(it.value(), max_depth - 1));
      return Value(std::move(d));
    }
    default: return Value::undefined("unsupported JSON value");
  }
}

}  // namespace pagoda::jinja
