// Expression grammar (jinja2 precedence, loosest first): conditional `a if c
// else b`, or, and, not, comparisons (== != < <= > >= in, not in), + -, ~,
// * / // %, **, unary - +, then postfix (.attr, [index], call) and filters /
// tests (`|f`, `is t`), which bind tighter than every binary operator.
#include <charconv>

#include "tokenizer/jinja/parser.h"

namespace pagoda::jinja {
namespace {

constexpr int kMaxExpressionNesting = 96;

struct DepthGuard {
  DepthGuard(int& depth, const Parser* p) : depth_(depth) { ++depth_; }
  ~DepthGuard() { --depth_; }
  int& depth_;
};

}  // namespace

ExprPtr Parser::make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(depth_, this);
  if (depth_ > kMaxExpressionNesting) error("expression nested too deeply");
  ExprPtr expr = parse_or();
  if (!with_condexpr) return expr;
  while (is_name("if")) {
    const int line = cur().line;
    next();
    auto cond = make(Expr::Kind::kCond, line);
    cond->args.push_back(parse_or());
    cond->args.push_back(std::move(expr));
    cond->args.push_back(skip_name("else") ? parse_expression() : nullptr);
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    auto e = make(Expr::Kind::kOr, cur().line);
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_and());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    auto e = make(Expr::Kind::kAnd, cur().line);
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_not());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(depth_, this);
    if (depth_ > kMaxExpressionNesting) error("expression nested too deeply");
    auto e = make(Expr::Kind::kNot, cur().line);
    next();
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOp &&
        (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
      op = cur().text;
      next();
    } else if (is_name("in")) {
      op = "in";
      next();
    } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
      op = "notin";
      next();
      next();
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(Expr::Kind::kCompare, first->line);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    auto e = make(Expr::Kind::kBinary, cur().line);
    e->name = cur().text;
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_concat());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    auto e = make(Expr::Kind::kBinary, cur().line);
    e->name = "~";
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_math2());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    auto e = make(Expr::Kind::kBinary, cur().line);
    e->name = cur().text;
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_pow());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    auto e = make(Expr::Kind::kBinary, cur().line);
    e->name = "**";
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_unary(true));
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_, this);
  if (depth_ > kMaxExpressionNesting) error("expression nested too deeply");
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(is_op("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, cur().line);
    next();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  ExprPtr e;
  switch (t.type) {
    case TokenType::kName: {
      const std::string& n = t.text;
      if (n == "true" || n == "True" || n == "false" || n == "False") {
        e = make(Expr::Kind::kConst, t.line);
        e->value = Value(n[0] == 't' || n[0] == 'T');
      } else if (n == "none" || n == "None") {
        e = make(Expr::Kind::kConst, t.line);
        e->value = Value::none();
      } else {
        e = make(Expr::Kind::kName, t.line);
        e->name = n;
      }
      next();
      return e;
    }
    case TokenType::kString: {
      e = make(Expr::Kind::kConst, t.line);
      std::string s;
      while (cur().type == TokenType::kString) {  // adjacent literals concatenate
        s += cur().text;
        next();
      }
      e->value = Value(std::move(s));
      return e;
    }
    case TokenType::kInt: {
      e = make(Expr::Kind::kConst, t.line);
      int64_t v = 0;
      auto res = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      if (res.ec != std::errc()) error("integer literal too large: " + t.text);
      e->value = Value(v);
      next();
      return e;
    }
    case TokenType::kFloat: {
      e = make(Expr::Kind::kConst, t.line);
      double d = 0;
      std::from_chars(t.text.data(), t.text.data() + t.text.size(), d);
      e->value = Value(d);
      next();
      return e;
    }
    default: break;
  }
  if (skip_op("(")) return parse_tuple_or_paren();
  if (is_op("[") || is_op("{")) {
    const bool is_list = is_op("[");
    e = make(is_list ? Expr::Kind::kList : Expr::Kind::kDict, t.line);
    next();
    const char* close = is_list ? "]" : "}";
    while (!is_op(close)) {
      if (!e->args.empty()) expect_op(",");
      if (is_op(close)) break;
      e->args.push_back(parse_expression());
      if (!is_list) {
        expect_op(":");
        e->args.push_back(parse_expression());
      }
    }
    next();
    return e;
  }
  error("unexpected " + (t.type == TokenType::kEof ? std::string("end of template")
                         : t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd ? "end of tag"
                                                                                          : "'" + t.text + "'"));
}

ExprPtr Parser::parse_tuple_or_paren() {
  const int line = cur().line;
  if (skip_op(")")) return make(Expr::Kind::kTuple, line);
  ExprPtr first = parse_expression();
  if (skip_op(")")) return first;
  auto tuple = make(Expr::Kind::kTuple, line);
  tuple->args.push_back(std::move(first));
  while (skip_op(",")) {
    if (is_op(")")) break;
    tuple->args.push_back(parse_expression());
  }
  expect_op(")");
  return tuple;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    const int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokenType::kInt) {
        auto e = make(Expr::Kind::kGetItem, line);
        e->args.push_back(std::move(node));
        e->args.push_back(parse_primary());
        node = std::move(e);
      } else {
        auto e = make(Expr::Kind::kGetAttr, line);
        e->name = expect_name();
        e->args.push_back(std::move(node));
        node = std::move(e);
      }
    } else if (skip_op("[")) {
      auto e = make(Expr::Kind::kGetItem, line);
      e->args.push_back(std::move(node));
      std::vector<ExprPtr> idx;
      while (!is_op("]")) {
        if (!idx.empty()) expect_op(",");
        if (is_op("]")) break;
        idx.push_back(parse_subscript_index());
      }
      next();
      if (idx.empty()) error("expected a subscript");
      if (idx.size() == 1) {
        e->args.push_back(std::move(idx[0]));
      } else {
        auto tuple = make(Expr::Kind::kTuple, line);
        tuple->args = std::move(idx);
        e->args.push_back(std::move(tuple));
      }
      node = std::move(e);
    } else if (is_op("(")) {
      auto call = make(Expr::Kind::kCall, line);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript_index() {
  const int line = cur().line;
  auto slice = make(Expr::Kind::kSlice, line);
  if (!is_op(":")) {
    ExprPtr node = parse_expression();
    if (!is_op(":")) return node;
    slice->args.push_back(std::move(node));
  } else {
    slice->args.push_back(nullptr);
  }
  next();  // the ':'
  auto at_end = [&] { return is_op("]") || is_op(",") || is_op(":"); };
  slice->args.push_back(at_end() ? nullptr : parse_expression());
  if (skip_op(":")) {
    slice->args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression());
  } else {
    slice->args.push_back(nullptr);
  }
  return slice;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
    if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      call.args.push_back(parse_expression());
    }
  }
  next();
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    const int line = cur().line;
    if (skip_op("|")) {
      auto f = make(Expr::Kind::kFilter, line);
      f->name = expect_name();
      while (skip_op(".")) f->name.append(".").append(expect_name());
      f->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*f);
      node = std::move(f);
    } else if (skip_name("is")) {
      auto t = make(Expr::Kind::kTest, line);
      t->negate = skip_name("not");
      t->name = expect_name();
      while (skip_op(".")) t->name.append(".").append(expect_name());
      t->args.push_back(std::move(node));
      const TokenType ty = cur().type;
      if (is_op("(")) {
        parse_call_args(*t);
      } else if ((ty == TokenType::kName || ty == TokenType::kString || ty == TokenType::kInt ||
                  ty == TokenType::kFloat || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) error("you cannot chain multiple tests with is");
        t->args.push_back(parse_postfix(parse_primary()));
      }
      node = std::move(t);
    } else if (is_op("(")) {
      auto call = make(Expr::Kind::kCall, line);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

}  // namespace pagoda::jinja
