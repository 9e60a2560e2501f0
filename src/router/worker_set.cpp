// Workers, health checks and the routing decision; see worker_set.h.
#include "router/worker_set.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include <fmt/format.h>

namespace ember::router {

const char* routing_policy_name(RoutingPolicy p) {
  switch (p) {
    case RoutingPolicy::kCacheAware: return "cache_aware";
    case RoutingPolicy::kLeastLoaded: return "least_loaded";
    case RoutingPolicy::kRoundRobin: return "round_robin";
    case RoutingPolicy::kRandom: return "random";
    case RoutingPolicy::kExact: return "exact";
  }
  return "?";
}

Result<RoutingPolicy> parse_routing_policy(const std::string& s) {
  for (RoutingPolicy p : {RoutingPolicy::kCacheAware, RoutingPolicy::kLeastLoaded, RoutingPolicy::kRoundRobin,
                          RoutingPolicy::kRandom, RoutingPolicy::kExact})
    if (s == routing_policy_name(p)) return p;
  return Status::errorf("unknown routing policy '{}' (cache_aware, exact, least_loaded, round_robin, random)", s);
}

const char* route_reason_name(RouteReason r) {
  switch (r) {
    case RouteReason::kAffinity: return "affinity";
    case RouteReason::kLoad: return "load";
    case RouteReason::kRoundRobin: return "round_robin";
    case RouteReason::kRandom: return "random";
    case RouteReason::kExact: return "exact";
  }
  return "?";
}

Result<std::unique_ptr<WorkerSet>> WorkerSet::create(const std::vector<std::string>& urls, const RoutingConfig& cfg) {
  if (urls.empty()) return Status::error("no workers");
  if (!(cfg.cache_threshold >= 0 && cfg.cache_threshold <= 1)) return Status::error("cache threshold must be in [0, 1]");
  if (!(cfg.overlap_weight >= 0 && cfg.overlap_weight <= 1000)) return Status::error("overlap weight must be in [0, 1000]");
  if (!(cfg.kv_poll_interval_s > 0 && cfg.kv_poll_interval_s <= 3600))
    return Status::error("KV event poll interval must be in (0, 3600] s");
  std::unique_ptr<WorkerSet> ws(new WorkerSet(cfg));
  for (const std::string& u : urls) {
    auto addr = parse_http_url(u);
    if (!addr) return Status::errorf("worker '{}': {}", u, addr.status().message());
    for (const auto& w : ws->workers_)
      if (w->addr.host == addr->host && w->addr.port == addr->port && w->addr.path == addr->path)
        return Status::errorf("worker '{}' is listed twice", u);
    ws->workers_.push_back(std::make_unique<Worker>(u, *addr, cfg.max_tree_bytes));
  }
  uint64_t seed = cfg.seed ? cfg.seed : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  ws->rng_.seed(seed);
  return ws;
}

WorkerSet::~WorkerSet() { stop(); }

int WorkerSet::least_loaded(const std::vector<int>& exclude) {
  int best = -1;
  int best_load = std::numeric_limits<int>::max();
  size_t best_bytes = 0;
  const int n = size();
  std::lock_guard<std::mutex> lk(mu_);
  // Start at a rotating offset so ties spread over the workers.
  const size_t start = rr_++;
  for (int k = 0; k < n; ++k) {
    const int i = static_cast<int>((start + static_cast<size_t>(k)) % static_cast<size_t>(n));
    Worker& w = *workers_[static_cast<size_t>(i)];
    if (!w.healthy.load() || std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
    const int load = w.in_flight.load();
    size_t bytes;
    {
      std::lock_guard<std::mutex> tl(w.tree_mu);
      bytes = w.tree.bytes();
    }
    // Fewest in flight; among equals the smallest tree (the most free cache).
    if (load < best_load || (load == best_load && bytes < best_bytes)) {
      best = i;
      best_load = load;
      best_bytes = bytes;
    }
  }
  return best;
}

RouteDecision WorkerSet::choose(const std::string& key, const std::vector<int>& exclude) {
  RouteDecision d;
  std::vector<int> cand;
  for (int i = 0; i < size(); ++i)
    if (workers_[static_cast<size_t>(i)]->healthy.load() && std::find(exclude.begin(), exclude.end(), i) == exclude.end())
      cand.push_back(i);
  if (cand.empty()) return d;
  switch (cfg_.policy) {
    case RoutingPolicy::kRandom: {
      std::lock_guard<std::mutex> lk(mu_);
      d.worker = cand[std::uniform_int_distribution<size_t>(0, cand.size() - 1)(rng_)];
      d.reason = RouteReason::kRandom;
      return d;
    }
    case RoutingPolicy::kRoundRobin: {
      std::lock_guard<std::mutex> lk(mu_);
      d.worker = cand[rr_++ % cand.size()];
      d.reason = RouteReason::kRoundRobin;
      return d;
    }
    case RoutingPolicy::kLeastLoaded:
      d.worker = least_loaded(exclude);
      d.reason = RouteReason::kLoad;
      return d;
    case RoutingPolicy::kCacheAware:
    case RoutingPolicy::kExact: break;  // exact: choose_exact falls back to cache_aware here
  }
  int min_load = std::numeric_limits<int>::max(), max_load = 0;
  for (int i : cand) {
    const int l = workers_[static_cast<size_t>(i)]->in_flight.load();
    min_load = std::min(min_load, l);
    max_load = std::max(max_load, l);
  }
  const bool imbalanced = max_load - min_load > cfg_.balance_abs_threshold &&
                          static_cast<double>(max_load) > cfg_.balance_rel_threshold * min_load;
  if (!imbalanced && !key.empty()) {
    int best = -1;
    size_t best_match = 0;
    int best_load = 0;
    for (int i : cand) {
      Worker& w = *workers_[static_cast<size_t>(i)];
      size_t m;
      {
        std::lock_guard<std::mutex> tl(w.tree_mu);
        m = w.tree.match(key);
      }
      const int load = w.in_flight.load();
      if (best < 0 || m > best_match || (m == best_match && load < best_load)) {
        best = i;
        best_match = m;
        best_load = load;
      }
    }
    if (best >= 0 && static_cast<double>(best_match) > cfg_.cache_threshold * static_cast<double>(key.size())) {
      d.worker = best;
      d.reason = RouteReason::kAffinity;
      d.matched = best_match;
    }
  }
  if (d.worker < 0) {
    d.worker = least_loaded(exclude);
    d.reason = RouteReason::kLoad;
    if (d.worker < 0) return d;
    Worker& w = *workers_[static_cast<size_t>(d.worker)];
    std::lock_guard<std::mutex> tl(w.tree_mu);
    d.matched = w.tree.match(key);
  }
  if (!key.empty()) {
    Worker& w = *workers_[static_cast<size_t>(d.worker)];
    std::lock_guard<std::mutex> tl(w.tree_mu);
    w.tree.insert(key);
  }
  return d;
}

void WorkerSet::mark_failed(int i, const std::string& why) {
  workers_[static_cast<size_t>(i)]->failures.fetch_add(1);
  set_health(i, false, why);
}

std::string WorkerSet::last_error(int i) const {
  std::lock_guard<std::mutex> lk(mu_);
  return workers_[static_cast<size_t>(i)]->last_error;
}

void WorkerSet::set_health(int i, bool ok, const std::string& why) {
  Worker& w = *workers_[static_cast<size_t>(i)];
  std::function<void(const std::string&)> log;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!ok) w.last_error = why;
    log = log_;
  }
  const bool was = w.healthy.exchange(ok);
  if (was != ok && log) log(ok ? fmt::format("worker {} is up", w.url) : fmt::format("worker {} is down: {}", w.url, why));
  if (!ok && was) {
    // Its cache is gone or unreachable: forget what was routed there.
    {
      std::lock_guard<std::mutex> tl(w.tree_mu);
      w.tree.clear();
    }
    w.kv.clear("the worker is down");
  }
}

