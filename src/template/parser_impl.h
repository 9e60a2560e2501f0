// Internal to the template parser (parser.cpp: statements, parser_expr.cpp:
// expressions): the recursive-descent Parser over the lexer's tokens. Method
// names follow jinja2's Parser so the grammar can be checked side by side.
// One Parser parses one template on one thread; it owns its tokens and hands
// the tree it builds to the caller. Errors are thrown as ParseError inside
// the parser only: parse_template (parser.h) converts them to a Status and
// never throws.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "template/ast.h"
#include "template/lexer.h"

namespace ember::tmpl {

// A syntax error at a line, carried out of the parser to parse_template.
struct ParseError {
  int line;
  std::string msg;
};

inline ExprPtr make_expr(ExprKind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

inline StmtPtr make_stmt(StmtKind k, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = k;
  s->line = line;
  return s;
}

class Parser {
 public:
  // toks: tokenize()'s output, which always ends with the kEof token that
  // cur(), look() and next() stop at.
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {
    EMBER_CHECK(!toks_.empty() && toks_.back().type == Tok::kEof);
  }

  Body parse() {
    Body body = subparse({});
    return body;
  }

 private:
  std::vector<Token> toks_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;
  int nesting_ = 0;  // expression / block nesting, bounded to keep recursion safe

  static constexpr int kMaxNesting = 256;
  struct NestGuard {
    Parser* p;
    explicit NestGuard(Parser* parser) : p(parser) {
      if (++p->nesting_ > kMaxNesting) p->fail("template nesting too deep");
    }
    ~NestGuard() { --p->nesting_; }
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[i_ + 1 < toks_.size() ? i_ + 1 : i_]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& msg, int line = -1) {
    throw ParseError{line < 0 ? cur().line : line, msg};
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kData: return "template data";
      case Tok::kVarBegin: return "begin of print statement";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kBlockBegin: return "begin of statement block";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kName:
      case Tok::kOp:
      case Tok::kInt:
      case Tok::kFloat: return t.text;
      case Tok::kString: return "string";
      case Tok::kEof: return "end of template";
    }
    EMBER_CHECK_MSG(false, "describe: not a token type");
    return "token";
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(fmt::format("unexpected '{}', expected '{}'", describe(cur()), op));
  }
  void expect_name(const char* name) {
    if (!skip_name(name)) fail(fmt::format("unexpected '{}', expected '{}'", describe(cur()), name));
  }
  std::string expect_any_name() {
    if (cur().type != Tok::kName) fail(fmt::format("unexpected '{}', expected name", describe(cur())));
    return next().text;
  }
  void expect_type(Tok t) {
    if (cur().type == t) {
      next();
      return;
    }
    if (cur().type == Tok::kEof) {
      Token tmp;
      tmp.type = t;
      fail(fmt::format("unexpected end of template, expected '{}'.", describe(tmp)));
    }
    Token tmp;
    tmp.type = t;
    fail(fmt::format("unexpected '{}', expected '{}'", describe(cur()), describe(tmp)));
  }

  // Statements (parser.cpp).
  Body subparse(const std::vector<std::string>& end_tokens);
  // Parses "[:] %} body" up to one of end_tokens; leaves the end name current.
  Body parse_statements(std::initializer_list<const char*> ends, bool drop_needle);
  StmtPtr parse_statement(const std::vector<std::string>& outer_ends);
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  void parse_signature(Stmt& s);
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  // {% block name [scoped] [required] %}: without inheritance it renders in place.
  StmtPtr parse_block();
  // transformers' {% generation %} extension: renders its body unchanged.
  StmtPtr parse_generation();
  Target parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra_end);
  Target to_target(const Expr& e, int line);

  // Expressions (parser_expr.cpp).
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(const char* op, ExprPtr l, ExprPtr r, int line);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary(bool with_namespace);
  bool is_tuple_end(const std::vector<std::string>& extra_end) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parentheses, bool with_namespace = false);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  // Parses "(args)" into e (positional appended after the existing args).
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
};

}  // namespace ember::tmpl
