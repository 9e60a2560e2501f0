// The router's Prometheus metrics; see router_metrics.h.
#include "router/router_metrics.h"

#include <fmt/format.h>

namespace ember::router {

namespace {
std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
void head(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}
// Label values are URLs: escape what Prometheus requires.
std::string label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}
}  // namespace

RouterMetrics::RouterMetrics() : ttfb_(latency_buckets()), e2e_(latency_buckets()) {}

void RouterMetrics::observe_route(RouteReason reason, size_t key_bytes, size_t matched) {
  std::lock_guard<std::mutex> lk(mu_);
  ++routed_[route_reason_name(reason)];
  if (key_bytes > 0 && (reason == RouteReason::kAffinity || reason == RouteReason::kLoad)) {
    ++keyed_;
    if (reason == RouteReason::kAffinity) ++affinity_;
    key_bytes_ += static_cast<double>(key_bytes);
    matched_bytes_ += static_cast<double>(matched);
  }
}

void RouterMetrics::observe_exact(const RouteDecision& d) {
  std::lock_guard<std::mutex> lk(mu_);
  if (d.reason != RouteReason::kExact) {
    ++exact_fallbacks_;
    return;
  }
  ++exact_;
  prompt_blocks_ += static_cast<double>(d.prompt_blocks);
  cached_blocks_ += static_cast<double>(d.cached_blocks);
}

void RouterMetrics::observe_tokenize_failure() {
  std::lock_guard<std::mutex> lk(mu_);
  ++tokenize_failures_;
}

void RouterMetrics::observe_retry() {
  std::lock_guard<std::mutex> lk(mu_);
  ++retries_;
}

void RouterMetrics::observe_stream_error() {
  std::lock_guard<std::mutex> lk(mu_);
  ++stream_errors_;
}

void RouterMetrics::observe_no_worker() {
  std::lock_guard<std::mutex> lk(mu_);
  ++no_worker_;
}

void RouterMetrics::observe_http(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[status];
}

void RouterMetrics::observe_latency(double ttfb, double e2e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (ttfb >= 0) ttfb_.observe(ttfb);
  e2e_.observe(e2e);
}

