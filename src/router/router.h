// `ember router`: one OpenAI endpoint in front of data-parallel `ember serve`
// workers. Each /v1/chat/completions and /v1/completions request is routed by
// its prompt (request_key.h) through the WorkerSet's policy (cache-aware by
// default: the worker whose tree of recently routed prompts matches the
// longest prefix, else the least loaded) and proxied with the bench's HTTP
// client: streams are passed through event by event as they arrive. Other
// routes (/v1/models, /tokenize, /detokenize, the chat page) go to the least
// loaded healthy worker; /health and /metrics are the router's own.
//
// Failures: a worker that cannot be reached, breaks the connection or
// answers 502/503 before anything was sent to the client is marked down and
// the request is retried on another worker (nothing is lost: the client has
// seen nothing yet; a non-streamed answer is only sent once complete). A
// stream that breaks after events were sent ends with an error event
// (`data: {"error": ...}`, the server's mid-stream error shape) and
// `data: [DONE]`. A client that disconnects cancels its upstream request.
//
// Threading: handle() runs on the HTTP handler threads and returns at once;
// each proxied request runs on its own thread (at most max_in_flight), so a
// long generation never holds a handler thread. drain() waits for them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "router/router_metrics.h"
#include "router/worker_set.h"
#include "server/http_server.h"

namespace ember::router {

struct RouterConfig {
  int max_in_flight = 4096;        // proxied requests at once; beyond: 503
  int max_attempts = 3;            // workers tried for a request that never started
  double connect_timeout_s = 5;    // to a worker
  double request_timeout_s = 3600; // a whole proxied request
  size_t max_response_bytes = size_t{256} << 20;  // a non-streamed answer
  std::function<void(const std::string&)> log;    // one line per event worth a log (may be empty)
};

class Router {
 public:
  Router(WorkerSet& workers, RouterConfig cfg);
  ~Router();  // cancels what is still in flight and waits for it

  // HttpHandler entry point.
  void handle(const HttpRequest& req, std::shared_ptr<HttpResponse> resp);

  // Refuse new requests (503) from now on.
  void set_draining(bool v) { draining_ = v; }
  // Proxied requests in flight.
  int n_in_flight() const { return n_active_.load(); }
  // Waits until nothing is in flight or the timeout passes; returns the
  // number still in flight.
  int wait_idle(double timeout_s);
  // Cancels every proxied request (clients get an error) and waits for them.
  void cancel_all();

  RouterMetrics& metrics() { return metrics_; }

 private:
  struct Active;
  void proxy(HttpRequest req, std::shared_ptr<HttpResponse> resp, std::shared_ptr<Active> act);
  void finish(const std::shared_ptr<Active>& act);

  WorkerSet& workers_;
  RouterConfig cfg_;
  RouterMetrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<int> n_active_{0};
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::set<std::shared_ptr<Active>> active_;  // guarded by mu_
};

}  // namespace ember::router
