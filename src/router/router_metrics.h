// The router's own Prometheus metrics (prefix `ember_router:`): per worker
// its health, the requests in flight (its load as the router sees it), the
// requests routed there and the failures; how requests were routed (by
// prefix affinity or by load), the affinity hit rate and the share of prompt
// bytes the chosen worker's tree matched; for the exact policy each worker's
// published cache and active blocks and the share of prompt blocks routed
// to a worker that holds them; retries, broken streams, requests
// no worker could take; time to first byte and end-to-end latency through
// the router; HTTP answers by status. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "router/worker_set.h"
#include "server/metrics.h"

namespace ember::router {

class RouterMetrics {
 public:
  RouterMetrics();
  // A routing decision for a request with a key of key_bytes (cache-aware
  // policy: matched bytes of the chosen worker's tree).
  void observe_route(RouteReason reason, size_t key_bytes, size_t matched);
  // Exact policy: a request's routing (its prompt's blocks and those cached
  // on the chosen worker, or a fallback to cache_aware).
  void observe_exact(const RouteDecision& d);
  void observe_tokenize_failure();
  void observe_retry();
  void observe_stream_error();
  void observe_no_worker();
  void observe_http(int status);
  // A proxied request that ended: seconds to its first byte to the client
  // (< 0: none) and to its end.
  void observe_latency(double ttfb, double e2e);
  std::string render(const WorkerSet& workers) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> routed_;  // by reason
  int64_t keyed_ = 0, affinity_ = 0;       // requests with a key; routed by affinity
  double key_bytes_ = 0, matched_bytes_ = 0;
  int64_t retries_ = 0, stream_errors_ = 0, no_worker_ = 0;
  int64_t exact_ = 0, exact_fallbacks_ = 0, tokenize_failures_ = 0;
  double prompt_blocks_ = 0, cached_blocks_ = 0;
  std::map<int, int64_t> http_;
  Histogram ttfb_, e2e_;
};

}  // namespace ember::router
