#include "tokenizer/jinja/parser.h"

namespace pagoda::jinja {
namespace {

constexpr int kMaxStatementNesting = 128;

StmtPtr new_stmt(Stmt::Kind kind) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  return s;
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kEof: return "end of template";
    case TokenType::kData: return "template data";
    case TokenType::kBlockEnd: return "'%}'";
    case TokenType::kVarEnd: return "'}}'";
    case TokenType::kString: return "string";
    default: return "'" + t.text + "'";
  }
}

}  // namespace

StmtList parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

void Parser::error(const std::string& msg) const { fail("line " + std::to_string(cur().line) + ": " + msg); }

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

void Parser::expect_op(std::string_view op) {
  if (!skip_op(op)) error("expected '" + std::string(op) + "', got " + describe(cur()));
}

std::string Parser::expect_name() {
  if (cur().type != TokenType::kName) error("expected a name, got " + describe(cur()));
  std::string n = cur().text;
  next();
  return n;
}

void Parser::expect_block_end() {
  if (cur().type != TokenType::kBlockEnd) {
    error("expected end of statement block '%}', got " + describe(cur()));
  }
  next();
}

StmtList Parser::parse() {
  StmtList body = parse_body({});
  if (cur().type != TokenType::kEof) error("unexpected " + describe(cur()));
  return body;
}

StmtList Parser::parse_body(const std::vector<std::string_view>& end_tags) {
  if (++stmt_depth_ > kMaxStatementNesting) error("blocks nested too deeply");
  StmtList body;
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::kEof) {
      if (end_tags.empty()) break;
      std::string expected;
      for (auto e : end_tags) expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
      error("unexpected end of template; expected " + expected);
    }
    if (t.type == TokenType::kData) {
      auto s = new_stmt(Stmt::Kind::kData);
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TokenType::kVarBegin) {
      auto s = new_stmt(Stmt::Kind::kOutput);
      s->line = t.line;
      next();
      s->expr = parse_expression();
      if (cur().type != TokenType::kVarEnd) error("expected '}}', got " + describe(cur()));
      next();
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      const Token& name = peek();
      bool is_end = false;
      for (auto e : end_tags) is_end |= name.type == TokenType::kName && name.text == e;
      if (is_end) {
        next();  // leave the stream at the end tag's name
        break;
      }
      next();
      body.push_back(parse_statement());
    } else {
      error("unexpected " + describe(t));
    }
  }
  --stmt_depth_;
  return body;
}

StmtPtr Parser::parse_statement() {
  const int line = cur().line;
  if (cur().type != TokenType::kName) error("expected a tag name, got " + describe(cur()));
  const std::string tag = cur().text;
  next();
  if (tag == "if") return parse_if(line);
  if (tag == "for") return parse_for(line);
  if (tag == "set") return parse_set(line);
  if (tag == "macro") return parse_macro(line);
  if (tag == "break" || tag == "continue") {
    auto s = new_stmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue);
    s->line = line;
    expect_block_end();
    return s;
  }
  if (tag == "print") {
    auto s = new_stmt(Stmt::Kind::kOutput);
    s->line = line;
    s->expr = parse_expression();
    expect_block_end();
    return s;
  }
  if (tag == "generation") {  // transformers' assistant-mask marker: renders its body
    auto s = new_stmt(Stmt::Kind::kScope);
    s->line = line;
    expect_block_end();
    s->body = parse_body({"endgeneration"});
    next();
    expect_block_end();
    return s;
  }
  static const char* kUnsupported[] = {"call",   "filter", "with",       "block", "extends", "include",
                                       "import", "from",   "autoescape", "do",    "trans"};
  for (const char* u : kUnsupported) {
    if (tag == u) error("the '" + tag + "' tag is not supported by this renderer");
  }
  error("encountered unknown tag '" + tag + "'");
}

StmtPtr Parser::parse_if(int line) {
  auto s = new_stmt(Stmt::Kind::kIf);
  s->line = line;
  ExprPtr cond = parse_expression();
  expect_block_end();
  while (true) {
    StmtList body = parse_body({"elif", "else", "endif"});
    s->branches.emplace_back(std::move(cond), std::move(body));
    const std::string tag = cur().text;
    next();
    if (tag == "elif") {
      cond = parse_expression();
      expect_block_end();
    } else if (tag == "else") {
      expect_block_end();
      s->branches.emplace_back(nullptr, parse_body({"endif"}));
      next();
      expect_block_end();
      return s;
    } else {
      expect_block_end();
      return s;
    }
  }
}

std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  do {
    names.push_back(expect_name());
  } while (skip_op(","));
  if (paren) expect_op(")");
  return names;
}

StmtPtr Parser::parse_for(int line) {
  auto s = new_stmt(Stmt::Kind::kFor);
  s->line = line;
  s->targets = parse_targets();
  if (!skip_name("in")) error("expected 'in' in for loop, got " + describe(cur()));
  s->expr = parse_expression(false);
  if (skip_name("if")) s->cond = parse_expression();
  if (is_name("recursive")) error("recursive for loops are not supported by this renderer");
  expect_block_end();
  s->body = parse_body({"endfor", "else"});
  if (cur().text == "else") {
    next();
    expect_block_end();
    s->else_body = parse_body({"endfor"});
  }
  next();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_set(int line) {
  auto s = new_stmt(Stmt::Kind::kSet);
  s->line = line;
  s->targets.push_back(expect_name());
  if (skip_op(".")) {
    s->attr = expect_name();
  } else {
    while (skip_op(",")) s->targets.push_back(expect_name());
  }
  if (skip_op("=")) {
    s->expr = parse_expression();
    if (is_op(",")) {  // `set x = a, b` builds a tuple
      auto tuple = make(Expr::Kind::kTuple, line);
      tuple->args.push_back(std::move(s->expr));
      while (skip_op(",")) {
        if (cur().type == TokenType::kBlockEnd) break;
        tuple->args.push_back(parse_expression());
      }
      s->expr = std::move(tuple);
    }
    expect_block_end();
    return s;
  }
  if (!s->attr.empty() || s->targets.size() != 1) error("expected '=' in set statement");
  s->kind = Stmt::Kind::kSetBlock;
  expect_block_end();
  s->body = parse_body({"endset"});
  next();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_macro(int line) {
  auto s = new_stmt(Stmt::Kind::kMacro);
  s->line = line;
  s->text = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!s->targets.empty()) expect_op(",");
    if (is_op(")")) break;
    s->targets.push_back(expect_name());
    s->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
  }
  next();
  expect_block_end();
  s->body = parse_body({"endmacro"});
  next();
  if (cur().type == TokenType::kName) next();  // optional macro name after endmacro
  expect_block_end();
  return s;
}

}  // namespace pagoda::jinja
