// OpenAI API request parsing and validation for `ember serve`: turns the
// JSON body of /v1/completions and /v1/chat/completions into a checked
// GenerationRequest, or an ApiError naming the offending field (OpenAI's
// error shape: {"error": {"message", "type", "param", "code"}}).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace ember {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // offending field ("" -> null)
  std::string code;   // "" -> null
};

// JSON text of a response body. Model text may hold invalid UTF-8 (a token
// can be part of a character): it is replaced instead of failing.
std::string json_text(const nlohmann::json& j);

// {"error": {...}} as OpenAI sends it.
nlohmann::json error_body(const ApiError& e);
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

// Server-side limits applied while parsing.
struct ProtocolLimits {
  int max_n = 16;               // most samples per prompt
  int max_prompts = 64;         // most prompts in one /v1/completions request
  int64_t max_model_len = 0;    // context of a sequence (prompt + output)
};

enum class Endpoint { kCompletions, kChat };

// A constraint on the output's text (structured output); at most one per request.
struct OutputConstraint {
  // kToolCall: tool calls in `tool_format` to the tools named in `choices`
  // (one or several if `parallel`), their arguments per the tools' parameters.
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kGrammar, kChoice, kToolCall };
  Kind kind = Kind::kNone;
  std::string text;                  // the regex or GBNF text
  std::vector<std::string> choices;  // kChoice
  // kJsonSchema: where the schema sits in the request body (a JSON pointer),
  // so it can be read again in order (properties keep their order).
  std::string schema_pointer;
  std::string param;                 // the field it came from (for errors)
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // kToolCall
  bool parallel = false;                               // kToolCall
  // kToolCall with tool_choice "auto": the grammar applies from this text
  // on (the call marker the model may write); "": from the start.
  std::string trigger;
  // kJsonObject / kJsonSchema: no whitespace between JSON tokens (extension
  // `json_whitespace: "compact"`; the default "flexible" allows a little).
  bool compact = false;
};

// Reasoning controls of a chat request (all optional): OpenAI's
// reasoning_effort, OpenRouter's reasoning {effort, max_tokens, exclude,
// enabled}, the thinking_budget extension and llama.cpp's reasoning_format.
struct ReasoningOptions {
  std::string effort;          // none, minimal, low, medium, high, xhigh ("": not given)
  int64_t budget = -2;         // thinking tokens: -1 unlimited, -2 not given
  int64_t min_tokens = -1;     // thinking before the end may be written (-1: not given)
  std::optional<bool> enabled; // reasoning.enabled
  bool exclude = false;        // think, but do not return the thinking
  std::string format;          // reasoning_format: "auto", "deepseek", "none" ("": the server's)
};

// tool_choice: kAuto lets the model choose (the default with tools), kNone
// parses nothing, kRequired and kNamed force a call (by a grammar).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // Completions: one entry per prompt, either text or token ids.
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> token_prompts;
  bool prompt_is_tokens = false;
  nlohmann::json messages;  // chat
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  int64_t max_tokens = -1;  // -1: up to the context
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;            // 0: off
  double min_p = 0.0;
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::optional<uint64_t> seed;
  double presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
  bool logprobs = false;    // report log-probabilities of the sampled tokens
  int top_logprobs = 0;     // and the k most likely alternatives
  bool echo = false;        // completions: prepend the prompt to the text
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool forced_tokens = true;      // extension: forced-token jumps under an output constraint (off: every token sampled)
  bool ignore_eos = false;        // vLLM extension: do not stop at end-of-generation tokens
  bool skip_special_tokens = true;
  std::string user;
  // ember extension: draft tokens per step for this request (-1: the
  // server's --num-speculative-tokens; 0: no speculation).
  int num_speculative_tokens = -1;
  OutputConstraint constraint;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias added to its logit
  // Chat tools: the definitions as given ([{type: function, function: {name,
  // description, parameters}}], null without tools) for the chat template.
  nlohmann::json tools;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_choice_name;     // kNamed
  bool parallel_tool_calls = true;
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // set by the service: how the output is parsed
  // Chat: variables for the chat template (chat_template_kwargs, e.g.
  // enable_thinking), and the reasoning controls.
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  ReasoningOptions reasoning;
  // Set by the service: how the output's thinking is parsed (kNone: it is
  // not; the text is all content).
  ReasoningSyntax reasoning_syntax;
};

// Parses and validates a request body. `ep` selects the schema.
// Returns std::nullopt and sets `err` on failure.
std::optional<GenerationRequest> parse_generation_request(const nlohmann::json& body, Endpoint ep,
                                                          const ProtocolLimits& lim, ApiError* err);

// Parses a body as a JSON object; errors name the problem (400).
std::optional<nlohmann::json> parse_json_object(const std::string& body, ApiError* err);

}  // namespace ember
