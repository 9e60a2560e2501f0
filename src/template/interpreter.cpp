// Evaluator for chat templates (see interpreter.h): statements, expressions,
// scoping, loops, macros and resource limits. Filters, tests and object
// methods live in builtins.cpp.
#include "template/interpreter.h"

#include <algorithm>

#include "core/check.h"
#include "template/builtins.h"

namespace ember::tmpl {

namespace {
constexpr std::string_view kLinePrefix = "template error at line ";

Status errorf_line(int line, const std::string& msg) {
  return Status::errorf("{}{}: {}", kLinePrefix, line, msg);
}

const Value* lookup(const Scope* s, const std::string& name) {
  for (; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

// Binds positional/keyword arguments to a macro's parameters.
// The closure is weak so that a macro stored in the scope it captures does not
// keep that scope alive forever (no reference cycles).
struct MacroDef {
  const Stmt* stmt;
  std::weak_ptr<Scope> closure;
  std::string name;
  Value caller;  // set for call blocks that pass `caller`
};
}  // namespace

Status undefined_error(const Value& v) {
  const std::string& hint = v.undefined_hint();
  if (hint.empty()) return Status::error("UndefinedError: value is undefined");
  return Status::error(hint);
}

Status at_line(const Status& st, int line) {
  if (st.is_ok()) return st;
  if (st.message().rfind(kLinePrefix, 0) == 0 || st.message().rfind("template syntax error", 0) == 0) return st;
  return errorf_line(line, st.message());
}

// ---------------------------------------------------------------- rendering

Result<std::string> Interpreter::render(const Body& body, const Value& globals, const Value& context) {
  auto global_scope = std::make_shared<Scope>();
  if (globals.is_object()) {
    for (const auto& kv : globals.obj().items) {
      if (kv.first.is_string()) global_scope->vars[kv.first.str()] = kv.second;
    }
  }
  auto root = std::make_shared<Scope>();
  root->parent = global_scope;
  if (context.is_object()) {
    for (const auto& kv : context.obj().items) {
      if (kv.first.is_string()) root->vars[kv.first.str()] = kv.second;
    }
  }
  std::string out;
  out_ = &out;
  flow_ = Flow::kNormal;
  depth_ = 0;
  steps_ = 0;
  Status st = exec_body(body, root);
  out_ = nullptr;
  if (!st.is_ok()) return st;
  return out;
}

Status Interpreter::write(std::string_view text) {
  out_->append(text);
  if (out_->size() > limits_.max_output_bytes) {
    return Status::errorf("template output exceeds the limit of {} bytes", limits_.max_output_bytes);
  }
  return Status::ok();
}

Result<std::string> Interpreter::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  Status st = exec_body(body, scope);
  out_ = saved;
  if (!st.is_ok()) return st;
  return buf;
}

Status Interpreter::exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  for (const auto& s : body) {
    EMBER_RETURN_IF_ERROR(exec(*s, scope));
    if (flow_ != Flow::kNormal) return Status::ok();
  }
  return Status::ok();
}

Status Interpreter::exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  if (++steps_ > limits_.max_steps) return errorf_line(s.line, "template exceeded its execution step limit");
  switch (s.kind) {
    case StmtKind::kData: return write(s.text);
    case StmtKind::kPrint: {
      auto v = eval(*s.expr, scope);
      if (!v.is_ok()) return at_line(v.status(), s.line);
      return write(v->to_str());
    }
    case StmtKind::kIf: {
      for (size_t i = 0; i < s.conds.size(); ++i) {
        auto c = eval(*s.conds[i], scope);
        if (!c.is_ok()) return at_line(c.status(), s.conds[i]->line);
        if (c->truthy()) return exec_body(s.bodies[i], scope);
      }
      return exec_body(s.else_body, scope);
    }
    case StmtKind::kFor: return exec_for(s, scope);
    case StmtKind::kSet:
    case StmtKind::kSetBlock: return exec_set(s, scope);
    case StmtKind::kMacro: return exec_macro_def(s, scope);
    case StmtKind::kCallBlock: return exec_call_block(s, scope);
    case StmtKind::kFilterBlock: {
      auto text = capture(s.bodies[0], scope);
      if (!text.is_ok()) return text.status();
      auto v = apply_filter_chain(s.filter.get(), Value(std::move(text.value())), scope, s.line);
      if (!v.is_ok()) return v.status();
      return write(v->to_str());
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < s.params.size(); ++i) {
        auto v = eval(*s.defaults[i], scope);
        if (!v.is_ok()) return at_line(v.status(), s.line);
        inner->vars[s.params[i]] = std::move(v.value());
      }
      return exec_body(s.bodies[0], inner);
    }
    case StmtKind::kBreak: flow_ = Flow::kBreak; return Status::ok();
    case StmtKind::kContinue: flow_ = Flow::kContinue; return Status::ok();
  }
  EMBER_CHECK_MSG(false, "Interpreter::exec: not a statement kind");
  return Status::ok();
}

