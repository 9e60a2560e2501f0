// One generation request in flight; see generation_job.h.
#include "server/generation_job.h"

#include "core/check.h"
#include "tokenizer/unicode_util.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>

namespace ember {

using nlohmann::json;

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

// A token's text for logprobs: itself, or "bytes:\xe2\x80" (vLLM's form)
// when it is not valid UTF-8 on its own (part of a multi-byte character).
std::string token_display(const std::string& raw) {
  if (tok::utf8_is_valid(raw)) return raw;
  std::string out = "bytes:";
  for (unsigned char c : raw) out += fmt::format("\\x{:02x}", c);
  return out;
}

json byte_list(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

const char* reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    default: return "error";
  }
}

}  // namespace

GenerationJob::GenerationJob(const GenerationRequest& req, std::vector<JobPrompt> prompts, const Tokenizer& tok,
                             AsyncEngine& engine, ServerMetrics& metrics, std::string id, std::string model_name,
                             std::shared_ptr<HttpResponse> resp, double t_arrival)
    : req_(req),
      prompts_(std::move(prompts)),
      tok_(tok),
      engine_(engine),
      metrics_(metrics),
      id_(std::move(id)),
      model_name_(std::move(model_name)),
      resp_(std::move(resp)),
      t_arrival_(t_arrival),
      created_(static_cast<int64_t>(std::time(nullptr))),
      n_(req.n) {
  choices_.resize(prompts_.size() * static_cast<size_t>(n_));
  for (size_t p = 0; p < prompts_.size(); ++p)
    for (int k = 0; k < n_; ++k) {
      Choice& c = choice(static_cast<int>(p), k);
      c.prompt = static_cast<int>(p);
      c.sample = k;
      ChoiceOutputOptions co;
      co.skip_special_tokens = req_.skip_special_tokens;
      co.stop = req_.stop;
      if (req_.endpoint == Endpoint::kChat) {
        co.reasoning = req_.reasoning_syntax;
        co.prompt = prompts_[p].rendered;
        co.tools = req_.tool_format;
      }
      c.out = std::make_unique<ChoiceOutput>(tok_, co);
      if (req_.echo) {
        c.text = prompts_[p].echo_text;
        c.text_len = c.text.size();
      }
      if (req_.logprobs) {
        if (req_.endpoint == Endpoint::kChat)
          c.lp = json{{"content", json::array()}};
        else
          c.lp = json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                      {"text_offset", json::array()}};
      }
    }
  queue_seconds_.assign(prompts_.size(), -1.0);
}

std::string GenerationJob::engine_id(int p) const { return fmt::format("{}-{}", id_, p); }

json GenerationJob::chunk_base() const {
  const bool chat = req_.endpoint == Endpoint::kChat;
  json j = {{"id", id_},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_name_},
            {"system_fingerprint", nullptr},
            {"choices", json::array()}};
  if (req_.include_usage) j["usage"] = nullptr;
  return j;
}

