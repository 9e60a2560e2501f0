// Chat history and tools prepared for gpt-oss's own chat template (the
// harmony format) where that template would drop or refuse what the OpenAI
// API allows; everything else passes unchanged, so the rendering stays the
// template's own:
//  - system (and developer) messages: the template takes the first one as
//    the developer message's instructions and drops any other; they are
//    joined (a blank line between) into one leading system message;
//  - an assistant message with several tool_calls: the template renders
//    only the first (harmony writes one call per message) and names every
//    following tool result after it; such a message becomes one assistant
//    message per call, each followed by its result (matched by
//    tool_call_id, the unmatched ones in order);
//  - an assistant message with tool_calls and both content and
//    reasoning_content: the template refuses it ("Cannot pass both content
//    and thinking"); the content joins the reasoning (a blank line
//    between), both being what the model wrote before the call;
//  - a tool without a description (or a null one): the template fails on
//    it; it gets "".
// Input as server/openai_protocol.cpp parses it: [{role, content (string),
// reasoning_content?, tool_calls?, tool_call_id?}] and the tools' array.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

namespace ember {

nlohmann::json harmony_messages(const nlohmann::json& messages);
nlohmann::json harmony_tools(const nlohmann::json& tools);

}  // namespace ember
