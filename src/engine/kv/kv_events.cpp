// The prefix cache's published block hashes; see kv_events.h.
#include "engine/kv/kv_events.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace ember {

namespace {
uint64_t new_epoch() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t e = ((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ t) & ((uint64_t{1} << 53) - 1);
  return e ? e : 1;  // 53 bits: exact in JSON readers that use doubles; 0 means "none"
}
}  // namespace

KvEventLog::KvEventLog(int block_size, size_t max_events)
    : block_size_(block_size), max_events_(std::max<size_t>(1, max_events)), epoch_(new_epoch()) {}

void KvEventLog::push(uint64_t hash, bool stored) {
  std::lock_guard<std::mutex> lk(mu_);
  if (stored) {
    cached_.insert(hash);
  } else {
    cached_.erase(hash);
  }
  ring_.push_back({hash, stored});
  if (ring_.size() > max_events_) ring_.pop_front();
  ++seq_;
}

void KvEventLog::stored(uint64_t hash) { push(hash, true); }
void KvEventLog::removed(uint64_t hash) { push(hash, false); }

size_t KvEventLog::n_cached() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_.size();
}

KvEventLog::Delta KvEventLog::since(uint64_t epoch, uint64_t seq, size_t max_events) const {
  Delta d;
  d.epoch = epoch_;
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t first = seq_ - ring_.size();  // the ring holds events first+1 .. seq_
  if (epoch != epoch_ || seq > seq_ || seq < first) {
    d.reset = true;
    d.seq = seq_;
    d.snapshot.assign(cached_.begin(), cached_.end());
    return d;
  }
  const uint64_t n = std::min<uint64_t>(seq_ - seq, std::max<size_t>(1, max_events));
  const auto begin = ring_.begin() + static_cast<std::ptrdiff_t>(seq - first);
  d.events.assign(begin, begin + static_cast<std::ptrdiff_t>(n));
  d.seq = seq + n;
  d.more = d.seq < seq_;
  return d;
}

}  // namespace ember
