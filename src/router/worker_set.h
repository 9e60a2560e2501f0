// The data-parallel workers behind `ember router`: their addresses, health
// (a background thread asks each GET /health every interval; a failed proxy
// connection marks a worker down at once and the next good check brings it
// back), the router's own load figures (requests in flight per worker), the
// approximate prefix tree of what was routed to each, the published prefix
// cache of each (kv_index.h; a background thread polls GET /kv_events for
// --policy exact), and the choice of a worker for a request.
//
// Threading: every method may be called from any thread. Per-worker counters
// are atomics; each tree has its own mutex; the health thread is owned and
// joined by stop() / the destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/http_client.h"
#include "core/status.h"
#include "router/kv_index.h"
#include "router/prefix_tree.h"

namespace ember::router {

enum class RoutingPolicy {
  kCacheAware,   // SGLang's: the longest prefix match above a threshold, else the least loaded
  kLeastLoaded,  // fewest requests in flight
  kRoundRobin,
  kRandom,
  // Dynamo's KV-aware cost from the block hashes workers publish: the worker
  // with the fewest uncached prompt blocks to prefill plus active blocks
  // (kv_index.h); cache_aware where no worker publishes.
  kExact,
};
const char* routing_policy_name(RoutingPolicy p);
Result<RoutingPolicy> parse_routing_policy(const std::string& s);

struct RoutingConfig {
  RoutingPolicy policy = RoutingPolicy::kCacheAware;
  // Cache-aware: a worker whose tree matches more than this fraction of the
  // key gets the request (SGLang's cache_threshold).
  double cache_threshold = 0.5;
  // Cache-aware: when the loads are out of balance (max - min above the
  // absolute threshold and max above rel times min) the least loaded worker
  // gets the request whatever the match (SGLang's defaults).
  int balance_abs_threshold = 32;
  double balance_rel_threshold = 1.0001;
  size_t max_tree_bytes = size_t{16} << 20;  // per worker
  uint64_t seed = 0;                         // random policy; 0: from the clock
  // Exact: cost = overlap_weight * blocks to prefill + active blocks.
  double overlap_weight = 1.0;
  double kv_poll_interval_s = 0.1;  // GET /kv_events of each worker this often
  std::string worker_api_key;       // sent as "Bearer KEY" on the router's own calls to workers
};

struct Worker {
  std::string url;  // as given, e.g. "http://127.0.0.1:8001"
  HttpUrl addr;
  std::atomic<bool> healthy{true};
  std::atomic<int> in_flight{0};             // requests the router is proxying to it now
  std::atomic<int64_t> requests{0};          // routed to it (attempts)
  std::atomic<int64_t> failures{0};          // attempts that failed at the transport
  std::atomic<int64_t> health_failures{0};   // failed health checks
  std::string last_error;                    // guarded by WorkerSet's mutex
  std::mutex tree_mu;
  PrefixTree tree;
  KvIndex kv;                                // its published prefix cache (exact policy)
  std::atomic<int64_t> kv_poll_errors{0};
  std::atomic<bool> kv_warned{false};        // "does not publish" was logged

  Worker(std::string u, HttpUrl a, size_t max_tree_bytes) : url(std::move(u)), addr(std::move(a)), tree(max_tree_bytes) {}
};

// Why a worker was chosen (a metrics label).
enum class RouteReason { kAffinity, kLoad, kRoundRobin, kRandom, kExact };
const char* route_reason_name(RouteReason r);

struct RouteDecision {
  int worker = -1;  // -1: no healthy worker (outside `exclude`)
  RouteReason reason = RouteReason::kLoad;
  size_t matched = 0;  // key bytes the chosen worker's tree matched
  // Exact policy: the prompt's full-block hashes (held as active on the
  // chosen worker until end_request), its blocks and those cached there.
  std::vector<uint64_t> hashes;
  bool active = false;
  size_t prompt_blocks = 0, cached_blocks = 0;
};

class WorkerSet {
 public:
  // urls: "http://host:port" each; errors name the bad one.
  static Result<std::unique_ptr<WorkerSet>> create(const std::vector<std::string>& urls, const RoutingConfig& cfg);
  ~WorkerSet();

  int size() const { return static_cast<int>(workers_.size()); }
  Worker& at(int i) { return *workers_[static_cast<size_t>(i)]; }
  const Worker& at(int i) const { return *workers_[static_cast<size_t>(i)]; }
  const RoutingConfig& config() const { return cfg_; }

  // Picks a healthy worker not in `exclude` for a request with this key and
  // records the key in the chosen worker's tree.
  RouteDecision choose(const std::string& key, const std::vector<int>& exclude);
  // Exact policy: picks the worker of least cost for a prompt of these
  // token ids (the worker's own tokenization); cache_aware (choose) when
  // `tokens` is empty or no candidate publishes its cache. Call
  // end_request(d) when the attempt ends.
  RouteDecision choose_exact(const std::vector<int32_t>& tokens, const std::string& key, const std::vector<int>& exclude);
  void end_request(const RouteDecision& d);
  // POSTs `body` to /tokenize of a healthy worker (round robin; another on
  // a transport failure) with the client's Authorization header (or none);
  // the token ids. cancel_fd as HttpClientRequest's.
  Result<std::vector<int32_t>> tokenize(const std::string& body, const std::string* authorization, int cancel_fd);

  // The least loaded healthy worker (for requests without affinity), or -1.
  int least_loaded(const std::vector<int>& exclude);

  // Marks a worker down after a transport failure (the health thread brings it back).
  void mark_failed(int i, const std::string& why);
  std::string last_error(int i) const;

  // Starts the health thread: GET {url}/health every interval_s (timeout
  // timeout_s). `log` (may be empty) gets a line when a worker goes down or up.
  void start_health_checks(double interval_s, double timeout_s, std::function<void(const std::string&)> log);
  // Runs one round of health checks now (tests; the start-up wait).
  void check_health_once(double timeout_s);
  // Starts the thread that polls each worker's GET /kv_events every
  // cfg.kv_poll_interval_s (exact policy).
  void start_kv_polling(double timeout_s);
  // One round of polls now (tests; start-up).
  void poll_kv_once(double timeout_s);
  void stop();

 private:
  WorkerSet(const RoutingConfig& cfg) : cfg_(cfg) {}
  void set_health(int i, bool ok, const std::string& why);

  RoutingConfig cfg_;
  std::vector<std::unique_ptr<Worker>> workers_;
  mutable std::mutex mu_;  // last_error, rng, round-robin cursor
  std::mt19937_64 rng_;
  size_t rr_ = 0;
  std::function<void(const std::string&)> log_;

  std::thread health_, kv_poll_;
  std::mutex health_mu_;
  std::condition_variable health_cv_;
  bool stop_ = false;
};

}  // namespace ember::router
