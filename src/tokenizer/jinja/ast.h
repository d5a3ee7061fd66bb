// Syntax tree of a parsed Jinja template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConst,    // value
    kName,     // name
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // start:stop:step in args[0..2] (each may be null); only as a GetItem index
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..], kwargs); negated when `negate`
    kNot,
    kNeg,
    kPos,     // unary on args[0]
    kBinary,  // args[0] op args[1]; op in name: + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
    kList,
    kTuple,
    kDict,  // dict: args alternate key, value
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kData,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (cond, body); a null cond is the else branch
    kFor,       // for targets in expr [if cond]: body [else else_body]
    kSet,       // set targets = expr; or set targets[0].attr = expr when attr is set
    kSetBlock,  // set targets[0] %}body{% endset
    kMacro,     // macro name(targets = defaults) body
    kBreak,
    kContinue,
    kScope,  // a plain body (generation blocks)
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<ExprPtr> defaults;  // macro parameter defaults (null = required)
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body;
  StmtList else_body;
};

}  // namespace pagoda::jinja
