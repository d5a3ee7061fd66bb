// Expression evaluation and Python operator semantics.
#include <cmath>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/py_string.h"

namespace pagoda::jinja {
namespace {

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// Usage: `if (__builtin_add_overflow(a, b, &r)) overflow();`
[[noreturn]] void overflow() { fail("integer overflow"); }

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (s.empty()) return Value(std::string());
    in.check_size(static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)) * s.size());
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (items.empty()) return Value::list({}, seq.is_tuple());
  in.check_size(static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)) * items.size() * sizeof(Value));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

// printf-style `fmt % args` for %s %r %d %i %%.
Value percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> list = args.is_tuple() ? args.as_list().items : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    const char c = i + 1 < fmt.size() ? fmt[++i] : '\0';
    if (c == '%') {
      out += '%';
      continue;
    }
    if (c != 's' && c != 'r' && c != 'd' && c != 'i') fail("unsupported format character in '%' formatting");
    if (next >= list.size()) fail("not enough arguments for format string");
    const Value& v = list[next++];
    if (c == 's')
      out += v.str();
    else if (c == 'r')
      out += v.repr();
    else if (v.is_number())
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_float()) : v.to_int());
    else
      fail("%d format: a real number is required");
  }
  if (next < list.size()) fail("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace

bool value_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string()) {
        item.require_defined();
        fail(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.as_list().items) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Kind::kDict: return item.is_string() && container.as_dict().find(item.as_string());
    default: fail(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      std::string s;
      s.reserve(a.as_string().size() + b.as_string().size());
      s.append(a.as_string()).append(b.as_string());
      return Value(std::move(s));
    }
    std::string s = a.str() + b.str();
    check_size(s.size());
    return Value(std::move(s));
  }
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      if (__builtin_add_overflow(a.to_int(), b.to_int(), &r)) overflow();
      return Value(r);
    }
    if (nums) return Value(a.to_float() + b.to_float());
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      check_size((a.as_list().items.size() + b.as_list().items.size()) * sizeof(Value));
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.is_tuple());
    }
  } else if (op == "-") {
    if (ints) {
      if (__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) overflow();
      return Value(r);
    }
    if (nums) return Value(a.to_float() - b.to_float());
  } else if (op == "*") {
    if (ints) {
      if (__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) overflow();
      return Value(r);
    }
    if (nums) return Value(a.to_float() * b.to_float());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(*this, a, b.to_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(*this, b, a.to_int());
  } else if (op == "/") {
    if (nums) {
      if (b.to_float() == 0) fail("division by zero");
      return Value(a.to_float() / b.to_float());
    }
  } else if (op == "//" || op == "%") {
    if (nums && b.to_float() == 0) fail(op == "%" ? "modulo by zero" : "integer division by zero");
    if (ints) {
      const int64_t x = a.to_int(), y = b.to_int();
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return Value(op == "//" ? q : m);
    }
    if (nums) {
      const double x = a.to_float(), y = b.to_float();
      if (op == "//") return Value(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  } else if (op == "**") {
    if (ints && b.to_int() >= 0) {
      int64_t base = a.to_int(), e = b.to_int(), acc = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) fail("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
      }
      return Value(acc);
    }
    if (nums) return Value(std::pow(a.to_float(), b.to_float()));
  }
  type_error(op, a, b);
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "<") return value_less(a, b);
  if (op == ">") return value_less(b, a);
  if (op == "<=") return value_less(a, b) || values_equal(a, b);
  if (op == ">=") return value_less(b, a) || values_equal(a, b);
  if (op == "in") return value_contains(b, a);
  return !value_contains(b, a);  // notin
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Interpreter::eval_slice(const Value& obj, const Expr& slice) {
  std::optional<int64_t> bound[3];
  for (int i = 0; i < 3; ++i) {
    if (!slice.args[static_cast<size_t>(i)]) continue;
    const Value v = eval(*slice.args[static_cast<size_t>(i)]);
    if (v.is_none()) continue;
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
    bound[i] = v.to_int();
  }
  if (bound[2] && *bound[2] == 0) fail("slice step cannot be zero");
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const std::vector<size_t> offs = code_point_offsets(s);
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(offs.size()) - 1, bound[0], bound[1], bound[2])) {
      out.append(s, offs[static_cast<size_t>(i)], offs[static_cast<size_t>(i) + 1] - offs[static_cast<size_t>(i)]);
    }
    return Value(std::move(out));
  }
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (int64_t i : slice_indices(static_cast<int64_t>(items.size()), bound[0], bound[1], bound[2])) {
      out.push_back(items[static_cast<size_t>(i)]);
    }
    return Value::list(std::move(out), obj.is_tuple());
  }
  obj.require_defined();
  return Value::undefined(std::string("'") + obj.type_name() + " object' cannot be sliced");
}

Value Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kConst: return e.value;
    case Expr::Kind::kName: return lookup(e.name);
    case Expr::Kind::kGetAttr: return get_attr(eval(*e.args[0]), e.name);
    case Expr::Kind::kGetItem: {
      const Value obj = eval(*e.args[0]);
      if (e.args[1]->kind == Expr::Kind::kSlice) return eval_slice(obj, *e.args[1]);
      return get_item(obj, eval(*e.args[1]));
    }
    case Expr::Kind::kSlice: fail("unexpected slice");
    case Expr::Kind::kCall: {
      const Value callee = eval(*e.args[0]);
      return call(callee, eval_args(e, 1));
    }
    case Expr::Kind::kFilter: return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1));
    case Expr::Kind::kTest: return Value(apply_test(e.name, eval(*e.args[0]), eval_args(e, 1)) != e.negate);
    case Expr::Kind::kNot: return Value(!eval(*e.args[0]).truthy());
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      const Value v = eval(*e.args[0]);
      if (!v.is_number()) {
        v.require_defined();
        fail(std::string("bad operand type for unary ") + (e.kind == Expr::Kind::kNeg ? "-" : "+") + ": '" +
             v.type_name() + "'");
      }
      if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value(v.to_int()) : v;
      if (v.is_float()) return Value(-v.as_float());
      if (v.to_int() == INT64_MIN) overflow();
      return Value(-v.to_int());
    }
    case Expr::Kind::kBinary: {
      const Value a = eval(*e.args[0]);
      return eval_binary(e.name, a, eval(*e.args[1]));
    }
    case Expr::Kind::kAnd: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    case Expr::Kind::kOr: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    case Expr::Kind::kCompare: {
      Value left = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        if (!eval_compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::kCond:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression had no else");
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::list(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Value d = make_dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value k = eval(*e.args[i]);
        if (!k.is_string()) fail("only string keys are supported in dict literals");
        d.as_dict().set(k.as_string(), eval(*e.args[i + 1]));
      }
      return d;
    }
  }
  fail("unknown expression");
}

}  // namespace pagoda::jinja
