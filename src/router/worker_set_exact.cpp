// WorkerSet's exact policy: the workers' published prefix caches (polled at
// GET /kv_events), tokenization by a worker, and the cost of sending a
// prompt to each worker; see worker_set.h and kv_index.h.
#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "router/worker_set.h"

namespace ember::router {

using json = nlohmann::json;

namespace {

void add_auth(HttpClientRequest* req, const std::string& key) {
  if (!key.empty()) req->headers.emplace_back("Authorization", "Bearer " + key);
}

}  // namespace

RouteDecision WorkerSet::choose_exact(const std::vector<int32_t>& tokens, const std::string& key,
                                      const std::vector<int>& exclude) {
  std::vector<int> cand;
  int bs0 = 0;
  for (int i = 0; i < size(); ++i) {
    Worker& w = *workers_[static_cast<size_t>(i)];
    if (!w.healthy.load() || std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
    cand.push_back(i);
    if (bs0 == 0 && w.kv.publishing()) bs0 = w.kv.block_size();
  }
  if (cand.empty() || tokens.empty() || bs0 <= 0) return choose(key, exclude);  // nothing to be exact about
  const size_t n = tokens.size();
  std::map<int, std::vector<uint64_t>> hashes;  // by block size
  RouteDecision d;
  d.reason = RouteReason::kExact;
  double best_cost = std::numeric_limits<double>::infinity();
  int best_load = 0;
  size_t start;
  {
    std::lock_guard<std::mutex> lk(mu_);
    start = rr_++;  // ties: a rotating order
  }
  for (size_t k = 0; k < cand.size(); ++k) {
    const int i = cand[(start + k) % cand.size()];
    Worker& w = *workers_[static_cast<size_t>(i)];
    const bool pub = w.kv.publishing();
    const int bs = pub ? std::max(1, w.kv.block_size()) : bs0;
    auto it = hashes.find(bs);
    if (it == hashes.end()) it = hashes.emplace(bs, block_hashes(tokens, bs)).first;
    const size_t total = (n + static_cast<size_t>(bs) - 1) / static_cast<size_t>(bs);
    const size_t max_blocks = (n - 1) / static_cast<size_t>(bs);  // the engine computes the last token
    size_t cached;
    if (pub) {
      cached = w.kv.overlap(it->second, max_blocks);
    } else {
      // A worker that does not publish: its approximate tree's share of the key.
      size_t m;
      {
        std::lock_guard<std::mutex> tl(w.tree_mu);
        m = w.tree.match(key);
      }
      cached = key.empty() ? 0 : static_cast<size_t>(static_cast<double>(max_blocks) * static_cast<double>(m) /
                                                     static_cast<double>(key.size()));
    }
    const double cost = cfg_.overlap_weight * static_cast<double>(total - cached) +
                        static_cast<double>(w.kv.active_blocks());
    const int load = w.in_flight.load();
    if (d.worker < 0 || cost < best_cost || (cost == best_cost && load < best_load)) {
      d.worker = i;
      best_cost = cost;
      best_load = load;
      d.prompt_blocks = total;
      d.cached_blocks = cached;
      d.hashes = it->second;
    }
  }
  Worker& w = *workers_[static_cast<size_t>(d.worker)];
  w.kv.add_active(d.hashes);
  d.active = true;
  if (!key.empty()) {
    std::lock_guard<std::mutex> tl(w.tree_mu);
    d.matched = w.tree.match(key);
    w.tree.insert(key);  // for the fallback, should the worker stop publishing
  }
  return d;
}

void WorkerSet::end_request(const RouteDecision& d) {
  if (!d.active || d.worker < 0) return;
  // Held until the worker's next delta surely has them.
  const auto grace = std::chrono::duration_cast<KvIndex::Clock::duration>(
      std::chrono::duration<double>(2 * cfg_.kv_poll_interval_s + 0.25));
  workers_[static_cast<size_t>(d.worker)]->kv.end_active(d.hashes, grace);
}

Result<std::vector<int32_t>> WorkerSet::tokenize(const std::string& body, const std::string* authorization,
                                                 int cancel_fd) {
  std::vector<int> order;
  size_t start;
  {
    std::lock_guard<std::mutex> lk(mu_);
    start = rr_++;
  }
  for (size_t k = 0; k < workers_.size(); ++k) {
    const int i = static_cast<int>((start + k) % workers_.size());
    if (workers_[static_cast<size_t>(i)]->healthy.load()) order.push_back(i);
  }
  std::string last = "no healthy worker";
  for (size_t a = 0; a < order.size() && a < 2; ++a) {
    Worker& w = *workers_[static_cast<size_t>(order[a])];
    HttpClientRequest req;
    req.method = "POST";
    req.host = w.addr.host;
    req.port = w.addr.port;
    req.target = w.addr.path + "/tokenize";
    req.body = body;
    req.headers.emplace_back("Content-Type", "application/json");
    if (authorization) req.headers.emplace_back("Authorization", *authorization);
    req.connect_timeout_s = 5;
    req.timeout_s = 30;
    req.max_body_bytes = size_t{64} << 20;
    req.cancel_fd = cancel_fd;
    auto r = http_request(req);
    if (!r) {
      last = fmt::format("worker {}: {}", w.url, r.status().message());
      continue;  // another worker
    }
    if (r->status != 200) return Status::errorf("worker {}: /tokenize answered {}", w.url, r->status);
    json j = json::parse(r->body, nullptr, false);
    auto t = j.is_object() ? j.find("tokens") : j.end();
    if (j.is_discarded() || t == j.end() || !t->is_array())
      return Status::errorf("worker {}: /tokenize answered no token ids", w.url);
    std::vector<int32_t> ids;
    ids.reserve(t->size());
    for (const json& x : *t) {
      if (!x.is_number_integer()) return Status::errorf("worker {}: /tokenize answered a non-integer token", w.url);
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return ids;
  }
  return Status::error(last);
}

void WorkerSet::poll_kv_once(double timeout_s) {
  for (int i = 0; i < size(); ++i) {
    Worker& w = *workers_[static_cast<size_t>(i)];
    if (!w.healthy.load()) continue;  // cleared when it went down
    const bool was = w.kv.publishing();
    std::string why;
    for (int round = 0; round < 8; ++round) {  // more than 8 x 64K events behind: the next poll goes on
      HttpClientRequest req;
      req.method = "GET";
      req.host = w.addr.host;
      req.port = w.addr.port;
      req.target = w.addr.path + "/kv_events?" + w.kv.next_query() + "&limit=65536";
      add_auth(&req, cfg_.worker_api_key);
      req.connect_timeout_s = timeout_s;
      req.timeout_s = timeout_s;
      req.max_body_bytes = size_t{256} << 20;
      auto r = http_request(req);
      if (!r) {
        why = fmt::format("GET /kv_events: {}", r.status().message());
      } else if (r->status != 200) {
        why = r->status == 401 ? "GET /kv_events answered 401 (give the router the workers' key: --worker-api-key)"
                               : fmt::format("GET /kv_events answered {}", r->status);
      } else {
        json j = json::parse(r->body, nullptr, false);
        if (Status st = w.kv.apply(j); !st) {
          why = st.message();
        } else if (j.value("more", false)) {
          continue;
        }
      }
      break;
    }
    if (!why.empty()) {
      w.kv_poll_errors.fetch_add(1);
      w.kv.clear(why);
    }
    const bool now = w.kv.publishing();
    std::function<void(const std::string&)> log;
    {
      std::lock_guard<std::mutex> lk(mu_);
      log = log_;
    }
    if (now) w.kv_warned.store(false);
    if (log && (was != now || (!now && !w.kv_warned.exchange(true))))
      log(now ? fmt::format("worker {} publishes its prefix cache ({} blocks cached)", w.url, w.kv.n_published())
              : fmt::format("worker {} does not publish its prefix cache ({}); routed by its prefix tree", w.url, why));
  }
}

void WorkerSet::start_kv_polling(double timeout_s) {
  if (kv_poll_.joinable()) return;
  kv_poll_ = std::thread([this, timeout_s] {
    for (;;) {
      poll_kv_once(timeout_s);
      std::unique_lock<std::mutex> lk(health_mu_);
      if (health_cv_.wait_for(lk, std::chrono::duration<double>(cfg_.kv_poll_interval_s), [this] { return stop_; }))
        return;
    }
  });
}

}  // namespace ember::router
