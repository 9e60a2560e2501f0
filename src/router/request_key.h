// The routing key of an OpenAI request: a text that stands for the whole
// prompt the worker will render, built so that two requests whose rendered
// prompts share a prefix have keys that share a prefix too. The router has no
// chat template, so a chat's key is the canonical rendering of everything the
// template sees, in the order templates render it: the tools first (they go
// into the system prompt), then every message in turn (role, text content,
// tool calls, tool call id), each closed by a separator. So a conversation's
// next turn extends its previous turn's key, and a shared system prompt or
// few-shot preamble is a shared prefix. (Not the first message alone:
// SGLang issue 26263 routed on messages.first() and lost every multi-turn
// hit.) Completions: the prompt text, or token ids written as text.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ember::router {

// The key of a /v1/chat/completions or /v1/completions body; empty when the
// body has nothing to route on (the router then balances by load alone).
std::string routing_key(const nlohmann::json& body, bool chat);

}  // namespace ember::router
