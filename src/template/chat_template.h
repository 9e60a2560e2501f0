// Public API of the chat-template area: a Jinja2 interpreter that renders Hugging
// Face chat templates byte-identically to transformers' apply_chat_template
// (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, tojson with ensure_ascii=False, raise_exception, strftime_now),
// plus built-in templates for models whose GGUF carries none.
//
//   auto t = tmpl::Template::parse(source);          // once per model
//   auto text = tmpl::apply_chat_template(**t, inputs);
//
// Errors (syntax, raise_exception, type errors, resource limits) come back as
// Status messages that include the template line number; nothing throws.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "template/ast.h"
#include "template/interpreter.h"
#include "template/value.h"

namespace ember::tmpl {

struct RenderOptions {
  RenderLimits limits;
  // Clock used by strftime_now(); nullopt = the real current time.
  std::optional<std::time_t> now;
};

class Template {
 public:
  // Parses and validates (unknown filters/tests are errors, like jinja2).
  static Result<std::unique_ptr<Template>> parse(std::string_view source);

  // Renders with `context` (an object: variable name -> value) on top of the
  // transformers globals (raise_exception, strftime_now, namespace, dict, range).
  Result<std::string> render(const Value& context) const;
  Result<std::string> render(const Value& context, const RenderOptions& opts) const;

  const std::string& source() const { return source_; }

 private:
  Template() = default;
  std::string source_;
  Body body_;
};

// Inputs of apply_chat_template, mirroring transformers' arguments.
struct ChatInputs {
  Value messages = Value::array();  // list of message dicts
  Value tools = Value(nullptr);     // list of tool schemas, or None
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  Value extra_context = Value::object();  // extra template variables (date_string, ...)
  RenderOptions options;
};

// Renders like tokenizer.apply_chat_template(messages, tools=..., tokenize=False,
// add_generation_prompt=..., **extra): drops None-valued message keys, aliases
// reasoning fields, sets documents=None and the special tokens.
Result<std::string> apply_chat_template(const Template& tmpl, const ChatInputs& inputs);
Result<std::string> apply_chat_template(std::string_view tmpl, const ChatInputs& inputs);
Result<std::string> apply_chat_template(std::string_view tmpl, const nlohmann::json& messages,
                                        const nlohmann::json& tools_or_null, bool add_generation_prompt,
                                        const std::string& bos_token, const std::string& eos_token,
                                        const nlohmann::json& extra_context);

// Built-in templates: "chatml" (fallback for models without a template),
// "gemma" (the Gemma 3 instruct template) and "gpt-oss" (also "gpt_oss",
// "harmony": OpenAI's gpt-oss template, the harmony format). nullptr for
// unknown names.
const char* builtin_chat_template(std::string_view name);

}  // namespace ember::tmpl

namespace ember {
using tmpl::apply_chat_template;
using tmpl::builtin_chat_template;
}  // namespace ember
