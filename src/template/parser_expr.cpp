// The expression grammar of the template parser (see parser_impl.h), by
// jinja2's precedence: conditional, or, and, not, comparisons, + -, ~,
// * / // %, **, unary, then primaries with their postfix subscripts, calls,
// filters and tests.
#include "template/parser_impl.h"

namespace ember::tmpl {

ExprPtr Parser::parse_expression(bool with_condexpr) {
  NestGuard guard(this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
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

ExprPtr Parser::binary(const char* op, ExprPtr l, ExprPtr r, int line) {
  auto e = make_expr(ExprKind::kBinary, line);
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) left = binary("or", std::move(left), parse_and(), line);
  return left;
}

ExprPtr Parser::parse_and() {
  int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) left = binary("and", std::move(left), parse_not(), line);
  return left;
}

ExprPtr Parser::parse_not() {
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

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_math1() {
  int line = cur().line;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = next().text;
    left = binary(op == "+" ? "+" : "-", std::move(left), parse_concat(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make_expr(ExprKind::kConcat, line);
  e->args.push_back(std::move(first));
  while (skip_op("~")) e->args.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
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

ExprPtr Parser::parse_pow() {
  int line = cur().line;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) {
    left = binary("**", std::move(left), parse_unary(true), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary(bool with_namespace) {
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

bool Parser::is_tuple_end(const std::vector<std::string>& extra_end) const {
  if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
  if (cur().type == Tok::kName) {
    for (const auto& e : extra_end) {
      if (cur().text == e) return true;
    }
  }
  return false;
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                            bool explicit_parentheses, bool with_namespace) {
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

ExprPtr Parser::parse_list() {
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

ExprPtr Parser::parse_dict() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else break;
  }
  return node;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) node = parse_filter(std::move(node), false);
    else if (is_name("is")) node = parse_test(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else break;
  }
  return node;
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
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

ExprPtr Parser::parse_subscribed() {
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
void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make_expr(ExprKind::kCall, cur().line);
  e->args.push_back(std::move(node));
  parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
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

ExprPtr Parser::parse_test(ExprPtr node) {
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

}  // namespace ember::tmpl
