// Builds the token ids of a chat prompt: renders the model's own chat
// template (or a built-in one chosen by architecture when the model has
// none) and tokenizes it with control tokens enabled.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace ember {

// The template text for a model: tokenizer.chat_template if present, else a
// built-in one named by the architecture's ArchSpec (gemma3 -> Gemma; ChatML otherwise
// and for unknown architectures).
std::string chat_template_for(const Tokenizer& tok, const std::string& arch);

// Renders `messages` (OpenAI-style [{role, content}, ...]) with the model's
// template; `tools` (the request's tool definitions, or null) is passed to
// the template as transformers does.
Result<std::string> render_chat(const Tokenizer& tok, const std::string& arch, const nlohmann::json& messages,
                                bool add_generation_prompt, const nlohmann::json& tools = nullptr);

// The same with the template's text given, and extra template variables
// (`kwargs`: an object, e.g. {"enable_thinking": false}).
Result<std::string> render_chat_template(const Tokenizer& tok, const std::string& chat_template,
                                         const nlohmann::json& messages, bool add_generation_prompt,
                                         const nlohmann::json& tools, const nlohmann::json& kwargs);

// Byte ranges of `rendered` that hold the messages' text contents (found in
// order, verbatim or trimmed as templates do).
std::vector<std::pair<size_t, size_t>> content_ranges(const std::string& rendered, const nlohmann::json& messages);

// Tokenizes rendered chat text: control tokens written by the template are
// parsed, but never inside the messages' contents (no injection of
// <start_of_turn> etc. by users). BOS is added only if the model wants one
// and the template did not already write it.
std::vector<int32_t> tokenize_rendered_chat(const Tokenizer& tok, const std::string& rendered,
                                            const nlohmann::json& messages);

}  // namespace ember
