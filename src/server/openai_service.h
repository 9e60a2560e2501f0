// The OpenAI-compatible API of `ember serve`: routes HTTP requests
// (/v1/chat/completions, /v1/completions, /v1/models, /tokenize,
// /detokenize, /kv_events, /health, /metrics, and the chat page at /), checks the API
// key in constant time, validates and tokenizes requests on the HTTP
// handler threads, and hands generation to the AsyncEngine through
// GenerationJob. Plugs into HttpServer as its handler.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/generation_job.h"
#include "server/openai_protocol.h"
#include "server/reasoning.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace ember {

struct ServiceConfig {
  std::string served_model_name = "ember";
  std::string api_key;       // empty: no authentication
  std::string arch;          // model architecture (chooses a built-in chat template if the model has none)
  ProtocolLimits limits;     // max_model_len is filled from the engine if 0
  bool log_requests = true;  // one line per finished generation request on stderr
  // Browser origins allowed to call the API from other pages (CORS); "*" is
  // any origin. Empty: no CORS headers (same-origin pages like / only).
  std::vector<std::string> allowed_origins;
  // How tool calls in the output are parsed: "auto" (from the chat
  // template), "hermes", "llama3_json", "mistral" or "none".
  std::string tool_call_parser = "auto";
  // Chat template text replacing the model's (--chat-template); "": the model's.
  std::string chat_template;
  // Reasoning: how thinking is told apart from the answer ("auto": from the
  // chat template, "none", "deepseek_r1", "qwen3", "gpt_oss"), whether it is
  // returned apart ("auto"/"deepseek") or left in the content as written
  // ("none"), and the default thinking budget (-1: none; 0: no thinking),
  // minimum and the message injected before the forced end of thinking.
  std::string reasoning_parser = "auto";
  std::string reasoning_format = "auto";
  int64_t reasoning_budget = -1;
  int64_t reasoning_budget_min = 0;
  std::string reasoning_budget_message;
  // The prefix cache's published block hashes, served at GET /kv_events
  // (for `ember router --policy exact`); nullptr: 404 there.
  std::shared_ptr<const KvEventLog> kv_events;
};

// The JSON of a GET /kv_events answer (see handle_kv_events).
nlohmann::json kv_events_json(const KvEventLog::Delta& d, int block_size);

class OpenAiService {
 public:
  OpenAiService(const Tokenizer& tok, AsyncEngine& engine, ServiceConfig cfg);

  // HttpHandler entry point (called on HTTP handler threads).
  void handle(const HttpRequest& req, std::shared_ptr<HttpResponse> resp);

  // Refuse new generation requests (503) while shutting down.
  void set_draining(bool v) { draining_ = v; }
  // Generation requests in flight.
  int n_jobs() const { return n_jobs_.load(); }
  ServerMetrics& metrics() { return metrics_; }

  // Constant-time check of "Bearer KEY" (exposed for tests).
  static bool authorized(const std::string* header, const std::string& key);

 private:
  void send_json(HttpResponse& resp, int status, const nlohmann::json& body);
  void send_error(HttpResponse& resp, const ApiError& e);
  void handle_generation(const HttpRequest& req, std::shared_ptr<HttpResponse> resp, Endpoint ep);
  void handle_models(const HttpRequest& req, HttpResponse& resp);
  void handle_tokenize(const HttpRequest& req, HttpResponse& resp);
  void handle_detokenize(const HttpRequest& req, HttpResponse& resp);
  void handle_kv_events(const HttpRequest& req, HttpResponse& resp);
  // Chat requests (openai_chat.cpp): the tool format and constraint, the
  // template variables, the rendered and tokenized prompt.
  bool prepare_chat(GenerationRequest& r, JobPrompt* prompt, ApiError* err);
  std::optional<std::vector<int32_t>> render_chat_prompt(const GenerationRequest& r, std::string* rendered,
                                                         ApiError* err) const;
  void init_reasoning();
  // The thinking-budget processor around `inner` for one prompt (nullptr
  // when the model does not think or nothing is to be done).
  // The logits processor of one chat prompt into *out: the output
  // constraint `g` (or a forced harmony call) and logit_bias, inside the
  // thinking-budget processor when the model thinks. False with *err set.
  bool chat_processor(const GenerationRequest& r, const std::string& body, const JobPrompt& prompt,
                      int64_t max_tokens, std::shared_ptr<const grammar::CompiledGrammar> g,
                      const std::vector<int32_t>& stop_ids, std::shared_ptr<const LogitsProcessor>* out,
                      ApiError* err);
  std::string new_id(const char* prefix);
  uint64_t random_seed();

  const Tokenizer& tok_;
  AsyncEngine& engine_;
  ServiceConfig cfg_;
  ServerMetrics metrics_;
  int64_t created_;
  std::atomic<bool> draining_{false};
  std::atomic<int> n_jobs_{0};
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  StructuredOutput structured_;  // output constraints and logit_bias
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;  // from cfg_.tool_call_parser
  std::string chat_template_;   // the template chats are rendered with
  bool generic_tools_ = false;  // the template has no tool support: the generic format (tool_prompt.h)
  bool harmony_template_ = false;  // gpt-oss's template: history and tools adjusted for it (harmony_prompt.h)
  ReasoningSyntax reasoning_;   // how the model thinks (kNone: it does not)
  // For thinking budgets: every token's text, the whitespace-only tokens,
  // the tokens that start the start tag, the forced end of thinking (the
  // budget message and the end tag), and harmony's headers: the reasoning
  // message's, the final answer's and a call's.
  std::shared_ptr<const std::vector<std::string>> pieces_;
  std::shared_ptr<const std::vector<int32_t>> space_tokens_;
  std::vector<int32_t> start_tokens_, close_tokens_, analysis_tokens_, final_header_tokens_, call_header_tokens_;
};

}  // namespace ember
