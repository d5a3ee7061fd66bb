// Values of the Jinja interpreter, with Python semantics: what `str()`,
// `repr()`, `==`, `<` and truthiness give for each type, and conversion to and
// from JSON (`json.dumps`, as transformers' `tojson` filter calls it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace pagoda::jinja {

// Errors inside the interpreter are thrown as Error and turned into a Status
// at the ChatTemplate boundary; they never escape the tokenizer library.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};
// Thrown by raise_exception(): the message is the template's own.
class RaisedError : public Error {
 public:
  using Error::Error;
};
// Thrown when a render exceeds a step, depth or size limit.
class LimitError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail(const std::string& message);

class Value;
class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Positional i, else keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
};

using Function = std::function<Value(Interpreter&, const CallArgs&)>;

struct Undefined {
  std::string hint;  // why it is undefined, for error messages
};
struct NoneType {};
struct List;
struct Dict;
struct Callable {
  std::string name;
  Function fn;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

class Value {
 public:
  Value() : v_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(NoneType{}); }
  Value(bool b) : v_(b) {}                                  // NOLINT
  Value(int64_t i) : v_(i) {}                               // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}             // NOLINT
  Value(double d) : v_(d) {}                                // NOLINT
  Value(std::string s) : v_(std::move(s)) {}                // NOLINT
  Value(const char* s) : v_(std::string(s)) {}              // NOLINT
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}      // NOLINT
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}      // NOLINT
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}  // NOLINT
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value function(std::string name, Function fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  bool is_namespace() const;
  bool is_tuple() const;

  // Numeric value of a bool/int (bool counts as int, as in Python).
  int64_t to_int() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  double to_float() const { return is_float() ? as_float() : static_cast<double>(to_int()); }

  bool truthy() const;
  std::string str() const;        // Python str(); Undefined prints as ""
  std::string repr() const;       // Python repr()
  const char* type_name() const;  // Python type name for error messages

  // Throws the "is undefined" error when this is Undefined.
  void require_defined() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(NoneType n) : v_(n) {}
  std::variant<Undefined, NoneType, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<Callable>>
      v_;
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

// Insertion-ordered string-keyed mapping (Python dicts keep insertion order).
// A namespace() object is a Dict whose attributes can be assigned.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

Value make_dict();

// Python `==` (int 1 == float 1.0 == True; list != tuple).
bool values_equal(const Value& a, const Value& b);
// Python `<`: numbers, strings, lists; otherwise throws TypeError-like Error.
bool value_less(const Value& a, const Value& b);

// Python float repr ("0.5", "2.0", "1e-05", "1e+16", "inf").
std::string float_repr(double d);
// Python repr of a str: quotes chosen and escapes applied as Python does.
std::string string_repr(std::string_view s);

struct JsonOptions {
  int indent = -1;         // < 0: single line
  std::string indent_str;  // used when indent given as a string
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
// json.dumps(value, ...) as Python writes it; throws for values JSON cannot hold.
std::string to_json(const Value& v, const JsonOptions& options);
// JSON appended as a JSON string literal (escapes as json.dumps does).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

// Converts parsed JSON; objects keep their key order. Throws past max_depth.
Value from_json(const nlohmann::ordered_json& j, int max_depth = 256);

}  // namespace pagoda::jinja
