// Tool calling on chat templates that have none (the generic format): the
// tools are described in the system turn, with how to write a call in the
// server's tool-call format (Hermes-style <tool_call> blocks unless
// --tool-call-parser names another), earlier assistant calls are written as
// that text, and tool results become a user-side turn (<tool_response>
// blocks, merged with the user turns around them so that roles keep
// alternating). The template then only sees system, user and assistant
// turns, which every template renders (Gemma's rejects a "tool" role).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

namespace ember {

// Whether a chat template uses the `tools` variable (renders tool definitions).
bool template_renders_tools(std::string_view chat_template);

// The system-turn text that describes `tools` (the request's definitions)
// and how to call them in `format`.
std::string generic_tools_text(const nlohmann::json& tools, ToolCallFormat format, bool parallel);

// An assistant turn's content with its tool calls written as `format` writes them.
std::string generic_call_text(const std::string& content, const nlohmann::json& tool_calls, ToolCallFormat format);

// `messages` ([{role, content, tool_calls?, tool_call_id?}], as parsed)
// rewritten for a template without tool support: tool calls become text,
// tool results user turns. With `tools_text` non-empty it is added to the
// system message (one is inserted first when there is none), or, with
// `in_user_turn`, to the start of the first user message instead (for
// templates that reject a system turn).
nlohmann::json generic_tool_messages(const nlohmann::json& messages, const std::string& tools_text,
                                     ToolCallFormat format, bool in_user_turn = false);

// JSON text as Python's json.dumps writes it (", " and ": ", non-ASCII kept),
// the spelling chat templates' tojson and models' tool calls use.
std::string python_json(const nlohmann::json& j);

}  // namespace ember
