// Tree-walking evaluator for parsed templates. Scoping follows jinja2: each
// for-loop iteration and each macro call gets its own frame (so `set` inside a
// loop does not leak out; use namespace() for that), `if` blocks do not.
// Runaway templates are stopped by step, call-depth and size limits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

struct Limits {
  int64_t max_steps = 1'000'000;        // statements + loop iterations + filter elements
  int max_call_depth = 64;              // nested macro calls
  size_t max_output_bytes = 16u << 20;  // rendered text, and any one string or list built
  int64_t max_range = 100'000;          // range() length (jinja2's sandbox limit)
};

class Interpreter {
 public:
  using StrftimeFn = std::function<std::string(const std::string& format)>;
  Interpreter(const Limits& limits, StrftimeFn strftime_now);

  // Renders body with `context` as the top-level variables (plus the globals
  // range, namespace, dict, raise_exception, strftime_now). Throws Error.
  std::string render(const StmtList& body, const std::vector<std::pair<std::string, Value>>& context);

  // Used by filters, tests and built-in functions.
  Value eval(const Expr& e);
  Value call(const Value& callee, const CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  std::vector<Value> iterate(const Value& v);
  Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);
  void count_steps(int64_t n = 1);
  void check_size(size_t n) const;  // throws past max_output_bytes
  const Limits& limits() const { return limits_; }
  std::string strftime_now(const std::string& format) const { return strftime_(format); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::unordered_map<std::string, Value> vars;
    bool barrier = false;  // lookups skip from here to the global frame
  };

  Flow exec(const StmtList& body);
  Flow exec_stmt(const Stmt& s);
  void exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void define_macro(const Stmt& s);
  Value call_macro(const Stmt& macro, const CallArgs& args);
  void bind_targets(const std::vector<std::string>& targets, const Value& v);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  void write(std::string_view text);
  void install_globals();

  // eval.cc
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool eval_compare(const std::string& op, const Value& a, const Value& b);
  Value eval_slice(const Value& obj, const Expr& slice);
  CallArgs eval_args(const Expr& e, size_t first);

  Limits limits_;
  StrftimeFn strftime_;
  std::vector<Frame> frames_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;  // line of the statement being executed, for error messages
};

// Python membership test `item in container`.
bool value_contains(const Value& container, const Value& item);

}  // namespace pagoda::jinja
