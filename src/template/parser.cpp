// Recursive-descent parser for the Jinja2 language (see parser.h). Method
// names follow jinja2's Parser so the grammar can be checked side by side.
#include "template/parser.h"

#include <initializer_list>

#include "template/lexer.h"

namespace ember::tmpl {
namespace {

// Parse errors are carried in this exception internally and converted to a
// Status at the API boundary (parse_template never throws).
struct ParseError {
  int line;
  std::string msg;
};

ExprPtr make_expr(ExprKind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

StmtPtr make_stmt(StmtKind k, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = k;
  s->line = line;
  return s;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

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

  // ------------------------------------------------------------ statements

  Body subparse(const std::vector<std::string>& end_tokens) {
    NestGuard guard(this);
    Body body;
    while (cur().type != Tok::kEof) {
      const Token& t = cur();
      if (t.type == Tok::kData) {
        auto s = make_stmt(StmtKind::kData, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::kVarBegin) {
        int line = t.line;
        next();
        auto s = make_stmt(StmtKind::kPrint, line);
        s->expr = parse_tuple(false, true, {}, false);
        expect_type(Tok::kVarEnd);
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        if (cur().type == Tok::kName) {
          for (const auto& e : end_tokens) {
            if (cur().text == e) return body;
          }
        }
        body.push_back(parse_statement(end_tokens));
        expect_type(Tok::kBlockEnd);
      } else {
        fail("internal parsing error");
      }
    }
    if (!end_tokens.empty()) {
      std::string looking;
      for (size_t k = 0; k < end_tokens.size(); ++k) {
        looking += (k ? " or '" : "'") + end_tokens[k] + "'";
      }
      fail(fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}. "
                       "The innermost block that needs to be closed is '{}'.",
                       looking, tag_stack_.empty() ? "" : tag_stack_.back()));
    }
    return body;
  }

  // Parses "[:] %} body" up to one of end_tokens; leaves the end name current.
  Body parse_statements(std::initializer_list<const char*> ends, bool drop_needle) {
    skip_op(":");
    expect_type(Tok::kBlockEnd);
    std::vector<std::string> end_tokens(ends.begin(), ends.end());
    Body body = subparse(end_tokens);
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement(const std::vector<std::string>& outer_ends) {
    const Token& t = cur();
    if (t.type != Tok::kName) fail("tag name expected");
    std::string tag = t.text;
    int line = t.line;
    tag_stack_.push_back(tag);
    StmtPtr s;
    if (tag == "for") s = parse_for();
    else if (tag == "if") s = parse_if();
    else if (tag == "set") s = parse_set();
    else if (tag == "macro") s = parse_macro();
    else if (tag == "call") s = parse_call_block();
    else if (tag == "filter") s = parse_filter_block();
    else if (tag == "with") s = parse_with();
    else if (tag == "generation") s = parse_generation();
    else if (tag == "block") s = parse_block();
    else if (tag == "break" || tag == "continue") {
      next();
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside loop", tag), line);
      s = make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    } else {
      tag_stack_.pop_back();
      std::string msg = fmt::format("Encountered unknown tag '{}'.", tag);
      if (!outer_ends.empty()) {
        std::string looking;
        for (size_t k = 0; k < outer_ends.size(); ++k) looking += (k ? " or '" : "'") + outer_ends[k] + "'";
        msg += fmt::format(" Jinja was looking for the following tags: {}.", looking);
        if (!tag_stack_.empty()) {
          msg += fmt::format(" The innermost block that needs to be closed is '{}'.", tag_stack_.back());
        }
      }
      fail(msg, line);
    }
    tag_stack_.pop_back();
    return s;
  }

  StmtPtr parse_for() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kFor, line);
    s->target = parse_assign_target(true, false, {"in"});
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->bodies.push_back(parse_statements({"endfor", "else"}, false));
    --loop_depth_;
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kIf, line);
    while (true) {
      s->conds.push_back(parse_tuple(false, false, {}, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      const Token& t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    int line = next().line;
    Target target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      auto s = make_stmt(StmtKind::kSet, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = make_stmt(StmtKind::kSetBlock, line);
    s->target = std::move(target);
    s->filter = parse_filter(nullptr, false);
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      s.params.push_back(expect_any_name());
      if (skip_op("=")) {
        s.defaults.push_back(parse_expression(true));
      } else if (!s.defaults.empty()) {
        fail("non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kMacro, line);
    s->text = expect_any_name();
    parse_signature(*s);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_statements({"endmacro"}, true));
    loop_depth_ = saved;
    scan_macro_names(*s);
    return s;
  }

  StmtPtr parse_call_block() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kCallBlock, line);
    if (is_op("(")) parse_signature(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected call", line);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_statements({"endcall"}, true));
    loop_depth_ = saved;
    scan_macro_names(*s);
    return s;
  }

  StmtPtr parse_filter_block() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kFilterBlock, line);
    s->filter = parse_filter(nullptr, true);
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }

  StmtPtr parse_with() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kWith, line);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_any_name());
      expect_op("=");
      s->defaults.push_back(parse_expression(true));
    }
    s->bodies.push_back(parse_statements({"endwith"}, true));
    return s;
  }

  // {% block name [scoped] [required] %}: without inheritance it renders in place.
  StmtPtr parse_block() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kWith, line);
    std::string name = expect_any_name();
    skip_name("scoped");
    skip_name("required");
    s->bodies.push_back(parse_statements({"endblock"}, true));
    skip_name(name.c_str());
    return s;
  }

  // transformers' {% generation %} extension: renders its body unchanged.
  StmtPtr parse_generation() {
    int line = next().line;
    auto s = make_stmt(StmtKind::kWith, line);
    s->bodies.push_back(parse_statements({"endgeneration"}, true));
    return s;
  }

  Target parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra_end) {
    int line = cur().line;
    ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace)
                           : parse_primary(with_namespace);
    return to_target(*e, line);
  }

  Target to_target(const Expr& e, int line) {
    Target t;
    if (e.kind == ExprKind::kName) {
      t.kind = Target::Kind::kName;
      t.name = e.name;
      if (t.name == "true" || t.name == "false" || t.name == "none") fail("can't assign to 'const'", line);
    } else if (e.kind == ExprKind::kGetAttr && e.args[0]->kind == ExprKind::kName && e.value.is_bool()) {
      t.kind = Target::Kind::kNsAttr;  // namespace reference (marked by parse_primary)
      t.name = e.args[0]->name;
      t.attr = e.name;
    } else if (e.kind == ExprKind::kTuple) {
      t.kind = Target::Kind::kTuple;
      for (const auto& el : e.args) t.elements.push_back(to_target(*el, line));
    } else {
      fail(fmt::format("can't assign to '{}'", e.kind == ExprKind::kConst ? "const" : "expression"), line);
    }
    return t;
  }

  // ------------------------------------------------------------ expressions

  ExprPtr parse_expression(bool with_condexpr) {
    NestGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      auto e = make_expr(ExprKind::kCondExpr, line);
      ExprPtr test = parse_or();
      ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
      e->args.push_back(std::move(test));
      e->args.push_back(std::move(expr1));
      e->args.push_back(std::move(expr3));
      expr1 = std::move(e);
      line = cur().line;
    }
    return expr1;
  }

  ExprPtr binary(const char* op, ExprPtr l, ExprPtr r, int line) {
    auto e = make_expr(ExprKind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary("or", std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary("and", std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    NestGuard guard(this);
    if (is_name("not")) {
      int line = next().line;
      auto e = make_expr(ExprKind::kUnary, line);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && look().type == Tok::kName && look().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().text;
      left = binary(op == "+" ? "+" : "-", std::move(left), parse_concat(), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make_expr(ExprKind::kConcat, line);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().text;
      auto e = make_expr(ExprKind::kBinary, line);
      e->name = op;
      e->args.push_back(std::move(left));
      e->args.push_back(parse_pow());
      left = std::move(e);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      left = binary("**", std::move(left), parse_unary(true), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    NestGuard guard(this);
    int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      std::string op = next().text;
      node = make_expr(ExprKind::kUnary, line);
      node->name = op;
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    const Token& t = cur();
    int line = t.line;
    if (t.type == Tok::kName) {
      std::string name = next().text;
      if (name == "true" || name == "True" || name == "false" || name == "False") {
        auto e = make_expr(ExprKind::kConst, line);
        e->value = Value(name == "true" || name == "True");
        return e;
      }
      if (name == "none" || name == "None") {
        auto e = make_expr(ExprKind::kConst, line);
        e->value = Value(nullptr);
        return e;
      }
      auto e = make_expr(ExprKind::kName, line);
      e->name = name;
      if (with_namespace && is_op(".")) {
        next();
        auto ref = make_expr(ExprKind::kGetAttr, line);
        ref->name = expect_any_name();
        ref->value = Value(true);  // marks a namespace reference
        ref->args.push_back(std::move(e));
        return ref;
      }
      return e;
    }
    if (t.type == Tok::kString) {
      std::string buf;
      while (cur().type == Tok::kString) buf += next().text;
      auto e = make_expr(ExprKind::kConst, line);
      e->value = Value(std::move(buf));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto e = make_expr(ExprKind::kConst, line);
      e->value = t.type == Tok::kInt ? Value(t.ival) : Value(t.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    if (t.type == Tok::kEof) fail("unexpected end of template");
    fail(fmt::format("unexpected '{}'", describe(t)));
  }

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
    if (cur().type == Tok::kName) {
      for (const auto& e : extra_end) {
        if (cur().text == e) return true;
      }
    }
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parentheses, bool with_namespace = false) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
      line = cur().line;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) {
        fail(fmt::format("Expected an expression, got '{}'", describe(cur())));
      }
    }
    auto e = make_expr(ExprKind::kTuple, line);
    e->args = std::move(args);
    return e;
  }

  ExprPtr parse_list() {
    int line = next().line;
    auto e = make_expr(ExprKind::kList, line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    int line = next().line;
    auto e = make_expr(ExprKind::kDict, line);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    int line = t.line;
    if (t.text == ".") {
      const Token& a = next();
      if (a.type == Tok::kName) {
        auto e = make_expr(ExprKind::kGetAttr, line);
        e->name = a.text;
        e->args.push_back(std::move(node));
        return e;
      }
      if (a.type != Tok::kInt) fail("expected name or number", a.line);
      auto e = make_expr(ExprKind::kGetItem, line);
      auto k = make_expr(ExprKind::kConst, a.line);
      k->value = Value(a.ival);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(k));
      return e;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make_expr(ExprKind::kGetItem, line);
    e->args.push_back(std::move(node));
    if (args.size() == 1) {
      e->args.push_back(std::move(args[0]));
    } else {
      auto tup = make_expr(ExprKind::kTuple, line);
      tup->args = std::move(args);
      e->args.push_back(std::move(tup));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    if (is_op(":")) {
      next();
      args.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(":")) return node;
      next();
      args.push_back(std::move(node));
    }
    if (is_op(":")) args.push_back(nullptr);
    else if (!is_op("]") && !is_op(",")) args.push_back(parse_expression(true));
    else args.push_back(nullptr);
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(",")) args.push_back(parse_expression(true));
      else args.push_back(nullptr);
    } else {
      args.push_back(nullptr);
    }
    auto e = make_expr(ExprKind::kSlice, line);
    e->args = std::move(args);
    return e;
  }

  // Parses "(args)" into e (positional appended after the existing args).
  void parse_call_args(Expr& e) {
    int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", line);
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!e.dyn_args && !e.dyn_kwargs);
        next();
        e.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!e.dyn_kwargs);
        next();
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && look().type == Tok::kOp && look().text == "=") {
        ensure(!e.dyn_kwargs);
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
        e.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make_expr(ExprKind::kCall, cur().line);
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      int line = cur().line;
      std::string name = expect_any_name();
      while (skip_op(".")) name += "." + expect_any_name();
      auto e = make_expr(ExprKind::kFilter, line);
      e->name = std::move(name);
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = next().line;
    bool negated = skip_name("not");
    std::string name = expect_any_name();
    while (skip_op(".")) name += "." + expect_any_name();
    auto e = make_expr(ExprKind::kTest, line);
    e->name = std::move(name);
    e->args.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat ||
                is_op("[") || is_op("{")) &&
               !(t.type == Tok::kName && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary(false)));
    }
    if (!negated) return e;
    auto n = make_expr(ExprKind::kUnary, line);
    n->name = "not";
    n->args.push_back(std::move(e));
    return n;
  }

  // ------------------------------------------------------------ macro scan

  static void scan_expr(const Expr* e, Stmt& m) {
    if (!e) return;
    if (e->kind == ExprKind::kName) {
      if (e->name == "varargs") m.uses_varargs = true;
      if (e->name == "kwargs") m.uses_kwargs = true;
      if (e->name == "caller") m.uses_caller = true;
    }
    for (const auto& a : e->args) scan_expr(a.get(), m);
    for (const auto& kv : e->kwargs) scan_expr(kv.second.get(), m);
    scan_expr(e->dyn_args.get(), m);
    scan_expr(e->dyn_kwargs.get(), m);
  }

  static void scan_body(const Body& body, Stmt& m) {
    for (const auto& s : body) {
      if (s->kind == StmtKind::kMacro) continue;  // nested macros have their own signature
      scan_expr(s->expr.get(), m);
      scan_expr(s->cond.get(), m);
      scan_expr(s->filter.get(), m);
      for (const auto& c : s->conds) scan_expr(c.get(), m);
      for (const auto& d : s->defaults) scan_expr(d.get(), m);
      for (const auto& b : s->bodies) scan_body(b, m);
      scan_body(s->else_body, m);
    }
  }

  static void scan_macro_names(Stmt& m) {
    for (const auto& b : m.bodies) scan_body(b, m);
  }
};

}  // namespace

Result<Body> parse_template(std::string_view source) {
  auto toks = tokenize(source);
  if (!toks.is_ok()) return toks.status();
  try {
    Parser p(std::move(toks.value()));
    return p.parse();
  } catch (const ParseError& e) {
    return Status::errorf("template syntax error at line {}: {}", e.line, e.msg);
  }
}

}  // namespace ember::tmpl