void WorkerSet::check_health_once(double timeout_s) {
  for (int i = 0; i < size(); ++i) {
    Worker& w = *workers_[static_cast<size_t>(i)];
    HttpClientRequest req;
    req.method = "GET";
    req.host = w.addr.host;
    req.port = w.addr.port;
    req.target = w.addr.path + "/health";
    req.connect_timeout_s = timeout_s;
    req.timeout_s = timeout_s;
    req.max_body_bytes = 1 << 16;
    auto r = http_request(req);
    if (r && r->status == 200) {
      set_health(i, true, "");
    } else {
      w.health_failures.fetch_add(1);
      set_health(i, false, r ? fmt::format("GET /health answered {}", r->status) : r.status().message());
    }
  }
}

void WorkerSet::start_health_checks(double interval_s, double timeout_s, std::function<void(const std::string&)> log) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    log_ = std::move(log);
  }
  if (health_.joinable()) return;
  health_ = std::thread([this, interval_s, timeout_s] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(health_mu_);
        if (health_cv_.wait_for(lk, std::chrono::duration<double>(interval_s), [this] { return stop_; })) return;
      }
      check_health_once(timeout_s);
    }
  });
}

void WorkerSet::stop() {
  {
    std::lock_guard<std::mutex> lk(health_mu_);
    stop_ = true;
  }
  health_cv_.notify_all();
  if (health_.joinable()) health_.join();
  if (kv_poll_.joinable()) kv_poll_.join();
}

}  // namespace ember::router
