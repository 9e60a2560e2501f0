// `ember router`: routing and proxying; see router.h.
//
// A stream's events are forwarded as they arrive, except its preamble: the
// events a worker sends before any output (a chat's role chunk, sent when the
// request is admitted) are held until the first event that carries output,
// so a request still waiting in a worker's queue has not "started" and is
// retried elsewhere if that worker dies.
#include "router/router.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/http_client.h"
#include "bench/sse.h"
#include "router/request_key.h"

namespace ember::router {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Router::Active {
  int efd = -1;  // readable once cancelled (the client left, or cancel_all)
  std::atomic<bool> cancelled{false};
  ~Active() {
    if (efd >= 0) ::close(efd);
  }
  void cancel() {
    if (cancelled.exchange(true)) return;
    uint64_t one = 1;
    ssize_t r = ::write(efd, &one, sizeof(one));
    (void)r;
  }
};

namespace {

bool is_generation(const HttpRequest& req) {
  return req.method == "POST" && (req.path == "/v1/chat/completions" || req.path == "/v1/completions");
}

// Hop-by-hop and framing headers are the transport's own on each side.
bool hop_header(const std::string& n) {
  return n == "host" || n == "connection" || n == "content-length" || n == "transfer-encoding" || n == "keep-alive" ||
         n == "te" || n == "trailer" || n == "upgrade" || n == "expect" || n == "proxy-connection";
}

std::string sse_text(const SseEvent& ev) {
  std::string s;
  if (!ev.event.empty()) s += "event: " + ev.event + "\n";
  if (!ev.id.empty()) s += "id: " + ev.id + "\n";
  size_t b = 0;
  for (;;) {
    const size_t e = ev.data.find('\n', b);
    s += "data: ";
    s += ev.data.substr(b, e == std::string::npos ? std::string::npos : e - b);
    s += "\n";
    if (e == std::string::npos) break;
    b = e + 1;
  }
  s += "\n";
  return s;
}

// True for an event that carries no output yet: every choice without text,
// tool calls, log-probabilities or a finish reason (a chat's role chunk).
bool is_preamble(const std::string& data) {
  if (data.empty() || data[0] != '{') return false;
  json j = json::parse(data, nullptr, false);
  if (!j.is_object() || j.contains("error") || (j.contains("usage") && !j["usage"].is_null())) return false;
  auto ch = j.find("choices");
  if (ch == j.end() || !ch->is_array() || ch->empty()) return false;
  auto empty_text = [](const json& o, const char* k) {
    auto it = o.find(k);
    return it == o.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
  };
  for (const json& c : *ch) {
    if (!c.is_object() || !empty_text(c, "finish_reason")) return false;
    if (c.contains("logprobs") && !c["logprobs"].is_null()) return false;
    if (!empty_text(c, "text")) return false;
    if (auto d = c.find("delta"); d != c.end()) {
      if (!d->is_object()) return false;
      for (auto it = d->begin(); it != d->end(); ++it)
        if (it.key() != "role" && !(it.value().is_null() || (it.value().is_string() && it.value().get_ref<const std::string&>().empty())))
          return false;
    }
  }
  return true;
}

// The /tokenize body that gives the token ids a generation request's prompt
// becomes on the worker (a chat: the request itself, rendered by the
// worker's template; a completion: its prompt, with BOS as the worker adds
// it), or the ids themselves for a prompt of token ids. A batch: its first
// prompt. False: nothing to tokenize.
bool tokenize_body(const json& body, bool chat, std::string* out, std::vector<int32_t>* ids) {
  if (!body.is_object()) return false;
  if (chat) {
    if (!body.contains("messages")) return false;
    *out = body.dump();
    return true;
  }
  auto it = body.find("prompt");
  if (it == body.end()) return false;
  const json* p = &*it;
  if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) p = &p->at(0);
  if (p->is_string()) {
    *out = json{{"prompt", *p}}.dump();
    return true;
  }
  if (p->is_array() && !p->empty()) {
    for (const json& t : *p) {
      if (!t.is_number_integer()) return false;
      ids->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return true;
  }
  return false;
}

std::string error_event(const std::string& msg) {
  json j = {{"error", {{"message", msg}, {"type", "server_error"}, {"param", nullptr}, {"code", 502}}}};
  return "data: " + j.dump() + "\n\ndata: [DONE]\n\n";
}

}  // namespace

Router::Router(WorkerSet& workers, RouterConfig cfg) : workers_(workers), cfg_(std::move(cfg)) {}

Router::~Router() { cancel_all(); }

void Router::handle(const HttpRequest& req, std::shared_ptr<HttpResponse> resp) {
  auto send = [&](int status, const std::string& ct, std::string body) {
    metrics_.observe_http(status);
    resp->send(status, ct, std::move(body));
  };
  if (req.path == "/health") {
    int healthy = 0;
    for (int i = 0; i < workers_.size(); ++i) healthy += workers_.at(i).healthy.load() ? 1 : 0;
    if (draining_) return send(503, "application/json", R"({"status":"draining"})");
    json j = {{"status", healthy > 0 ? "ok" : "no healthy worker"}, {"workers", workers_.size()}, {"workers_healthy", healthy}};
    return send(healthy > 0 ? 200 : 503, "application/json", j.dump());
  }
  if (req.path == "/metrics" && (req.method == "GET" || req.method == "HEAD")) {
    return send(200, "text/plain; version=0.0.4", metrics_.render(workers_));
  }
  if (draining_) return send(503, "application/json", http_error_json("the router is shutting down", "server_error"));
  if (n_active_.load() >= cfg_.max_in_flight)
    return send(503, "application/json",
                http_error_json(fmt::format("the router has {} requests in flight, its limit; retry later", cfg_.max_in_flight),
                                "server_error"));
  auto act = std::make_shared<Active>();
  act->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (act->efd < 0) return send(503, "application/json", http_error_json("out of descriptors", "server_error"));
  {
    std::lock_guard<std::mutex> lk(mu_);
    active_.insert(act);
    n_active_.fetch_add(1);
  }
  std::weak_ptr<Active> weak = act;
  resp->on_close([weak] {
    if (auto a = weak.lock()) a->cancel();
  });
  try {
    std::thread([this, req, resp, act]() mutable { proxy(std::move(req), std::move(resp), act); }).detach();
  } catch (const std::system_error&) {
    finish(act);
    send(503, "application/json", http_error_json("cannot start a proxy thread", "server_error"));
  }
}

void Router::finish(const std::shared_ptr<Active>& act) {
  std::lock_guard<std::mutex> lk(mu_);
  active_.erase(act);
  n_active_.fetch_sub(1);
  idle_cv_.notify_all();
}

int Router::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [this] { return n_active_.load() == 0; });
  return n_active_.load();
}

