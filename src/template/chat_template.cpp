// Template parsing/validation, rendering with the transformers globals, and
// apply_chat_template's input normalisation (see chat_template.h).
#include "template/chat_template.h"

#include "template/builtins.h"
#include "template/parser.h"

namespace ember::tmpl {
namespace {

// jinja2 resolves filters and tests at compile time: an unknown name is an
// error even when it never runs, except directly inside an {% if %} or a
// conditional expression ("soft" frames), where the error is deferred to run
// time. Loop, macro and block bodies start a new, non-soft frame.
Status validate_expr(const Expr* e, bool soft) {
  if (!e) return Status::ok();
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !has_filter(e->name)) {
    return Status::errorf("template syntax error at line {}: No filter named '{}'.", e->line, e->name);
  }
  if (!soft && e->kind == ExprKind::kTest && !has_test(e->name)) {
    return Status::errorf("template syntax error at line {}: No test named '{}'.", e->line, e->name);
  }
  for (const auto& a : e->args) EMBER_RETURN_IF_ERROR(validate_expr(a.get(), soft));
  for (const auto& kv : e->kwargs) EMBER_RETURN_IF_ERROR(validate_expr(kv.second.get(), soft));
  EMBER_RETURN_IF_ERROR(validate_expr(e->dyn_args.get(), soft));
  return validate_expr(e->dyn_kwargs.get(), soft);
}

Status validate_body(const Body& body, bool soft) {
  for (const auto& s : body) {
    const bool is_if = s->kind == StmtKind::kIf;
    const bool inner_soft = is_if;  // other statements with bodies open a new frame
    EMBER_RETURN_IF_ERROR(validate_expr(s->expr.get(), soft));
    EMBER_RETURN_IF_ERROR(validate_expr(s->cond.get(), false));
    EMBER_RETURN_IF_ERROR(validate_expr(s->filter.get(), s->kind == StmtKind::kFilterBlock ? soft : false));
    for (const auto& c : s->conds) EMBER_RETURN_IF_ERROR(validate_expr(c.get(), soft || is_if));
    for (const auto& d : s->defaults) EMBER_RETURN_IF_ERROR(validate_expr(d.get(), false));
    for (const auto& b : s->bodies) EMBER_RETURN_IF_ERROR(validate_body(b, inner_soft && (soft || is_if)));
    EMBER_RETURN_IF_ERROR(validate_body(s->else_body, is_if ? true : false));
  }
  return Status::ok();
}

// transformers: {key: value for key, value in message.items() if value is not None}
// then reasoning aliasing: {"thinking": r, **message, "reasoning_content": r}.
Value normalize_message(const Value& m) {
  if (!m.is_object()) return m;
  Value out = Value::object();
  Value reasoning;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const Value* v = m.obj().find(std::string_view(key));
    if (v && !v->is_none()) {
      reasoning = *v;
      break;
    }
  }
  if (!reasoning.is_undefined()) out.obj().set("thinking", reasoning);
  for (const auto& kv : m.obj().items) {
    if (!kv.second.is_none()) out.obj().set(kv.first, kv.second);
  }
  if (!reasoning.is_undefined()) out.obj().set("reasoning_content", reasoning);
  return out;
}

}  // namespace

Result<std::unique_ptr<Template>> Template::parse(std::string_view source) {
  auto body = parse_template(source);
  if (!body.is_ok()) return body.status();
  EMBER_RETURN_IF_ERROR(validate_body(body.value(), false));
  std::unique_ptr<Template> t(new Template());
  t->source_ = std::string(source);
  t->body_ = std::move(body.value());
  return t;
}

Result<std::string> Template::render(const Value& context) const { return render(context, RenderOptions{}); }

Result<std::string> Template::render(const Value& context, const RenderOptions& opts) const {
  if (!context.is_object() && !context.is_undefined() && !context.is_none()) {
    return Status::error("template context must be an object");
  }
  Value globals = Value::object();
  install_globals(globals, opts.now, &opts.limits);
  Interpreter in(opts.limits);
  return in.render(body_, globals, context);
}

Result<std::string> apply_chat_template(const Template& tmpl, const ChatInputs& inputs) {
  if (!inputs.messages.is_array()) return Status::error("apply_chat_template: messages must be a list");
  std::vector<Value> msgs;
  for (const auto& m : inputs.messages.arr().items) {
    if (!m.is_object()) return Status::error("apply_chat_template: every message must be an object");
    msgs.push_back(normalize_message(m));
  }
  if (!inputs.tools.is_none() && !inputs.tools.is_undefined() && !inputs.tools.is_array()) {
    return Status::error("apply_chat_template: tools must be a list or null");
  }
  Value ctx = Value::object();
  ObjectData& c = ctx.obj();
  c.set("bos_token", Value(inputs.bos_token));
  c.set("eos_token", Value(inputs.eos_token));
  if (inputs.extra_context.is_object()) {
    for (const auto& kv : inputs.extra_context.obj().items) {
      if (!kv.first.is_string()) continue;
      const std::string& k = kv.first.str();
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt") {
        return Status::errorf("apply_chat_template: extra context may not override '{}'", k);
      }
      c.set(k, kv.second);
    }
  } else if (!inputs.extra_context.is_none() && !inputs.extra_context.is_undefined()) {
    return Status::error("apply_chat_template: extra context must be an object");
  }
  c.set("messages", Value::array(std::move(msgs)));
  c.set("tools", inputs.tools.is_undefined() ? Value(nullptr) : inputs.tools);
  c.set("documents", Value(nullptr));
  c.set("add_generation_prompt", Value(inputs.add_generation_prompt));
  return tmpl.render(ctx, inputs.options);
}

Result<std::string> apply_chat_template(std::string_view tmpl, const ChatInputs& inputs) {
  auto t = Template::parse(tmpl);
  if (!t.is_ok()) return t.status();
  return apply_chat_template(*t.value(), inputs);
}

Result<std::string> apply_chat_template(std::string_view tmpl, const nlohmann::json& messages,
                                        const nlohmann::json& tools_or_null, bool add_generation_prompt,
                                        const std::string& bos_token, const std::string& eos_token,
                                        const nlohmann::json& extra_context) {
  ChatInputs in;
  in.messages = Value(messages);
  in.tools = Value(tools_or_null);
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = bos_token;
  in.eos_token = eos_token;
  in.extra_context = extra_context.is_null() ? Value::object() : Value(extra_context);
  return apply_chat_template(tmpl, in);
}

}  // namespace ember::tmpl