Status Interpreter::assign(const Target& t, Value v, Scope& scope, int line) {
  switch (t.kind) {
    case Target::Kind::kName: scope.vars[t.name] = std::move(v); return Status::ok();
    case Target::Kind::kNsAttr: {
      const Value* ns = lookup(&scope, t.name);
      if (!ns || !ns->is_namespace()) {
        return errorf_line(line, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
      }
      if (!t.attr.empty() && t.attr[0] == '_') {
        return errorf_line(line, fmt::format("SecurityError: Chat templates cannot store underscore-prefixed "
                                             "attributes on a namespace, but got '{}'.", t.attr));
      }
      ns->obj().set(t.attr, std::move(v));
      return Status::ok();
    }
    case Target::Kind::kTuple: {
      auto items = iterate(v);
      if (!items.is_ok()) return at_line(items.status(), line);
      if (items->size() != t.elements.size()) {
        return errorf_line(line, items->size() > t.elements.size()
                                     ? fmt::format("ValueError: too many values to unpack (expected {})",
                                                   t.elements.size())
                                     : fmt::format("ValueError: not enough values to unpack (expected {}, got {})",
                                                   t.elements.size(), items->size()));
      }
      for (size_t i = 0; i < t.elements.size(); ++i) {
        EMBER_RETURN_IF_ERROR(assign(t.elements[i], (*items)[i], scope, line));
      }
      return Status::ok();
    }
  }
  EMBER_CHECK_MSG(false, "Interpreter::assign: not a target kind");
  return Status::ok();
}

Status Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value v;
  if (s.kind == StmtKind::kSet) {
    auto r = eval(*s.expr, scope);
    if (!r.is_ok()) return at_line(r.status(), s.line);
    v = std::move(r.value());
  } else {
    auto text = capture(s.bodies[0], scope);
    if (!text.is_ok()) return text.status();
    auto filtered = apply_filter_chain(s.filter.get(), Value(std::move(text.value())), scope, s.line);
    if (!filtered.is_ok()) return filtered.status();
    v = std::move(filtered.value());
  }
  return assign(s.target, std::move(v), *scope, s.line);
}

Result<Value> Interpreter::apply_filter_chain(const Expr* filter, Value v, const std::shared_ptr<Scope>& scope,
                                              int line) {
  // The chain is nested with the outermost filter first: apply innermost-first.
  std::vector<const Expr*> chain;
  for (const Expr* e = filter; e; e = e->args[0].get()) chain.push_back(e);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    CallArgs args;
    EMBER_RETURN_IF_ERROR(at_line(eval_call_args(**it, 1, scope, args), line));
    auto r = apply_filter(*this, (*it)->name, v, args);
    if (!r.is_ok()) return at_line(r.status(), line);
    v = std::move(r.value());
  }
  return v;
}

