// Built-in chat templates: a ChatML fallback for models that ship no template,
// the Gemma 3 instruct template (the default model's GGUF has no
// tokenizer.chat_template key, so ember picks this one by architecture) and
// gpt-oss's harmony template (builtin_template_gpt_oss.cpp).
// The texts are byte-identical to tests/data/template/templates/
// {builtin-chatml,google-gemma-3-it,openai-gpt-oss-120b}.jinja, which the
// tests check.
#include <string_view>

#include "template/chat_template.h"

namespace ember::tmpl {

extern const char* const kGptOssTemplate;  // builtin_template_gpt_oss.cpp

namespace {

// google/gemma-3-*-it chat_template (see tests/data/template/templates/README.md).
constexpr const char* kGemma3 = R"TPL({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)TPL";

constexpr const char* kChatML = R"TPL({#- ember built-in ChatML template: used for models that ship no chat template. -#}
{%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '\n' -}}
    {%- if message['content'] is string -%}
        {{- message['content'] -}}
    {%- elif message['content'] is iterable -%}
        {%- for part in message['content'] -%}
            {%- if part['type'] == 'text' -%}
                {{- part['text'] -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {%- if message['tool_calls'] is defined -%}
        {%- for call in message['tool_calls'] -%}
            {{- '\n<tool_call>\n' + (call['function'] | tojson) + '\n</tool_call>' -}}
        {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)TPL";

}  // namespace

const char* builtin_chat_template(std::string_view name) {
  if (name == "gemma" || name == "gemma3") return kGemma3;
  if (name == "chatml") return kChatML;
  if (name == "gpt-oss" || name == "gpt_oss" || name == "harmony") return kGptOssTemplate;
  return nullptr;
}

}  // namespace ember::tmpl