void Router::cancel_all() {
  std::unique_lock<std::mutex> lk(mu_);
  for (const auto& a : active_) a->cancel();
  idle_cv_.wait(lk, [this] { return n_active_.load() == 0; });
}

void Router::proxy(HttpRequest req, std::shared_ptr<HttpResponse> resp, std::shared_ptr<Active> act) {
  const auto t0 = Clock::now();
  double ttfb = -1;
  const bool gen = is_generation(req);
  std::string key;
  bool want_stream = false;
  std::vector<int32_t> tokens;  // exact policy: the prompt as the worker tokenizes it
  if (gen) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_discarded()) {
      const bool chat = req.path == "/v1/chat/completions";
      key = routing_key(body, chat);
      if (body.is_object()) {
        auto it = body.find("stream");
        want_stream = it != body.end() && it->is_boolean() && it->get<bool>();
      }
      std::string tb;
      if (workers_.config().policy == RoutingPolicy::kExact && tokenize_body(body, chat, &tb, &tokens) && !tb.empty()) {
        auto ids = workers_.tokenize(tb, req.header("authorization"), act->efd);
        if (ids) {
          tokens = std::move(*ids);
        } else {
          // The request itself will get the worker's answer (e.g. its 400).
          metrics_.observe_tokenize_failure();
          if (cfg_.log && !act->cancelled.load()) cfg_.log(fmt::format("exact routing: {}", ids.status().message()));
        }
      }
    }
  }
  HttpClientRequest creq;
  creq.method = req.method;
  creq.target = req.target;
  creq.body = req.body;
  creq.connect_timeout_s = cfg_.connect_timeout_s;
  creq.timeout_s = cfg_.request_timeout_s;
  creq.max_body_bytes = cfg_.max_response_bytes;
  creq.cancel_fd = act->efd;
  for (const auto& [k, v] : req.headers)
    if (!hop_header(k)) creq.headers.emplace_back(k, v);
  const size_t colon = req.peer.rfind(':');
  creq.headers.emplace_back("X-Forwarded-For", colon == std::string::npos ? req.peer : req.peer.substr(0, colon));

  bool started = false;  // the client's stream is open (events were forwarded)
  bool done = false;     // the client has its whole answer
  std::string last_error = "no worker tried";
  std::vector<int> tried;
  for (int attempt = 0; attempt < cfg_.max_attempts && !done && !act->cancelled.load(); ++attempt) {
    RouteDecision d;
    if (gen) {
      d = workers_.config().policy == RoutingPolicy::kExact ? workers_.choose_exact(tokens, key, tried)
                                                            : workers_.choose(key, tried);
    } else {
      d.worker = workers_.least_loaded(tried);
    }
    if (d.worker < 0) break;
    if (attempt == 0 && gen) {
      metrics_.observe_route(d.reason, key.size(), d.matched);
      if (workers_.config().policy == RoutingPolicy::kExact) metrics_.observe_exact(d);
    }
    if (attempt > 0) metrics_.observe_retry();
    tried.push_back(d.worker);
    Worker& w = workers_.at(d.worker);
    w.in_flight.fetch_add(1);
    w.requests.fetch_add(1);
    creq.host = w.addr.host;
    creq.port = w.addr.port;
    creq.target = w.addr.path + req.target;

    SseParser parser;
    std::vector<SseEvent> events;
    std::string held;        // preamble events not forwarded yet
    bool sse = false, saw_done = false;
    std::string body;        // a non-stream answer, forwarded once complete
    auto forward = [&](std::vector<SseEvent>& evs) {
      for (const SseEvent& ev : evs) {
        if (ev.data == "[DONE]") saw_done = true;
        std::string text = sse_text(ev);
        if (!started && !saw_done && is_preamble(ev.data)) {
          held += text;
          continue;
        }
        if (!started) {
          resp->start_stream(200, "text/event-stream");
          metrics_.observe_http(200);
          ttfb = std::chrono::duration<double>(Clock::now() - t0).count();
          started = true;
          text = held + text;
          held.clear();
        }
        if (!resp->write(std::move(text))) return false;
      }
      evs.clear();
      return true;
    };
    auto on_body = [&](int status, std::string_view data) {
      if (act->cancelled.load()) return false;
      if (status != 200) {
        body.append(data);
        return true;
      }
      sse = want_stream;  // the worker answered 200 to a stream request: an event stream
      if (!sse) {
        body.append(data);
        return true;
      }
      if (!parser.feed(data, &events)) return false;
      return forward(events);
    };
    auto r = http_request(creq, on_body);
    w.in_flight.fetch_sub(1);
    workers_.end_request(d);
    if (act->cancelled.load() || resp->closed()) break;  // the client left, or the router is shutting down
    if (r && sse) {
      parser.finish(&events);
      forward(events);
      if (saw_done) {
        resp->end_stream();
        done = true;
        break;
      }
      last_error = fmt::format("worker {} ended the stream without [DONE]", w.url);
    } else if (r && (r->status == 502 || r->status == 503) && !started && attempt + 1 < cfg_.max_attempts) {
      // The worker is shutting down or overloaded: try another.
      last_error = fmt::format("worker {} answered {}", w.url, r->status);
      workers_.mark_failed(d.worker, last_error);
      continue;
    } else if (r) {
      std::vector<std::pair<std::string, std::string>> extra;
      std::string ct = "application/json";
      for (const auto& [k, v] : r->headers) {
        if (k == "content-type") {
          ct = v;
        } else if (!hop_header(k) && k != "cache-control" && k != "x-accel-buffering") {
          extra.emplace_back(k, v);
        }
      }
      metrics_.observe_http(r->status);
      ttfb = std::chrono::duration<double>(Clock::now() - t0).count();
      resp->send(r->status, ct, std::move(body), extra);
      done = true;
      break;
    } else {
      last_error = fmt::format("worker {}: {}", w.url, r.status().message());
    }
    // The attempt failed at the transport (or the stream broke).
    workers_.mark_failed(d.worker, last_error);
    if (started) {
      metrics_.observe_stream_error();
      if (cfg_.log) cfg_.log(fmt::format("stream broken after output was sent: {}", last_error));
      resp->write(error_event(fmt::format("the worker failed mid-stream: {}", last_error)));
      resp->end_stream();
      done = true;
      break;
    }
  }
  if (!done && !resp->closed()) {
    // The client is still there: the router gave up (no worker, every
    // attempt failed) or is shutting down (cancel_all).
    const bool shutting_down = act->cancelled.load();
    if (shutting_down) last_error = "the router is shutting down";
    if (started) {
      metrics_.observe_stream_error();
      resp->write(error_event(last_error));
      resp->end_stream();
    } else {
      if (tried.empty() && !shutting_down) metrics_.observe_no_worker();
      const int status = shutting_down || tried.empty() ? 503 : 502;
      const std::string msg = shutting_down    ? last_error
                              : tried.empty() ? fmt::format("no healthy worker (last error: {})", last_error)
                                              : fmt::format("no worker could complete the request: {}", last_error);
      metrics_.observe_http(status);
      resp->send(status, "application/json", http_error_json(msg, "server_error"));
    }
  }
  metrics_.observe_latency(ttfb, std::chrono::duration<double>(Clock::now() - t0).count());
  resp.reset();
  finish(act);
}

}  // namespace ember::router