Status Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  auto iterable = eval(*s.expr, scope);
  if (!iterable.is_ok()) return at_line(iterable.status(), s.line);
  auto items_r = iterate(*iterable);
  if (!items_r.is_ok()) return at_line(items_r.status(), s.line);
  std::vector<Value> items = std::move(items_r.value());

  if (s.cond) {  // {% for x in y if cond %}: filter before counting
    std::vector<Value> kept;
    for (auto& item : items) {
      if (++steps_ > limits_.max_steps) return errorf_line(s.line, "template exceeded its execution step limit");
      auto iter_scope = std::make_shared<Scope>();
      iter_scope->parent = scope;
      EMBER_RETURN_IF_ERROR(assign(s.target, item, *iter_scope, s.line));
      auto c = eval(*s.cond, iter_scope);
      if (!c.is_ok()) return at_line(c.status(), s.line);
      if (c->truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }

  if (items.empty()) return exec_body(s.else_body, scope);

  const int64_t n = static_cast<int64_t>(items.size());
  // State shared by loop.cycle / loop.changed.
  auto state = std::make_shared<std::pair<int64_t, Value>>(0, Value::undefined());
  Value cycle = Value::function("cycle", [state](Interpreter&, CallArgs& a) -> Result<Value> {
    if (a.pos.empty()) return Status::error("TypeError: no items for cycling given");
    return a.pos[static_cast<size_t>(state->first % static_cast<int64_t>(a.pos.size()))];
  });
  Value changed = Value::function("changed", [state](Interpreter&, CallArgs& a) -> Result<Value> {
    Value cur = Value::array(a.pos);
    if (state->second.is_undefined() || !values_equal(state->second, cur)) {
      state->second = cur;
      return Value(true);
    }
    return Value(false);
  });

  for (int64_t i = 0; i < n; ++i) {
    if (++steps_ > limits_.max_steps) return errorf_line(s.line, "template exceeded its execution step limit");
    state->first = i;
    auto iter_scope = std::make_shared<Scope>();
    iter_scope->parent = scope;
    Value loop = Value::object();
    ObjectData& lo = loop.obj();
    lo.set("index", Value(i + 1));
    lo.set("index0", Value(i));
    lo.set("revindex", Value(n - i));
    lo.set("revindex0", Value(n - i - 1));
    lo.set("first", Value(i == 0));
    lo.set("last", Value(i == n - 1));
    lo.set("length", Value(n));
    lo.set("depth", Value(1));
    lo.set("depth0", Value(0));
    lo.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                             : Value::undefined("UndefinedError: there is no previous item"));
    lo.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                 : Value::undefined("UndefinedError: there is no next item"));
    lo.set("cycle", cycle);
    lo.set("changed", changed);
    iter_scope->vars["loop"] = std::move(loop);
    EMBER_RETURN_IF_ERROR(assign(s.target, items[static_cast<size_t>(i)], *iter_scope, s.line));
    EMBER_RETURN_IF_ERROR(exec_body(s.bodies[0], iter_scope));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::ok();
}

// ---------------------------------------------------------------- macros

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, const std::string& name) {
  auto def = std::make_shared<MacroDef>(MacroDef{&s, scope, name, Value::undefined()});
  return Value::function(name, [def](Interpreter& in, CallArgs& a) -> Result<Value> {
    const Stmt& m = *def->stmt;
    if (in.depth_ >= in.limits_.max_call_depth) {
      return Status::errorf("RecursionError: maximum macro call depth ({}) exceeded", in.limits_.max_call_depth);
    }
    auto local = std::make_shared<Scope>();
    local->parent = def->closure.lock();
    if (!local->parent) return Status::errorf("TemplateRuntimeError: macro '{}' called outside its scope", def->name);
    const size_t np = m.params.size();
    if (a.pos.size() > np && !m.uses_varargs) {
      return Status::errorf("TypeError: macro '{}' takes not more than {} argument(s)", def->name, np);
    }
    std::vector<bool> bound(np, false);
    for (size_t i = 0; i < np && i < a.pos.size(); ++i) {
      local->vars[m.params[i]] = a.pos[i];
      bound[i] = true;
    }
    Value kwargs = Value::object();
    Value caller = def->caller;
    for (auto& kv : a.kw) {
      auto it = std::find(m.params.begin(), m.params.end(), kv.first);
      if (it != m.params.end()) {
        size_t idx = static_cast<size_t>(it - m.params.begin());
        if (bound[idx]) return Status::errorf("TypeError: macro '{}' got multiple values for argument '{}'",
                                              def->name, kv.first);
        local->vars[kv.first] = kv.second;
        bound[idx] = true;
      } else if (kv.first == "caller" && m.uses_caller) {
        caller = kv.second;
      } else if (m.uses_kwargs) {
        kwargs.obj().set(kv.first, kv.second);
      } else {
        return Status::errorf("TypeError: macro '{}' takes no keyword argument '{}'", def->name, kv.first);
      }
    }
    const size_t first_default = np - m.defaults.size();
    for (size_t i = 0; i < np; ++i) {
      if (bound[i]) continue;
      if (i >= first_default) {
        auto v = in.eval(*m.defaults[i - first_default], local);
        if (!v.is_ok()) return v.status();
        local->vars[m.params[i]] = std::move(v.value());
      } else {
        local->vars[m.params[i]] =
            Value::undefined(fmt::format("UndefinedError: parameter '{}' was not provided", m.params[i]));
      }
    }
    if (m.uses_varargs) {
      std::vector<Value> extra;
      for (size_t i = np; i < a.pos.size(); ++i) extra.push_back(a.pos[i]);
      local->vars["varargs"] = Value::array(std::move(extra), true);
    }
    if (m.uses_kwargs) local->vars["kwargs"] = kwargs;
    if (m.uses_caller) local->vars["caller"] = caller;
    ++in.depth_;
    Flow saved_flow = in.flow_;
    in.flow_ = Flow::kNormal;
    auto text = in.capture(m.bodies[0], local);
    in.flow_ = saved_flow;
    --in.depth_;
    if (!text.is_ok()) return text.status();
    return Value(std::move(text.value()));
  });
}