std::string RouterMetrics::render(const WorkerSet& ws) const {
  std::string out;
  head(&out, "ember_router:worker_healthy", "gauge", "1 if the worker passes its health checks.");
  for (int i = 0; i < ws.size(); ++i)
    out += fmt::format("ember_router:worker_healthy{{worker=\"{}\"}} {}\n", label(ws.at(i).url), ws.at(i).healthy.load() ? 1 : 0);
  head(&out, "ember_router:worker_requests_in_flight", "gauge", "Requests the router is proxying to the worker now (its load).");
  for (int i = 0; i < ws.size(); ++i)
    out += fmt::format("ember_router:worker_requests_in_flight{{worker=\"{}\"}} {}\n", label(ws.at(i).url), ws.at(i).in_flight.load());
  head(&out, "ember_router:worker_requests_total", "counter", "Requests sent to the worker (each attempt).");
  for (int i = 0; i < ws.size(); ++i)
    out += fmt::format("ember_router:worker_requests_total{{worker=\"{}\"}} {}\n", label(ws.at(i).url), ws.at(i).requests.load());
  head(&out, "ember_router:worker_failures_total", "counter", "Attempts that failed at the transport (worker down, reset, 502/503).");
  for (int i = 0; i < ws.size(); ++i)
    out += fmt::format("ember_router:worker_failures_total{{worker=\"{}\"}} {}\n", label(ws.at(i).url), ws.at(i).failures.load());
  head(&out, "ember_router:worker_tree_bytes", "gauge", "Prompt bytes in the worker's approximate prefix tree.");
  for (int i = 0; i < ws.size(); ++i) {
    Worker& w = const_cast<WorkerSet&>(ws).at(i);
    size_t b;
    {
      std::lock_guard<std::mutex> tl(w.tree_mu);
      b = w.tree.bytes();
    }
    out += fmt::format("ember_router:worker_tree_bytes{{worker=\"{}\"}} {}\n", label(w.url), b);
  }
  // One line per worker: name{worker="url"} value.
  auto per_worker = [&](const char* name, const char* type, const char* help, auto value) {
    head(&out, name, type, help);
    for (int i = 0; i < ws.size(); ++i)
      out += fmt::format("{}{{worker=\"{}\"}} {}\n", name, label(ws.at(i).url), value(ws.at(i)));
  };
  per_worker("ember_router:worker_kv_publishing", "gauge",
             "1 while the worker publishes its prefix cache (GET /kv_events answers; exact policy).",
             [](const Worker& w) { return w.kv.publishing() ? 1 : 0; });
  per_worker("ember_router:worker_kv_cached_blocks", "gauge", "Block hashes the worker's prefix cache holds, as published.",
             [](const Worker& w) { return w.kv.n_published(); });
  per_worker("ember_router:worker_kv_active_blocks", "gauge",
             "Blocks of the requests in flight on the worker (distinct prompt blocks plus one per request; exact policy).",
             [](const Worker& w) { return w.kv.active_blocks(); });
  per_worker("ember_router:worker_kv_events_total", "counter",
             "Prefix-cache events (stored, evicted) received from the worker.",
             [](const Worker& w) { return w.kv.n_events(); });
  per_worker("ember_router:worker_kv_snapshots_total", "counter",
             "Whole snapshots of the worker's prefix cache received (first poll, restart, or too far behind).",
             [](const Worker& w) { return w.kv.n_resets(); });
  per_worker("ember_router:worker_kv_poll_errors_total", "counter", "Failed polls of the worker's GET /kv_events.",
             [](const Worker& w) { return w.kv_poll_errors.load(); });
  std::lock_guard<std::mutex> lk(mu_);
  head(&out, "ember_router:requests_routed_total", "counter",
       "Routing decisions by reason (affinity, load, round_robin, random, exact).");
  for (const char* r : {"affinity", "load", "round_robin", "random", "exact"}) {
    auto it = routed_.find(r);
    out += fmt::format("ember_router:requests_routed_total{{reason=\"{}\"}} {}\n", r, it == routed_.end() ? 0 : it->second);
  }
  head(&out, "ember_router:affinity_hit_rate", "gauge",
       "Share of cache-aware routed requests sent to a worker by prefix match (0..1).");
  out += fmt::format("ember_router:affinity_hit_rate {}\n", keyed_ ? static_cast<double>(affinity_) / keyed_ : 0.0);
  head(&out, "ember_router:prefix_match_ratio", "gauge",
       "Prompt bytes the chosen worker's tree matched, over all prompt bytes routed (0..1).");
  out += fmt::format("ember_router:prefix_match_ratio {}\n", key_bytes_ > 0 ? matched_bytes_ / key_bytes_ : 0.0);
  head(&out, "ember_router:exact_cached_block_ratio", "gauge",
       "Exact policy: prompt blocks the chosen worker held (published or in flight), over all prompt blocks routed (0..1).");
  out += fmt::format("ember_router:exact_cached_block_ratio {}\n", prompt_blocks_ > 0 ? cached_blocks_ / prompt_blocks_ : 0.0);
  head(&out, "ember_router:exact_fallbacks_total", "counter",
       "Exact policy: requests routed by cache_aware instead (no token ids, or no worker publishes).");
  out += fmt::format("ember_router:exact_fallbacks_total {}\n", exact_fallbacks_);
  head(&out, "ember_router:tokenize_failures_total", "counter", "Exact policy: prompts no worker's /tokenize could tokenize.");
  out += fmt::format("ember_router:tokenize_failures_total {}\n", tokenize_failures_);
  head(&out, "ember_router:retries_total", "counter", "Requests sent again to another worker after a failure before any byte reached the client.");
  out += fmt::format("ember_router:retries_total {}\n", retries_);
  head(&out, "ember_router:stream_errors_total", "counter", "Streams that broke after events were sent (the client got an error event).");
  out += fmt::format("ember_router:stream_errors_total {}\n", stream_errors_);
  head(&out, "ember_router:no_worker_total", "counter", "Requests refused because no healthy worker could take them.");
  out += fmt::format("ember_router:no_worker_total {}\n", no_worker_);
  head(&out, "ember_router:http_requests_total", "counter", "HTTP answers of the router by status.");
  for (const auto& [status, n] : http_) out += fmt::format("ember_router:http_requests_total{{status=\"{}\"}} {}\n", status, n);
  ttfb_.render("ember_router:time_to_first_byte_seconds", "Seconds from a request's arrival to its first byte to the client.", &out);
  e2e_.render("ember_router:e2e_request_latency_seconds", "Seconds from a request's arrival to its end, through the router.", &out);
  return out;
}

}  // namespace ember::router
