// Global functions, attribute/item access and Python methods of str, list and
// dict, with jinja2's ImmutableSandboxedEnvironment rules (no mutation).
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/py_string.h"

namespace pagoda::jinja {
namespace {

std::optional<std::string> opt_string(const Value* v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) fail(std::string(what) + " must be a string or None");
  return v->as_string();
}

int64_t int_arg(const Value* v, int64_t dflt, const char* what) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) fail(std::string(what) + " must be an integer");
  return v->to_int();
}

const std::string& str_arg(const Value* v, const char* what) {
  if (!v || !v->is_string()) fail(std::string(what) + " must be a string");
  return v->as_string();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

bool all_code_points(const std::string& s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    if (!pred(utf8_decode(s, i, &len))) return false;
  }
  return true;
}

// '{}' / '{0}' / '{name}' substitution (no format specs).
std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t end = fmt.find('}', i);
    if (end == std::string::npos) fail("single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, end - i - 1);
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < a.positional.size() ? &a.positional[auto_index++] : nullptr;
    } else if (field.find_first_not_of("0123456789") == std::string::npos && field.size() < 9) {
      const size_t idx = std::stoul(field);
      v = idx < a.positional.size() ? &a.positional[idx] : nullptr;
    } else {
      for (const auto& [k, kv] : a.keyword)
        if (k == field) v = &kv;
    }
    if (!v) fail("format field '{" + field + "}' has no matching argument (format specs are not supported)");
    out += v->str();
    i = end;
  }
  return out;
}