Status Interpreter::exec_macro_def(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  scope->vars[s.text] = make_macro(s, scope, s.text);
  return Status::ok();
}

Status Interpreter::exec_call_block(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value caller = make_macro(s, scope, "caller");
  const Expr& call = *s.expr;
  auto fn = eval(*call.args[0], scope);
  if (!fn.is_ok()) return at_line(fn.status(), s.line);
  CallArgs args;
  EMBER_RETURN_IF_ERROR(at_line(eval_call_args(call, 1, scope, args), s.line));
  args.kw.emplace_back("caller", caller);
  auto r = call_value(*fn, args);
  if (!r.is_ok()) return at_line(r.status(), s.line);
  return write(r->to_str());
}

Result<Value> Interpreter::call_value(const Value& fn, CallArgs& args) {
  if (fn.is_function()) return fn.fn().fn(*this, args);
  if (fn.is_undefined()) return undefined_error(fn);
  return Status::errorf("TypeError: '{}' object is not callable", fn.type_name());
}

// ---------------------------------------------------------------- expressions

Status Interpreter::eval_call_args(const Expr& e, size_t first_arg, const std::shared_ptr<Scope>& scope,
                                   CallArgs& out) {
  for (size_t i = first_arg; i < e.args.size(); ++i) {
    auto v = eval(*e.args[i], scope);
    if (!v.is_ok()) return v.status();
    out.pos.push_back(std::move(v.value()));
  }
  for (const auto& kv : e.kwargs) {
    auto v = eval(*kv.second, scope);
    if (!v.is_ok()) return v.status();
    out.kw.emplace_back(kv.first, std::move(v.value()));
  }
  if (e.dyn_args) {
    auto v = eval(*e.dyn_args, scope);
    if (!v.is_ok()) return v.status();
    auto items = iterate(*v);
    if (!items.is_ok()) return items.status();
    for (auto& it : *items) out.pos.push_back(std::move(it));
  }
  if (e.dyn_kwargs) {
    auto v = eval(*e.dyn_kwargs, scope);
    if (!v.is_ok()) return v.status();
    if (!v->is_object()) return Status::error("TypeError: argument after ** must be a mapping");
    for (const auto& kv : v->obj().items) out.kw.emplace_back(kv.first.to_str(), kv.second);
  }
  return Status::ok();
}

Result<Value> Interpreter::eval_call(const Expr& e, const std::shared_ptr<Scope>& scope) {
  auto fn = eval(*e.args[0], scope);
  if (!fn.is_ok()) return fn;
  CallArgs args;
  EMBER_RETURN_IF_ERROR(eval_call_args(e, 1, scope, args));
  auto r = call_value(*fn, args);
  if (!r.is_ok()) return at_line(r.status(), e.line);
  return r;
}

