// A worker's published prefix cache as the router sees it; see kv_index.h.
#include "router/kv_index.h"

#include <iterator>

#include <fmt/format.h>

#include "engine/kv/block_manager.h"

namespace ember::router {

using json = nlohmann::json;

namespace {
bool as_u64(const json& x, uint64_t* v) {
  if (x.is_number_unsigned()) {
    *v = x.get<uint64_t>();
    return true;
  }
  if (x.is_number_integer() && x.get<int64_t>() >= 0) {
    *v = static_cast<uint64_t>(x.get<int64_t>());
    return true;
  }
  return false;
}
}  // namespace

std::vector<uint64_t> block_hashes(const std::vector<int32_t>& tokens, int block_size) {
  std::vector<uint64_t> out;
  if (block_size <= 0) return out;
  const size_t n = tokens.size() / static_cast<size_t>(block_size);
  out.reserve(n);
  uint64_t parent = 0;
  for (size_t i = 0; i < n; ++i) {
    parent = BlockManager::chain_hash(parent, tokens.data() + i * static_cast<size_t>(block_size), block_size);
    out.push_back(parent);
  }
  return out;
}

Status KvIndex::apply(const json& a) {
  auto bad = [&](const char* what) {
    clear(fmt::format("malformed /kv_events answer: {}", what));
    return Status::errorf("malformed /kv_events answer: {}", what);
  };
  if (!a.is_object()) return bad("not an object");
  auto num = [&](const char* k, uint64_t* v) {
    auto it = a.find(k);
    return it != a.end() && as_u64(*it, v);
  };
  uint64_t epoch = 0, seq = 0, bs = 0;
  if (!num("epoch", &epoch) || !num("seq", &seq) || !num("block_size", &bs) || bs == 0 || bs > 65536)
    return bad("epoch, seq or block_size");
  auto reset = a.find("reset");
  const bool is_reset = reset != a.end() && reset->is_boolean() && reset->get<bool>();
  std::lock_guard<std::mutex> lk(mu_);
  if (is_reset) {
    auto h = a.find("hashes");
    if (h == a.end() || !h->is_array()) {
      cached_.clear();
      publishing_ = false;
      return Status::error("malformed /kv_events answer: a reset without hashes");
    }
    cached_.clear();
    for (const json& x : *h)
      if (uint64_t v; as_u64(x, &v)) cached_.insert(v);
    ++resets_;
  } else {
    auto ev = a.find("events");
    if (epoch != epoch_ || ev == a.end() || !ev->is_array()) {
      cached_.clear();
      epoch_ = 0;
      seq_ = 0;
      publishing_ = false;
      return Status::error("malformed /kv_events answer: a delta of another epoch or without events");
    }
    for (const json& e : *ev) {
      uint64_t h;
      if (!e.is_array() || e.size() != 2 || !as_u64(e[1], &h)) continue;
      if (e[0] == 1) {
        cached_.insert(h);
      } else {
        cached_.erase(h);
      }
      ++events_;
    }
  }
  epoch_ = epoch;
  seq_ = seq;
  block_size_ = static_cast<int>(bs);
  publishing_ = true;
  last_error_.clear();
  return Status::ok();
}

void KvIndex::clear(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  publishing_ = false;
  cached_.clear();
  epoch_ = seq_ = 0;
  last_error_ = why;
}

std::string KvIndex::next_query() const {
  std::lock_guard<std::mutex> lk(mu_);
  return fmt::format("epoch={}&since={}", epoch_, seq_);
}

bool KvIndex::publishing() const {
  std::lock_guard<std::mutex> lk(mu_);
  return publishing_;
}

int KvIndex::block_size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return block_size_;
}

bool KvIndex::held(uint64_t h, Clock::time_point now) const {
  if (cached_.count(h)) return true;
  auto it = pending_.find(h);
  return it != pending_.end() && (it->second.count > 0 || it->second.until > now);
}

size_t KvIndex::overlap(const std::vector<uint64_t>& hashes, size_t max_blocks) const {
  std::lock_guard<std::mutex> lk(mu_);
  const auto now = Clock::now();
  size_t k = 0;
  while (k < hashes.size() && k < max_blocks && held(hashes[k], now)) ++k;
  return k;
}

int64_t KvIndex::active_blocks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_active_hashes_ + n_active_requests_;
}

void KvIndex::add_active(const std::vector<uint64_t>& hashes) {
  std::lock_guard<std::mutex> lk(mu_);
  ++n_active_requests_;
  for (uint64_t h : hashes)
    if (pending_[h].count++ == 0) ++n_active_hashes_;
}

void KvIndex::end_active(const std::vector<uint64_t>& hashes, Clock::duration grace) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto now = Clock::now();
  --n_active_requests_;
  for (uint64_t h : hashes) {
    auto it = pending_.find(h);
    if (it == pending_.end() || it->second.count == 0) continue;
    if (--it->second.count == 0) {
      --n_active_hashes_;
      it->second.until = now + grace;
    }
  }
  // Drop what expired, every 64 request ends.
  if (++ends_since_sweep_ < 64) return;
  ends_since_sweep_ = 0;
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->second.count == 0 && it->second.until <= now ? pending_.erase(it) : std::next(it);
}

size_t KvIndex::n_published() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_.size();
}

int64_t KvIndex::n_resets() const {
  std::lock_guard<std::mutex> lk(mu_);
  return resets_;
}

int64_t KvIndex::n_events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return events_;
}

std::string KvIndex::last_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_error_;
}

}  // namespace ember::router
