// Recursive-descent parser for the Jinja2 language (see parser.h): the
// statements and tags, the macro signature scan, and parse_template. The
// expression grammar is in parser_expr.cpp, the Parser class in parser_impl.h.
#include "template/parser.h"

#include "template/parser_impl.h"

namespace ember::tmpl {

namespace {

// Marks the names a macro body uses (varargs, kwargs, caller).
void scan_expr(const Expr* e, Stmt& m) {
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

void scan_body(const Body& body, Stmt& m) {
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

void scan_macro_names(Stmt& m) {
  for (const auto& b : m.bodies) scan_body(b, m);
}

}  // namespace

Body Parser::subparse(const std::vector<std::string>& end_tokens) {
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
      // Every statement and print consumes its tag up to the closing token,
      // and the lexer emits tag tokens only between the two.
      EMBER_CHECK_MSG(false, "subparse: a tag token outside a tag");
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
Body Parser::parse_statements(std::initializer_list<const char*> ends, bool drop_needle) {
  skip_op(":");
  expect_type(Tok::kBlockEnd);
  std::vector<std::string> end_tokens(ends.begin(), ends.end());
  Body body = subparse(end_tokens);
  if (drop_needle) next();
  return body;
}

StmtPtr Parser::parse_statement(const std::vector<std::string>& outer_ends) {
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

StmtPtr Parser::parse_for() {
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

StmtPtr Parser::parse_if() {
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

StmtPtr Parser::parse_set() {
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

void Parser::parse_signature(Stmt& s) {
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

StmtPtr Parser::parse_macro() {
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

StmtPtr Parser::parse_call_block() {
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

StmtPtr Parser::parse_filter_block() {
  int line = next().line;
  auto s = make_stmt(StmtKind::kFilterBlock, line);
  s->filter = parse_filter(nullptr, true);
  s->bodies.push_back(parse_statements({"endfilter"}, true));
  return s;
}

StmtPtr Parser::parse_with() {
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
StmtPtr Parser::parse_block() {
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
StmtPtr Parser::parse_generation() {
  int line = next().line;
  auto s = make_stmt(StmtKind::kWith, line);
  s->bodies.push_back(parse_statements({"endgeneration"}, true));
  return s;
}

Target Parser::parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra_end) {
  int line = cur().line;
  ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace)
                         : parse_primary(with_namespace);
  return to_target(*e, line);
}

Target Parser::to_target(const Expr& e, int line) {
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