Result<Value> Interpreter::eval_getitem(const Expr& e, const std::shared_ptr<Scope>& scope) {
  auto obj = eval(*e.args[0], scope);
  if (!obj.is_ok()) return obj;
  if (obj->is_undefined()) return undefined_error(*obj);
  const Expr& key_expr = *e.args[1];
  if (key_expr.kind == ExprKind::kSlice) {
    int64_t parts[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!key_expr.args[static_cast<size_t>(k)]) continue;
      auto v = eval(*key_expr.args[static_cast<size_t>(k)], scope);
      if (!v.is_ok()) return v;
      if (v->is_none()) continue;
      if (!v->is_int() && !v->is_bool()) {
        return Status::error("TypeError: slice indices must be integers or None");
      }
      parts[k] = v->as_int();
      given[k] = true;
    }
    if (parts[2] == 0) return Status::error("ValueError: slice step cannot be zero");
    const bool is_str = obj->is_string();
    if (!is_str && !obj->is_array()) return Value::undefined("UndefinedError: object is not subscriptable");
    std::u32string cps;
    if (is_str) cps = utf8_decode(obj->str());
    const int64_t len = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj->arr().items.size());
    const int64_t step = parts[2];
    auto clamp = [&](int64_t v, bool g, int64_t dflt) {
      if (!g) return dflt;
      if (v < 0) v += len;
      if (step > 0) return std::clamp<int64_t>(v, 0, len);
      return std::clamp<int64_t>(v, -1, len - 1);
    };
    int64_t start = clamp(parts[0], given[0], step > 0 ? 0 : len - 1);
    int64_t stop = clamp(parts[1], given[1], step > 0 ? len : -1);
    if (is_str) {
      std::u32string res;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) res += cps[static_cast<size_t>(i)];
      return Value(utf8_encode(res));
    }
    std::vector<Value> res;
    const auto& items = obj->arr().items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) res.push_back(items[static_cast<size_t>(i)]);
    return Value::array(std::move(res), obj->is_tuple());
  }
  auto key = eval(key_expr, scope);
  if (!key.is_ok()) return key;
  const Value& o = *obj;
  const Value& k = *key;
  if ((o.is_array() || o.is_string()) && (k.is_int() || k.is_bool())) {
    int64_t idx = k.as_int();
    if (o.is_array()) {
      const auto& items = o.arr().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (idx < 0) idx += n;
      if (idx < 0 || idx >= n) return Value::undefined("UndefinedError: list object has no element " +
                                                      std::to_string(k.as_int()));
      return items[static_cast<size_t>(idx)];
    }
    std::u32string cps = utf8_decode(o.str());
    int64_t n = static_cast<int64_t>(cps.size());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) return Value::undefined("UndefinedError: str object has no element " +
                                                    std::to_string(k.as_int()));
    return Value(utf8_encode(cps.substr(static_cast<size_t>(idx), 1)));
  }
  if (o.is_object() || o.is_namespace()) {
    if (const Value* v = o.obj().find(k)) return *v;
  }
  if (k.is_string()) return get_attribute(o, k.str());
  return Value::undefined(fmt::format("UndefinedError: '{}' object has no attribute {}", o.type_name(), k.repr()));
}

Result<Value> Interpreter::eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  auto left = eval(*e.args[0], scope);
  if (!left.is_ok()) return left;
  Value a = std::move(left.value());
  for (size_t i = 0; i < e.ops.size(); ++i) {
    auto right = eval(*e.args[i + 1], scope);
    if (!right.is_ok()) return right;
    const Value& b = *right;
    const std::string& op = e.ops[i];
    bool r = false;
    if (op == "==") {
      r = values_equal(a, b);
    } else if (op == "!=") {
      r = !values_equal(a, b);
    } else if (op == "in" || op == "notin") {
      CallArgs args;
      args.pos.push_back(b);
      auto t = apply_test(*this, "in", a, args);
      if (!t.is_ok()) return t.status();
      r = op == "in" ? *t : !*t;
    } else {
      if (a.is_undefined()) return undefined_error(a);
      if (b.is_undefined()) return undefined_error(b);
      Result<bool> lt = (op == "<" || op == ">=") ? values_less(a, b) : values_less(b, a);
      if (!lt.is_ok()) {
        return Status::errorf("TypeError: '{}' not supported between instances of '{}' and '{}'", op,
                              a.type_name(), b.type_name());
      }
      if (op == "<" || op == ">") r = *lt;
      else r = !*lt;  // <= is !(b < a); >= is !(a < b)
    }
    if (!r) return Value(false);
    a = b;
  }
  return Value(true);
}

