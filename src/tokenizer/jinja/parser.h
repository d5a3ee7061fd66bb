// Recursive-descent parser for the Jinja subset chat templates use, following
// jinja2's grammar and operator precedence.
#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace pagoda::jinja {

// Throws jinja::Error ("line N: ...") on syntax errors.
StmtList parse_template(std::string_view source);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}
  StmtList parse();

  // Expressions (parser_expr.cc).
  ExprPtr parse_expression(bool with_condexpr = true);

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::kName && cur().text == n; }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view n);
  void expect_op(std::string_view op);
  std::string expect_name();
  [[noreturn]] void error(const std::string& msg) const;

  // Statements (parser.cc).
  StmtList parse_body(const std::vector<std::string_view>& end_tags);
  StmtPtr parse_statement();
  StmtPtr parse_if(int line);
  StmtPtr parse_for(int line);
  StmtPtr parse_set(int line);
  StmtPtr parse_macro(int line);
  void expect_block_end();
  std::vector<std::string> parse_targets();

  // Expression levels (parser_expr.cc).
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript_index();
  ExprPtr parse_tuple_or_paren();
  void parse_call_args(Expr& call);
  ExprPtr make(Expr::Kind kind, int line);

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;  // expression nesting, bounded to protect the stack
  int stmt_depth_ = 0;
};

}  // namespace pagoda::jinja
