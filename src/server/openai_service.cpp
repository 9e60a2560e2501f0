// OpenAI-compatible routes of `ember serve`; see openai_service.h.
#include "server/openai_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "server/chat_prompt.h"
#include "server/chat_page.h"
#include "server/generation_job.h"

namespace ember {

using nlohmann::json;

namespace {

ApiError make_error(int status, std::string message, std::string type, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// Adds fixed headers (CORS) to whatever response the handlers produce.
class HeaderResponse final : public HttpResponse {
 public:
  HeaderResponse(std::shared_ptr<HttpResponse> inner, std::vector<std::pair<std::string, std::string>> headers)
      : inner_(std::move(inner)), headers_(std::move(headers)) {}
  void send(int status, const std::string& ct, std::string body,
            const std::vector<std::pair<std::string, std::string>>& extra) override {
    inner_->send(status, ct, std::move(body), merged(extra));
  }
  void start_stream(int status, const std::string& ct,
                    const std::vector<std::pair<std::string, std::string>>& extra) override {
    inner_->start_stream(status, ct, merged(extra));
  }
  bool write(std::string data) override { return inner_->write(std::move(data)); }
  void end_stream() override { inner_->end_stream(); }
  bool closed() const override { return inner_->closed(); }
  void on_close(std::function<void()> fn) override { inner_->on_close(std::move(fn)); }

 private:
  std::vector<std::pair<std::string, std::string>> merged(const std::vector<std::pair<std::string, std::string>>& e) {
    auto h = headers_;
    h.insert(h.end(), e.begin(), e.end());
    return h;
  }
  std::shared_ptr<HttpResponse> inner_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

}  // namespace

OpenAiService::OpenAiService(const Tokenizer& tok, AsyncEngine& engine, ServiceConfig cfg)
    : tok_(tok),
      engine_(engine),
      cfg_(std::move(cfg)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      structured_(tok) {
  if (cfg_.limits.max_model_len <= 0) cfg_.limits.max_model_len = engine_.max_seq_len();
  cfg_.limits.max_model_len = std::min(cfg_.limits.max_model_len, engine_.max_seq_len());
  rng_.seed((static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}());
  init_reasoning();
}

bool OpenAiService::authorized(const std::string* header, const std::string& key) {
  if (key.empty()) return true;
  if (!header) return false;
  const std::string want = "Bearer " + key;
  const std::string& got = *header;
  // Constant time in the content: every byte of the expected value is
  // compared whatever the received value holds.
  unsigned diff = static_cast<unsigned>(got.size() ^ want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < got.size() ? static_cast<unsigned char>(got[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(want[i]);
  }
  return diff == 0;
}

std::string OpenAiService::new_id(const char* prefix) {
  std::lock_guard<std::mutex> lk(rng_mu_);
  return fmt::format("{}-{:016x}{:08x}", prefix, rng_(), static_cast<uint32_t>(rng_()));
}

uint64_t OpenAiService::random_seed() {
  std::lock_guard<std::mutex> lk(rng_mu_);
  return rng_();
}

void OpenAiService::send_json(HttpResponse& resp, int status, const json& body) {
  metrics_.observe_http(status);
  resp.send(status, "application/json", json_text(body));
}

void OpenAiService::send_error(HttpResponse& resp, const ApiError& e) { send_json(resp, e.status, error_body(e)); }

void OpenAiService::handle(const HttpRequest& req, std::shared_ptr<HttpResponse> resp) {
  const std::string& path = req.path;
  // CORS: an allowed Origin gets the headers on every response, and its
  // preflight (OPTIONS) is answered here, before authentication.
  if (const std::string* origin = req.header("origin"); origin && !cfg_.allowed_origins.empty()) {
    bool ok = false;
    for (const auto& o : cfg_.allowed_origins) ok |= o == "*" || o == *origin;
    if (ok) {
      std::vector<std::pair<std::string, std::string>> h = {{"Access-Control-Allow-Origin", *origin},
                                                            {"Vary", "Origin"}};
      if (req.method == "OPTIONS") {
        h.push_back({"Access-Control-Allow-Methods", "GET, POST, OPTIONS"});
        h.push_back({"Access-Control-Allow-Headers", "Authorization, Content-Type"});
        h.push_back({"Access-Control-Max-Age", "600"});
        metrics_.observe_http(204);
        return resp->send(204, "", "", h);
      }
      resp = std::make_shared<HeaderResponse>(std::move(resp), std::move(h));
    }
  }
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  const bool needs_key =
      path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" || path == "/kv_events";
  if (needs_key && !authorized(req.header("authorization"), cfg_.api_key))
    return send_error(*resp, make_error(401, "Incorrect or missing API key. Send 'Authorization: Bearer KEY'.",
                                        "invalid_request_error", "invalid_api_key"));
  auto method_not_allowed = [&](const char* allowed) {
    metrics_.observe_http(405);
    resp->send(405, "application/json",
               json_text(error_body(make_error(405, fmt::format("method {} is not allowed on {}", req.method, path),
                                          "invalid_request_error"))),
               {{"Allow", allowed}});
  };
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) return method_not_allowed("POST");
    return handle_generation(req, resp, path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat);
  }
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (!get) return method_not_allowed("GET");
    return handle_models(req, *resp);
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!post) return method_not_allowed("POST");
    return path == "/tokenize" ? handle_tokenize(req, *resp) : handle_detokenize(req, *resp);
  }
  if (path == "/kv_events") {
    if (!get) return method_not_allowed("GET");
    return handle_kv_events(req, *resp);
  }
  if (path == "/health") {
    if (!get) return method_not_allowed("GET");
    if (draining_) return send_error(*resp, make_error(503, "shutting down", "service_unavailable"));
    return send_json(*resp, 200, json{{"status", "ok"}});
  }
  if (path == "/metrics") {
    if (!get) return method_not_allowed("GET");
    metrics_.observe_http(200);
    return resp->send(200, "text/plain; version=0.0.4; charset=utf-8",
                      metrics_.render(engine_.stats(), cfg_.served_model_name));
  }
  if (path == "/" || path == "/index.html") {
    if (!get) return method_not_allowed("GET");
    metrics_.observe_http(200);
    return resp->send(200, "text/html; charset=utf-8", chat_page_html());
  }
  send_error(*resp, make_error(404, fmt::format("no route for {} {}", req.method, path), "invalid_request_error",
                               "not_found"));
}

void OpenAiService::handle_models(const HttpRequest& req, HttpResponse& resp) {
  const json model = {{"id", cfg_.served_model_name},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "ember"},
                      {"max_model_len", cfg_.limits.max_model_len}};
  if (req.path == "/v1/models") return send_json(resp, 200, json{{"object", "list"}, {"data", json::array({model})}});
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  if (id != cfg_.served_model_name)
    return send_error(resp, make_error(404, fmt::format("the model '{}' does not exist", id), "invalid_request_error",
                                       "model_not_found"));
  send_json(resp, 200, model);
}

namespace {

JobPrompt make_prompt(std::vector<int32_t> tokens, std::string echo_text) {
  JobPrompt p;
  p.tokens = std::move(tokens);
  p.echo_text = std::move(echo_text);
  return p;
}

}  // namespace

void OpenAiService::handle_generation(const HttpRequest& req, std::shared_ptr<HttpResponse> resp, Endpoint ep) {
  const double t0 = steady_now();
  if (draining_) return send_error(*resp, make_error(503, "the server is shutting down", "service_unavailable"));
  ApiError err;
  auto body = parse_json_object(req.body, &err);
  if (!body) return send_error(*resp, err);
  auto parsed = parse_generation_request(*body, ep, cfg_.limits, &err);
  if (!parsed) return send_error(*resp, err);
  GenerationRequest& r = *parsed;
  if (!r.model.empty() && r.model != cfg_.served_model_name) {
    ApiError e = make_error(404, fmt::format("The model '{}' does not exist; this server serves '{}'.", r.model,
                                             cfg_.served_model_name),
                            "invalid_request_error", "model_not_found");
    e.param = "model";
    return send_error(*resp, e);
  }
  if (r.max_tokens == 0 && !r.echo)
    return send_error(*resp, bad_request("'max_tokens' may be 0 only with 'echo'", "max_tokens"));
  // Tokenize every prompt.
  std::vector<JobPrompt> prompts;
  const int32_t V = tok_.n_vocab();
  if (ep == Endpoint::kChat) {
    JobPrompt jp;
    if (!prepare_chat(r, &jp, &err)) return send_error(*resp, err);
    prompts.push_back(std::move(jp));
  } else if (r.prompt_is_tokens) {
    for (auto& ids : r.token_prompts) {
      for (int32_t t : ids)
        if (t >= V)
          return send_error(*resp, bad_request(fmt::format("token id {} in 'prompt' is out of range [0, {})", t, V),
                                               "prompt"));
      std::string echo = r.echo ? tok_.decode(ids) : std::string();
      prompts.push_back(make_prompt(std::move(ids), std::move(echo)));
    }
  } else {
    for (auto& text : r.text_prompts) {
      EncodeOptions eo;
      eo.add_bos = true;
      prompts.push_back(make_prompt(tok_.encode(text, eo), r.echo ? text : std::string()));
    }
  }
  for (auto [id, b] : r.logit_bias)
    if (id >= V)
      return send_error(*resp, bad_request(fmt::format("'logit_bias' token id {} is out of range [0, {})", id, V),
                                           "logit_bias"));
  auto constraint = structured_.compile(r.constraint, req.body, &err);
  const bool harmony_call =  // compiled per prompt (chat_processor)
      r.constraint.kind == OutputConstraint::Kind::kToolCall && r.constraint.tool_format == ToolCallFormat::kHarmony;
  if (!constraint && r.constraint.kind != OutputConstraint::Kind::kNone && !harmony_call)
    return send_error(*resp, err);
  const int64_t ctx = cfg_.limits.max_model_len;
  std::vector<RequestParams> params;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int64_t n_prompt = static_cast<int64_t>(prompts[p].tokens.size());
    if (n_prompt == 0) return send_error(*resp, bad_request("the prompt is empty (no tokens)", "prompt"));
    if (n_prompt >= ctx)
      return send_error(
          *resp, bad_request(fmt::format("This model's maximum context length is {} tokens. However, your {} resulted "
                                         "in {} tokens; at least one token must be left for the output.",
                                         ctx, ep == Endpoint::kChat ? "messages" : "prompt", n_prompt),
                             ep == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded"));
    RequestParams rp;
    rp.prompt = prompts[p].tokens;
    // max_tokens is capped by what is left of the context.
    rp.max_tokens = static_cast<int>(std::min<int64_t>(r.max_tokens >= 0 ? r.max_tokens : ctx, ctx - n_prompt));
    if (rp.max_tokens == 0) rp.max_tokens = 1;  // echo only: one token is computed and dropped
    SamplingParams& sp = rp.sampling;
    sp.temperature = static_cast<float>(r.temperature);
    sp.top_k = r.top_k;
    sp.top_p = static_cast<float>(r.top_p);
    sp.min_p = static_cast<float>(r.min_p);
    sp.presence_penalty = static_cast<float>(r.presence_penalty);
    sp.frequency_penalty = static_cast<float>(r.frequency_penalty);
    sp.repetition_penalty = static_cast<float>(r.repetition_penalty);
    sp.penalty_last_n = -1;
    sp.seed = r.seed ? *r.seed + p * static_cast<uint64_t>(r.n) : random_seed();
    if (Status st = sp.validate(); !st) return send_error(*resp, bad_request(st.message()));
    if (!r.ignore_eos) rp.stop_token_ids = tok_.eog_ids();
    for (int32_t t : r.stop_token_ids) {
      if (t >= V)
        return send_error(*resp, bad_request(fmt::format("stop token id {} is out of range [0, {})", t, V),
                                             "stop_token_ids"));
      rp.stop_token_ids.push_back(t);
    }
    std::vector<int32_t> may_end = rp.stop_token_ids;  // where the grammar is complete
    may_end.insert(may_end.end(), tok_.eog_ids().begin(), tok_.eog_ids().end());
    if (ep != Endpoint::kChat)
      rp.logits_processor = structured_.processor(constraint, r.logit_bias, may_end, r.forced_tokens);
    else if (!chat_processor(r, req.body, prompts[p], rp.max_tokens, constraint, may_end, &rp.logits_processor, &err))
      return send_error(*resp, err);
    rp.logprobs = r.logprobs;
    rp.top_logprobs = r.top_logprobs;
    if (r.echo && r.logprobs) rp.prompt_logprobs = r.top_logprobs;
    rp.n = r.n;
    rp.num_speculative_tokens = r.num_speculative_tokens;
    params.push_back(std::move(rp));
  }
  auto job = std::make_shared<GenerationJob>(r, std::move(prompts), tok_, engine_, metrics_,
                                             new_id(ep == Endpoint::kChat ? "chatcmpl" : "cmpl"),
                                             cfg_.served_model_name, resp, t0);
  ++n_jobs_;
  GenerationJob* jp = job.get();  // on_done runs inside the job: the raw pointer is valid there
  job->set_on_done([this, jp] {
    if (cfg_.log_requests) std::fprintf(stderr, "ember serve: %s\n", jp->summary().c_str());
    --n_jobs_;
  });
  job->start(std::move(params));
}

void OpenAiService::handle_tokenize(const HttpRequest& req, HttpResponse& resp) {
  ApiError err;
  auto body = parse_json_object(req.body, &err);
  if (!body) return send_error(resp, err);
  const json& b = *body;
  std::vector<int32_t> ids;
  if (b.contains("messages")) {
    auto parsed = parse_generation_request(b, Endpoint::kChat, cfg_.limits, &err);
    if (!parsed) return send_error(resp, err);
    JobPrompt jp;
    if (!prepare_chat(*parsed, &jp, &err)) return send_error(resp, err);
    ids = std::move(jp.tokens);
  } else {
    auto p = b.find("prompt");
    if (p == b.end() || !p->is_string()) return send_error(resp, bad_request("'prompt' must be a string", "prompt"));
    EncodeOptions eo;
    eo.add_bos = true;
    if (auto a = b.find("add_special_tokens"); a != b.end() && !a->is_null()) {
      if (!a->is_boolean()) return send_error(resp, bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
      eo.add_bos = a->get<bool>();
    }
    ids = tok_.encode(p->get<std::string>(), eo);
  }
  json out = {{"count", ids.size()}, {"max_model_len", cfg_.limits.max_model_len}, {"tokens", ids}};
  if (auto ts = b.find("return_token_strs"); ts != b.end() && ts->is_boolean() && ts->get<bool>()) {
    json strs = json::array();
    for (int32_t t : ids) strs.push_back(tok_.token_to_piece(t, true));
    out["token_strs"] = std::move(strs);
  }
  send_json(resp, 200, out);
}

// GET /kv_events?epoch=E&since=S&limit=N: the prefix cache's block hashes
// stored and evicted after sequence number S of log E (kv_events.h), at most
// N (default and cap 65536) events; a reader that is new (no epoch), of
// another epoch or too far behind gets {"reset": true, "hashes": [every
// cached hash]}. Hashes are BlockManager::chain_hash values (unsigned 64-bit).
void OpenAiService::handle_kv_events(const HttpRequest& req, HttpResponse& resp) {
  if (!cfg_.kv_events)
    return send_error(resp, make_error(404, "this server does not publish its prefix cache (prefix caching is off)",
                                       "invalid_request_error", "not_found"));
  uint64_t epoch = 0, since = 0, limit = 65536;
  for (size_t b = 0; b < req.query.size();) {
    size_t e = req.query.find('&', b);
    if (e == std::string::npos) e = req.query.size();
    const std::string kv = req.query.substr(b, e - b);
    b = e + 1;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    uint64_t* dst = k == "epoch" ? &epoch : k == "since" ? &since : k == "limit" ? &limit : nullptr;
    if (!dst) continue;
    uint64_t x = 0;
    bool ok = !v.empty() && v.size() <= 20;
    for (char c : v) {
      ok &= c >= '0' && c <= '9';
      if (ok) x = x * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok) return send_error(resp, bad_request(fmt::format("'{}' must be an unsigned integer", k), k));
    *dst = x;
  }
  limit = std::clamp<uint64_t>(limit, 1, 65536);
  send_json(resp, 200, kv_events_json(cfg_.kv_events->since(epoch, since, static_cast<size_t>(limit)),
                                      cfg_.kv_events->block_size()));
}

json kv_events_json(const KvEventLog::Delta& d, int block_size) {
  json out = {{"epoch", d.epoch}, {"seq", d.seq}, {"block_size", block_size}, {"reset", d.reset}, {"more", d.more}};
  if (d.reset) {
    out["hashes"] = d.snapshot;
  } else {
    // [[1, hash] stored, [0, hash] evicted], in order.
    json ev = json::array();
    for (const auto& e : d.events) ev.push_back(json::array({e.stored ? 1 : 0, e.hash}));
    out["events"] = std::move(ev);
  }
  return out;
}

void OpenAiService::handle_detokenize(const HttpRequest& req, HttpResponse& resp) {
  ApiError err;
  auto body = parse_json_object(req.body, &err);
  if (!body) return send_error(resp, err);
  auto t = body->find("tokens");
  if (t == body->end() || !t->is_array())
    return send_error(resp, bad_request("'tokens' must be an array of token ids", "tokens"));
  std::vector<int32_t> ids;
  for (const json& x : *t) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok_.n_vocab())
      return send_error(resp, bad_request(fmt::format("'tokens' must hold token ids in [0, {})", tok_.n_vocab()),
                                          "tokens"));
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  send_json(resp, 200, json{{"prompt", tok_.decode(ids)}});
}

}  // namespace ember
