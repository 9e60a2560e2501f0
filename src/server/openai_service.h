// The OpenAI-compatible API of `ember serve`: routes HTTP requests
// (/v1/chat/completions, /v1/completions, /v1/models, /tokenize,
// /detokenize, /health, /metrics, and the chat page at /), checks the API
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
#include "server/openai_protocol.h"
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
};

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
};

}  // namespace ember