Value string_method(Interpreter& in, const std::string& s, const std::string& name, const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(py_strip(s, opt_string(a.get(0, "chars"), "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const auto sep = opt_string(a.get(0, "sep"), "sep");
    if (sep && sep->empty()) fail("empty separator");
    return string_list(py_split(s, sep, int_arg(a.get(1, "maxsplit"), -1, "maxsplit"), name == "rsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.get(0, "prefix");
    std::vector<Value> options = p && p->is_list() ? p->as_list().items : std::vector<Value>{p ? *p : Value()};
    for (const auto& o : options) {
      const std::string& x = str_arg(&o, name.c_str());
      const bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                            : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    std::string r = py_replace(s, str_arg(a.get(0, "old"), "old"), str_arg(a.get(1, "new"), "new"),
                               int_arg(a.get(2, "count"), -1, "count"));
    in.check_size(r.size());
    return Value(std::move(r));
  }
  if (name == "find") return Value(py_find(s, str_arg(a.get(0, "sub"), "sub")));
  if (name == "count") return Value(py_count(s, str_arg(a.get(0, "sub"), "sub")));
  if (name == "splitlines") return string_list(py_splitlines(s));
  if (name == "join") {
    std::string out;
    const Value* it = a.get(0, "iterable");
    if (!it) fail("join() takes exactly one argument");
    bool first = true;
    for (const auto& v : in.iterate(*it)) {
      if (!v.is_string()) fail(std::string("sequence item: expected str instance, ") + v.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += v.as_string();
      in.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "isdigit") return Value(all_code_points(s, [](uint32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") {
    return Value(all_code_points(s, [](uint32_t c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }));
  }
  if (name == "isalnum") {
    return Value(
        all_code_points(s, [](uint32_t c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); }));
  }
  if (name == "isspace") return Value(all_code_points(s, is_py_space));
  if (name == "islower") return Value(py_lower(s) == s && py_upper(s) != s);
  if (name == "isupper") return Value(py_upper(s) == s && py_lower(s) != s);
  if (name == "format") return Value(str_format(s, a));
  fail("str has no method '" + name + "'");
}

Value dict_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const Dict& d = obj.as_dict();
  if (name == "get") {
    const Value* k = a.get(0, "key");
    if (!k) fail("get expected at least 1 argument");
    const Value* found = k->is_string() ? d.find(k->as_string()) : nullptr;
    if (found) return *found;
    const Value* dflt = a.get(1, "default");
    return dflt ? *dflt : Value::none();
  }
  std::vector<Value> out;
  for (const auto& [k, v] : d.items) {
    if (name == "keys")
      out.emplace_back(k);
    else if (name == "values")
      out.push_back(v);
    else
      out.push_back(Value::list({Value(k), v}, true));
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const auto& items = obj.as_list().items;
  const Value* x = a.get(0, "value");
  if (!x) fail(name + "() takes exactly one argument");
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], *x)) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") fail(x->repr() + " is not in list");
  return Value(count);
}

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Value unsafe(const std::string& name, const Value& obj) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                          "' object is unsafe (templates cannot modify their inputs)");
}

}  // namespace

void Interpreter::install_globals() {
  auto& g = frames_[0].vars;
  g["range"] = Value::function("range", [](Interpreter& in, const CallArgs& a) {
    if (a.positional.empty() || a.positional.size() > 3) fail("range expected 1 to 3 arguments");
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a.positional.size(); ++i) v[i] = int_arg(&a.positional[i], 0, "range() argument");
    if (a.positional.size() == 1) v[1] = v[0], v[0] = 0;
    if (v[2] == 0) fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
      if (static_cast<int64_t>(out.size()) >= in.limits().max_range) {
        throw LimitError("range too big, maximum size is " + std::to_string(in.limits().max_range));
      }
      out.emplace_back(i);
      if ((v[2] > 0 && i > INT64_MAX - v[2]) || (v[2] < 0 && i < INT64_MIN - v[2])) break;
    }
    return Value::list(std::move(out));
  });
  auto make_mapping = [](bool ns) {
    return [ns](Interpreter&, const CallArgs& a) {
      Value d = make_dict();
      d.as_dict().is_namespace = ns;
      for (const auto& p : a.positional) {
        if (!p.is_dict()) fail("namespace()/dict() positional argument must be a mapping");
        for (const auto& [k, v] : p.as_dict().items) d.as_dict().set(k, v);
      }
      for (const auto& [k, v] : a.keyword) d.as_dict().set(k, v);
      return d;
    };
  };
  g["namespace"] = Value::function("namespace", make_mapping(true));
  g["dict"] = Value::function("dict", make_mapping(false));
  g["raise_exception"] = Value::function("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
    throw RaisedError(a.positional.empty() ? std::string("raise_exception() called") : a.positional[0].str());
  });
  g["strftime_now"] = Value::function("strftime_now", [](Interpreter& in, const CallArgs& a) {
    return Value(in.strftime_now(str_arg(a.get(0, "format"), "strftime_now format")));
  });
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  obj.require_defined();
  const std::string type = obj.type_name();
  auto bound = [&](Value (*fn)(Interpreter&, const Value&, const std::string&, const CallArgs&)) {
    return Value::function(name, [obj, name, fn](Interpreter& in, const CallArgs& a) { return fn(in, obj, name, a); });
  };
  if (obj.is_string()) {
    if (is_one_of(name, {"strip",   "lstrip",  "rstrip",     "split",   "rsplit",  "startswith", "endswith",   "upper",
                         "lower",   "title",   "capitalize", "replace", "find",    "count",      "splitlines", "join",
                         "isdigit", "isalpha", "isalnum",    "isspace", "islower", "isupper",    "format"})) {
      return bound([](Interpreter& in, const Value& o, const std::string& n, const CallArgs& a) {
        return string_method(in, o.as_string(), n, a);
      });
    }
  } else if (obj.is_dict() && !obj.is_namespace()) {
    if (is_one_of(name, {"get", "items", "keys", "values"})) {
      return bound(
          [](Interpreter&, const Value& o, const std::string& n, const CallArgs& a) { return dict_method(o, n, a); });
    }
    if (is_one_of(name, {"pop", "popitem", "update", "clear", "setdefault", "copy", "fromkeys"}))
      return unsafe(name, obj);
  } else if (obj.is_list()) {
    if (is_one_of(name, {"index", "count"})) {
      return bound(
          [](Interpreter&, const Value& o, const std::string& n, const CallArgs& a) { return list_method(o, n, a); });
    }
    if (is_one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "copy"})) {
      return unsafe(name, obj);
    }
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return Value::undefined("'" + type + " object' has no attribute '" + name + "'");
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  obj.require_defined();
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.as_list().items.size())
                                    : static_cast<int64_t>(code_point_count(obj.as_string()));
    int64_t i = key.to_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.as_list().items[static_cast<size_t>(i)];
      const std::vector<size_t> offs = code_point_offsets(obj.as_string());
      return Value(obj.as_string().substr(offs[static_cast<size_t>(i)],
                                          offs[static_cast<size_t>(i) + 1] - offs[static_cast<size_t>(i)]));
    }
    return Value::undefined(std::string(obj.type_name()) + " object has no element " + std::to_string(key.to_int()));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no element " + key.repr());
}

}  // namespace pagoda::jinja
