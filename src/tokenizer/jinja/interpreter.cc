#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/py_string.h"

namespace pagoda::jinja {

Interpreter::Interpreter(const Limits& limits, StrftimeFn strftime_now)
    : limits_(limits), strftime_(std::move(strftime_now)) {}

std::string Interpreter::render(const StmtList& body, const std::vector<std::pair<std::string, Value>>& context) {
  frames_.clear();
  frames_.emplace_back();
  install_globals();
  for (const auto& [k, v] : context) frames_[0].vars[k] = v;
  std::string out;
  out_ = &out;
  steps_ = 0;
  call_depth_ = 0;
  try {
    exec(body);
  } catch (const RaisedError& e) {
    throw RaisedError("line " + std::to_string(line_) + ": " + e.what());
  } catch (const LimitError& e) {
    throw LimitError("line " + std::to_string(line_) + ": " + e.what());
  } catch (const Error& e) {
    throw Error("line " + std::to_string(line_) + ": " + e.what());
  }
  return out;
}

void Interpreter::count_steps(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    throw LimitError("template exceeded the step limit (" + std::to_string(limits_.max_steps) +
                     "); is it looping without end?");
  }
}

void Interpreter::check_size(size_t n) const {
  if (n > limits_.max_output_bytes) {
    throw LimitError("template output or value exceeds the size limit of " + std::to_string(limits_.max_output_bytes) +
                     " bytes");
  }
}

void Interpreter::write(std::string_view text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

Value Interpreter::lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > 0;) {
    auto it = frames_[i].vars.find(name);
    if (it != frames_[i].vars.end()) return it->second;
    if (frames_[i].barrier && i > 0) {
      auto g = frames_[0].vars.find(name);
      if (g != frames_[0].vars.end()) return g->second;
      break;
    }
  }
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value v) { frames_.back().vars[name] = std::move(v); }

Interpreter::Flow Interpreter::exec(const StmtList& body) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s) {
  count_steps();
  line_ = s.line;
  switch (s.kind) {
    case Stmt::Kind::kData: write(s.text); break;
    case Stmt::Kind::kOutput: {
      const Value v = eval(*s.expr);
      if (v.is_string())
        write(v.as_string());
      else
        write(v.str());
      break;
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (!cond || eval(*cond).truthy()) return exec(body);
      }
      break;
    case Stmt::Kind::kFor: exec_for(s); break;
    case Stmt::Kind::kSet: exec_set(s); break;
    case Stmt::Kind::kSetBlock: {
      std::string buf;
      std::string* saved = out_;
      out_ = &buf;
      const Flow f = exec(s.body);
      out_ = saved;
      assign(s.targets[0], Value(std::move(buf)));
      return f;
    }
    case Stmt::Kind::kMacro: define_macro(s); break;
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
    case Stmt::Kind::kScope: return exec(s.body);
  }
  return Flow::kNormal;
}

void Interpreter::bind_targets(const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    assign(targets[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != targets.size()) {
    fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) +
         " variables");
  }
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
}

void Interpreter::exec_for(const Stmt& s) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.cond) {
    std::vector<Value> kept;
    for (auto& item : items) {
      count_steps();
      frames_.emplace_back();
      bind_targets(s.targets, item);
      const bool keep = eval(*s.cond).truthy();
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body);
    return;
  }
  // One loop object per loop, advanced in place like jinja2's LoopContext;
  // one frame, cleared for each iteration.
  const int64_t n = static_cast<int64_t>(items.size());
  auto loop = std::make_shared<Dict>();
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                          "previtem", "nextitem", "cycle"}) {
    loop->items.emplace_back(key, Value());
  }
  auto& f = loop->items;
  f[6].second = Value(n);
  f[7].second = Value(1);
  f[8].second = Value(0);
  Dict* raw = loop.get();
  f[11].second = Value::function("cycle", [raw](Interpreter&, const CallArgs& a) {
    if (a.positional.empty()) fail("no items for cycling given");
    return a.positional[static_cast<size_t>(raw->items[1].second.as_int()) % a.positional.size()];
  });
  const Value loop_value(loop);
  frames_.emplace_back();
  for (int64_t i = 0; i < n; ++i) {
    count_steps();
    frames_.back().vars.clear();
    bind_targets(s.targets, items[static_cast<size_t>(i)]);
    f[0].second = Value(i + 1);
    f[1].second = Value(i);
    f[2].second = Value(n - i);
    f[3].second = Value(n - i - 1);
    f[4].second = Value(i == 0);
    f[5].second = Value(i == n - 1);
    f[9].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
    f[10].second = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
    assign("loop", loop_value);
    if (exec(s.body) == Flow::kBreak) break;
  }
  frames_.pop_back();
  raw->items[11].second = Value();  // break the loop -> cycle -> loop reference cycle
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (s.attr.empty()) {
    bind_targets(s.targets, v);
    return;
  }
  Value ns = lookup(s.targets[0]);
  if (!ns.is_namespace()) {
    ns.require_defined();
    fail("cannot assign attribute '" + s.attr + "' on a " + ns.type_name() +
         " object; only namespace() objects can be changed");
  }
  ns.as_dict().set(s.attr, std::move(v));
}

void Interpreter::define_macro(const Stmt& s) {
  const Stmt* macro = &s;
  assign(s.text, Value::function(
                     s.text, [macro](Interpreter& in, const CallArgs& args) { return in.call_macro(*macro, args); }));
}

Value Interpreter::call_macro(const Stmt& macro, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    throw LimitError("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  }
  if (args.positional.size() > macro.targets.size()) {
    fail("macro '" + macro.text + "' takes not more than " + std::to_string(macro.targets.size()) + " argument(s)");
  }
  Frame frame;
  frame.barrier = true;
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const auto& t : macro.targets) known |= t == k;
    if (!known) fail("macro '" + macro.text + "' was invoked with an unknown keyword argument '" + k + "'");
  }
  // Defaults are evaluated in the macro's own frame, after earlier parameters.
  frames_.push_back(std::move(frame));
  for (size_t i = 0; i < macro.targets.size(); ++i) {
    const Value* given = args.get(i, macro.targets[i]);
    Value v = given               ? *given
              : macro.defaults[i] ? eval(*macro.defaults[i])
                                  : Value::undefined("parameter '" + macro.targets[i] + "' was not provided");
    assign(macro.targets[i], std::move(v));
  }
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  ++call_depth_;
  try {
    exec(macro.body);
  } catch (...) {
    out_ = saved;
    --call_depth_;
    frames_.pop_back();
    throw;
  }
  out_ = saved;
  --call_depth_;
  frames_.pop_back();
  return Value(std::move(buf));
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (!callee.is_callable()) {
    callee.require_defined();
    fail(std::string("'") + callee.type_name() + "' object is not callable");
  }
  return callee.as_callable().fn(*this, args);
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return {};
    case Kind::kList: return v.as_list().items;
    case Kind::kString: {
      std::vector<Value> out;
      for (auto& cp : code_points(v.as_string())) out.emplace_back(std::move(cp));
      return out;
    }
    case Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> out;
      for (const auto& kv : v.as_dict().items) out.emplace_back(kv.first);
      return out;
    }
    default: break;
  }
  fail(std::string("'") + v.type_name() + "' object is not iterable");
}

}  // namespace pagoda::jinja