json GenerationJob::usage() const {
  int64_t prompt = 0, completion = 0, forced = 0;
  for (const auto& p : prompts_) prompt += static_cast<int64_t>(p.tokens.size());
  for (const auto& c : choices_) {
    completion += c.n_tokens;
    forced += c.n_forced;
  }
  json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  // Extension: completion tokens appended by forced-token jumps (structured output), not sampled.
  if (req_.constraint.kind != OutputConstraint::Kind::kNone) u["forced_tokens"] = forced;
  if (reasoning_on()) {
    int64_t reasoning = 0;
    for (const auto& c : choices_) reasoning += c.out->reasoning_tokens();
    u["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  }
  return u;
}

void GenerationJob::send_chunk(json chunk) { resp_->write("data: " + json_text(chunk) + "\n\n"); }

void GenerationJob::start(std::vector<RequestParams> params) {
  auto self = shared_from_this();
  if (req_.stream) {
    resp_->start_stream(200, "text/event-stream");
    metrics_.observe_http(200);
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      // The first chunk of every choice: the role (chat) or the echoed prompt.
      if (req_.endpoint == Endpoint::kChat) {
        json ch = chunk_base();
        ch["choices"].push_back(json{{"index", i},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}});
        send_chunk(std::move(ch));
        c.sent_role = true;
      } else if (req_.echo && req_.logprobs) {
        c.echo_pending = true;  // sent with the prompt's log-probabilities
      } else if (req_.echo && !c.text.empty()) {
        json ch = chunk_base();
        ch["choices"].push_back(json{{"index", i}, {"text", c.text}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
        send_chunk(std::move(ch));
      }
    }
  }
  // All prompts enter the engine in the same iteration; this thread does not
  // wait for it (the answer comes on the engine thread).
  std::vector<AsyncEngine::Submission> subs;
  for (size_t p = 0; p < params.size(); ++p) {
    const int pi = static_cast<int>(p);
    subs.push_back({engine_id(pi), std::move(params[p]), [self, pi](const RequestUpdate& u) { self->on_update(pi, u); }});
  }
  engine_.submit_async(std::move(subs), [self](std::vector<Status> st) { self->on_accepted(st); });
}

void GenerationJob::on_accepted(const std::vector<Status>& st) {
  std::string first_error;
  for (const Status& x : st)
    if (!x && first_error.empty()) first_error = x.message();
  if (!first_error.empty()) {
    for (size_t p = 0; p < st.size(); ++p)
      if (st[p]) engine_.abort(engine_id(static_cast<int>(p)));
    std::lock_guard<std::mutex> lk(mu_);
    failed_ = true;
    for (size_t p = 0; p < st.size(); ++p)
      if (!st[p])
        for (int k = 0; k < n_; ++k) finish_choice(choice(static_cast<int>(p), k), "error");
    if (n_done_ == static_cast<int>(choices_.size())) complete(first_error.c_str());
    return;
  }
  // Registered once accepted: a client already gone aborts at once.
  auto self = shared_from_this();
  resp_->on_close([self] { self->on_client_closed(); });
}

void GenerationJob::on_client_closed() {
  client_gone_ = true;
  for (size_t p = 0; p < prompts_.size(); ++p) engine_.abort(engine_id(static_cast<int>(p)));
}

void GenerationJob::append_logprobs(Choice& c, const RequestUpdate& u, size_t i, const std::string& piece,
                                    json* chunk_lp) {
  const int32_t t = u.tokens[i];
  const float lp = i < u.logprobs.size() ? u.logprobs[i] : 0.f;
  static const TopLogprobs kNone;
  const TopLogprobs& top = i < u.top_logprobs.size() ? u.top_logprobs[i] : kNone;
  const std::string raw = tok_.token_to_piece(t, true);
  if (req_.endpoint == Endpoint::kChat) {
    json alts = json::array();
    for (const auto& [id, v] : top) {
      const std::string s = tok_.token_to_piece(id, true);
      alts.push_back(json{{"token", token_display(s)}, {"logprob", v}, {"bytes", byte_list(s)}});
    }
    json e = {{"token", token_display(raw)}, {"logprob", lp}, {"bytes", byte_list(raw)},
              {"top_logprobs", std::move(alts)}};
    (*chunk_lp)["content"].push_back(e);
    if (!req_.stream) c.lp["content"].push_back(std::move(e));
  } else {
    // Like vLLM: the alternatives plus the sampled token itself.
    json alts = json::object();
    for (const auto& [id, v] : top) alts[token_display(tok_.token_to_piece(id, true))] = v;
    alts[token_display(raw)] = lp;
    const size_t offset = c.text_len;
    c.text_len += piece.size();
    for (json* dst : {chunk_lp, req_.stream ? nullptr : &c.lp}) {
      if (!dst) continue;
      (*dst)["tokens"].push_back(token_display(raw));
      (*dst)["token_logprobs"].push_back(lp);
      (*dst)["top_logprobs"].push_back(req_.top_logprobs > 0 ? alts : json(nullptr));
      (*dst)["text_offset"].push_back(offset);
    }
  }
}

void GenerationJob::emit_stream(Choice& c, int idx, json delta, json lp, bool finished) {
  if (!req_.stream) return;
  json ch = chunk_base();
  json choice_j = {{"index", idx}, {"logprobs", req_.logprobs ? std::move(lp) : json(nullptr)}};
  if (req_.endpoint == Endpoint::kChat)
    choice_j["delta"] = std::move(delta);
  else
    choice_j["text"] = std::move(delta);
  choice_j["finish_reason"] = finished ? json(c.finish_reason) : json(nullptr);
  ch["choices"].push_back(std::move(choice_j));
  send_chunk(std::move(ch));
}

void GenerationJob::finish_choice(Choice& c, const std::string& reason) {
  if (c.done) return;
  c.done = true;
  c.finish_reason = reason;
  ++n_done_;
}

void GenerationJob::on_update(int p, const RequestUpdate& u) {
  std::lock_guard<std::mutex> lk(mu_);
  if (completed_) return;
  EMBER_CHECK_MSG(u.index >= 0 && u.index < n_, "GenerationJob: the engine sent a sample index outside [0, n)");
  Choice& c = choice(p, u.index);
  const int idx = p * n_ + u.index;
  if (u.index == 0 && queue_seconds_[p] < 0) queue_seconds_[p] = u.queue_seconds >= 0 ? u.queue_seconds
                                                             : u.finished ? u.result.queue_seconds : -1.0;
  JobPrompt& jp = prompts_[p];
  if (!u.prompt_logprobs.empty() && static_cast<int64_t>(jp.lp.size()) + 1 == u.prompt_lp_first) {
    jp.lp.insert(jp.lp.end(), u.prompt_logprobs.begin(), u.prompt_logprobs.end());
    jp.top.insert(jp.top.end(), u.prompt_top_logprobs.begin(), u.prompt_top_logprobs.end());
  }
  if (c.done) return;
  if (c.echo_pending && jp.lp_complete() && req_.stream && !client_gone_) {
    c.echo_pending = false;
    json ch = chunk_base();
    ch["choices"].push_back(
        json{{"index", idx}, {"text", jp.echo_text}, {"logprobs", prompt_logprobs_json(p)}, {"finish_reason", nullptr}});
    send_chunk(std::move(ch));
  }
  if (req_.max_tokens == 0) {  // echo only: the engine's one token is not part of the answer
    if (u.finished) finish_choice(c, "length");
    if (req_.stream && !client_gone_ && c.done)
      emit_stream(c, idx, req_.endpoint == Endpoint::kChat ? json::object() : json(""), json(nullptr), true);
    if (n_done_ == static_cast<int>(choices_.size())) complete();
    return;
  }
  if (!u.tokens.empty() && t_first_token_ < 0) t_first_token_ = steady_now();
  std::string out;
  json lp;  // this update's logprobs (only built when asked for)
  if (req_.logprobs)
    lp = req_.endpoint == Endpoint::kChat
             ? json{{"content", json::array()}}
             : json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                    {"text_offset", json::array()}};
  std::vector<OutputEvent> ev;
  for (size_t i = 0; i < u.tokens.size() && !c.done; ++i) {
    const std::string piece = c.out->push(u.tokens[i], &ev);
    ++c.n_tokens;
    if (i < u.forced.size()) c.n_forced += u.forced[i];
    if (req_.logprobs) append_logprobs(c, u, i, piece, &lp);
    if (c.out->stopped()) {
      finish_choice(c, "stop");
      engine_.stop_sample(engine_id(p), u.index);
    }
  }
  if (c.done) {
    c.out->finish(false, &ev);  // a stop string ended it
  } else if (u.finished) {
    c.out->finish(u.result.reason == FinishReason::kLength, &ev);
    finish_choice(c, c.out->stopped() ? "stop" : reason_text(u.result.reason));
  }
  take_events(c, idx, ev, std::move(lp), c.done || (req_.logprobs && !u.tokens.empty()));
  if (n_done_ == static_cast<int>(choices_.size())) complete();
}

void GenerationJob::take_events(Choice& c, int idx, std::vector<OutputEvent>& ev, json lp, bool send_empty) {
  const bool stream = req_.stream && !client_gone_;
  const bool chat = req_.endpoint == Endpoint::kChat;
  std::vector<json> deltas;  // streaming: in order
  auto add_text = [&](const char* key, const std::string& t) {
    if (!stream) return;
    if (!chat) {
      if (deltas.empty()) deltas.push_back(json(""));
      deltas.back() = deltas.back().get<std::string>() + t;
      return;
    }
    if (!deltas.empty() && deltas.back().contains(key)) {
      json& d = deltas.back();
      d[key] = d[key].get<std::string>() + t;
      if (d.contains("reasoning")) d["reasoning"] = d[key];
      return;
    }
    json d = {{key, t}};
    if (std::string(key) == "reasoning_content") d["reasoning"] = t;  // vLLM's name for it
    deltas.push_back(std::move(d));
  };
  for (OutputEvent& e : ev) {
    if (e.kind == OutputEvent::Kind::kReasoning) {
      if (req_.reasoning.exclude) continue;
      c.reasoning += e.text;
      add_text("reasoning_content", e.text);
      continue;
    }
    if (e.kind == OutputEvent::Kind::kContent) {
      c.text += e.text;
      add_text("content", e.text);
      continue;
    }
    // A call: its id, type and name when it starts, then its arguments as they come.
    const size_t k = static_cast<size_t>(e.call);
    json delta = {{"index", k}};
    if (k >= c.calls.size()) {
      std::string id = fmt::format("call_{}{:x}x{:x}", id_.substr(id_.find('-') + 1, 12), idx, k);
      delta["id"] = id;
      delta["type"] = "function";
      delta["function"] = {{"name", e.name}, {"arguments", e.text}};
      c.calls.emplace_back(std::move(id), ToolCall{std::move(e.name), ""});
    } else if (e.text.empty()) {
      continue;
    } else {
      delta["function"] = {{"arguments", e.text}};
    }
    c.calls[k].second.arguments += e.text;
    if (stream) deltas.push_back(json{{"tool_calls", json::array({std::move(delta)})}});
  }
  // A call cut inside its arguments keeps the reason it was cut for.
  if (c.done && !c.calls.empty() && c.finish_reason == "stop" && !c.out->tool_call_cut()) c.finish_reason = "tool_calls";
  if (!stream) return;
  if (deltas.empty()) {
    if (send_empty) emit_stream(c, idx, !chat ? json("") : c.done ? json::object() : json{{"content", ""}}, std::move(lp), c.done);
    return;
  }
  for (size_t i = 0; i < deltas.size(); ++i) {
    const bool last = i + 1 == deltas.size();
    emit_stream(c, idx, std::move(deltas[i]), last ? std::move(lp) : json(nullptr), last && c.done);
  }
}

json GenerationJob::prompt_logprobs_json(int p) const {
  const JobPrompt& jp = prompts_[p];
  json j = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  size_t offset = 0;
  for (size_t i = 0; i < jp.tokens.size(); ++i) {
    const std::string raw = tok_.token_to_piece(jp.tokens[i], true);
    j["tokens"].push_back(token_display(raw));
    j["text_offset"].push_back(offset);
    offset += tok_.token_to_piece(jp.tokens[i], !req_.skip_special_tokens).size();
    if (i == 0 || i - 1 >= jp.lp.size()) {
      j["token_logprobs"].push_back(nullptr);
      j["top_logprobs"].push_back(nullptr);
      continue;
    }
    j["token_logprobs"].push_back(jp.lp[i - 1]);
    if (req_.top_logprobs > 0 && i - 1 < jp.top.size()) {
      json alts = json::object();
      for (const auto& [id, v] : jp.top[i - 1]) alts[token_display(tok_.token_to_piece(id, true))] = v;
      alts[token_display(raw)] = jp.lp[i - 1];  // the prompt's own token, like vLLM
      j["top_logprobs"].push_back(std::move(alts));
    } else {
      j["top_logprobs"].push_back(nullptr);
    }
  }
  return j;
}

json GenerationJob::final_body() const {
  const bool chat = req_.endpoint == Endpoint::kChat;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json lp = req_.logprobs ? c.lp : json(nullptr);
    if (req_.logprobs && req_.echo) {
      // The prompt's entries first, then the generated ones.
      json all = prompt_logprobs_json(c.prompt);
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const auto& x : lp[k]) all[k].push_back(x);
      lp = std::move(all);
    }
    json j = {{"index", i}, {"logprobs", std::move(lp)}, {"finish_reason", c.finish_reason}};
    if (chat) {
      json calls = json::array();
      for (const auto& [id, call] : c.calls)
        calls.push_back(json{{"id", id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      const bool no_content = c.text.empty() && !c.calls.empty();
      j["message"] = json{{"role", "assistant"}, {"content", no_content ? json(nullptr) : json(c.text)},
                          {"tool_calls", std::move(calls)}};
      if (reasoning_on() && !req_.reasoning.exclude) {
        // DeepSeek's and llama.cpp's field, and vLLM's newer name for it.
        const json rc = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
        j["message"]["reasoning_content"] = rc;
        j["message"]["reasoning"] = rc;
      }
    }
    else
      j["text"] = c.text;
    choices.push_back(std::move(j));
  }
  return json{{"id", id_},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created_},
              {"model", model_name_},
              {"system_fingerprint", nullptr},
              {"choices", std::move(choices)},
              {"usage", usage()}};
}

// All choices ended: write the response (or the stream's end) and record metrics.
void GenerationJob::complete(const char* error) {
  if (completed_) return;
  completed_ = true;
  bool any_error = failed_ || error;
  bool all_abort = true;
  for (const Choice& c : choices_) {
    any_error |= c.finish_reason == "error";
    all_abort &= c.finish_reason == "abort";
  }
  // Metrics first: a client that has its answer sees them counted.
  // One record per choice, like one engine request per sample.
  const double now = steady_now();
  {
    const json u = usage();
    std::string reasons;
    for (const Choice& c : choices_) reasons += (reasons.empty() ? "" : ",") + c.finish_reason;
    summary_ = fmt::format("{} {}: {} prompt + {} output tokens, first token {:.3f} s, total {:.3f} s, finish {}{}", id_,
                           req_.stream ? "stream" : "plain", u["prompt_tokens"].get<int64_t>(),
                           u["completion_tokens"].get<int64_t>(), t_first_token_ >= 0 ? t_first_token_ - t_arrival_ : -1.0,
                           now - t_arrival_, reasons, client_gone_ ? " (client gone)" : "");
  }
  for (const Choice& c : choices_) {
    RequestRecord r;
    r.finish_reason = client_gone_ && c.finish_reason != "stop" && c.finish_reason != "length" ? "abort" : c.finish_reason;
    r.prompt_tokens = c.sample == 0 ? static_cast<int64_t>(prompts_[c.prompt].tokens.size()) : 0;
    r.generation_tokens = c.n_tokens;
    r.ttft = t_first_token_ >= 0 ? t_first_token_ - t_arrival_ : -1;
    r.e2e = now - t_arrival_;
    r.queue = c.sample == 0 ? queue_seconds_[c.prompt] : -1;
    metrics_.observe_request(r);
  }
  if (!client_gone_) {
    if (req_.stream) {
      if (any_error) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = error ? error : "generation failed";
        resp_->write("data: " + json_text(error_body(e)) + "\n\n");
      } else if (req_.include_usage) {
        json ch = chunk_base();
        ch["usage"] = usage();
        send_chunk(std::move(ch));
      }
      resp_->write("data: [DONE]\n\n");
      resp_->end_stream();
    } else if (any_error || all_abort) {
      ApiError e;
      e.status = any_error ? 500 : 503;
      e.type = any_error ? "server_error" : "service_unavailable";
      e.message = error ? error : any_error ? "generation failed" : "the request was aborted (server shutting down)";
      resp_->send(e.status, "application/json", json_text(error_body(e)));
      metrics_.observe_http(e.status);
    } else {
      resp_->send(200, "application/json", json_text(final_body()));
      metrics_.observe_http(200);
    }
  }
  if (on_done_) on_done_();
}

}  // namespace ember