Result<Value> Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: {
      if (const Value* v = lookup(scope.get(), e.name)) return *v;
      return Value::undefined(fmt::format("UndefinedError: '{}' is undefined", e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) {
        auto v = eval(*a, scope);
        if (!v.is_ok()) return v;
        items.push_back(std::move(v.value()));
      }
      return Value::array(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Value d = Value::object();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        auto k = eval(*e.args[i], scope);
        if (!k.is_ok()) return k;
        auto v = eval(*e.args[i + 1], scope);
        if (!v.is_ok()) return v;
        if (k->is_array() && !k->is_tuple()) return Status::error("TypeError: unhashable type: 'list'");
        if (k->is_object()) return Status::error("TypeError: unhashable type: 'dict'");
        d.obj().set(*k, std::move(v.value()));
      }
      return d;
    }
    case ExprKind::kGetAttr: {
      auto obj = eval(*e.args[0], scope);
      if (!obj.is_ok()) return obj;
      if (obj->is_undefined()) return at_line(undefined_error(*obj), e.line);
      return get_attribute(*obj, e.name);
    }
    case ExprKind::kGetItem: {
      auto r = eval_getitem(e, scope);
      if (!r.is_ok()) return at_line(r.status(), e.line);
      return r;
    }
    case ExprKind::kSlice: return Status::error("SyntaxError: slice outside of subscript");
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: {
      auto input = eval(*e.args[0], scope);
      if (!input.is_ok()) return input;
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(e, 1, scope, args));
      auto r = apply_filter(*this, e.name, *input, args);
      if (!r.is_ok()) return at_line(r.status(), e.line);
      return r;
    }
    case ExprKind::kTest: {
      auto input = eval(*e.args[0], scope);
      if (!input.is_ok()) return input;
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(e, 1, scope, args));
      auto r = apply_test(*this, e.name, *input, args);
      if (!r.is_ok()) return at_line(r.status(), e.line);
      return Value(*r);
    }
    case ExprKind::kUnary: {
      auto v = eval(*e.args[0], scope);
      if (!v.is_ok()) return v;
      if (e.name == "not") return Value(!v->truthy());
      if (v->is_undefined()) return at_line(undefined_error(*v), e.line);
      if (!v->is_number()) {
        return at_line(Status::errorf("TypeError: bad operand type for unary {}: '{}'", e.name, v->type_name()),
                       e.line);
      }
      if (e.name == "+") return v->is_float() ? *v : Value(v->as_int());
      if (v->is_float()) return Value(-v->as_double());
      if (v->as_int() == INT64_MIN) return at_line(Status::error("OverflowError: integer overflow"), e.line);
      return Value(-v->as_int());
    }
    case ExprKind::kBinary: {
      auto a = eval(*e.args[0], scope);
      if (!a.is_ok()) return a;
      if (e.name == "and") return a->truthy() ? eval(*e.args[1], scope) : a;
      if (e.name == "or") return a->truthy() ? a : eval(*e.args[1], scope);
      auto b = eval(*e.args[1], scope);
      if (!b.is_ok()) return b;
      auto r = binary_op(e.name, *a, *b);
      if (!r.is_ok()) return at_line(r.status(), e.line);
      return r;
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& a : e.args) {
        auto v = eval(*a, scope);
        if (!v.is_ok()) return v;
        s += v->to_str();
        if (s.size() > limits_.max_output_bytes) return Status::error("string exceeds the output limit");
      }
      return Value(std::move(s));
    }
    case ExprKind::kCompare: {
      auto r = eval_compare(e, scope);
      if (!r.is_ok()) return at_line(r.status(), e.line);
      return r;
    }
    case ExprKind::kCondExpr: {
      auto t = eval(*e.args[0], scope);
      if (!t.is_ok()) return t;
      if (t->truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("UndefinedError: the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  EMBER_CHECK_MSG(false, "Interpreter::eval: not an expression kind");
  return Value::undefined();
}

}  // namespace ember::tmpl
