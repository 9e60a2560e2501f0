// Block reference counting, free/LRU queue and prefix cache; see block_manager.h.
#include "engine/kv/block_manager.h"

#include <algorithm>

#include <fmt/format.h>

namespace ember {

BlockManager::BlockManager(int32_t n_blocks, int block_size, bool enable_prefix_caching)
    : n_blocks_(std::max<int32_t>(0, n_blocks)),
      block_size_(std::max(1, block_size)),
      prefix_caching_(enable_prefix_caching),
      ref_(n_blocks_, 0),
      free_pos_(n_blocks_),
      in_free_(n_blocks_, 1),
      cached_(n_blocks_, 0),
      published_(n_blocks_, 0),
      hash_(n_blocks_, 0),
      parent_(n_blocks_, 0) {
  for (int32_t b = 0; b < n_blocks_; ++b) free_pos_[b] = free_.insert(free_.end(), b);
  if (prefix_caching_) tokens_.resize(static_cast<size_t>(n_blocks_) * block_size_);
}

void BlockManager::take_from_free(int32_t b) {
  free_.erase(free_pos_[b]);
  in_free_[b] = 0;
  if (cached_[b]) --n_cached_free_;
}

void BlockManager::uncache(int32_t b) {
  if (!cached_[b]) return;
  by_hash_.erase(hash_[b]);
  cached_[b] = 0;
  if (published_[b]) {
    published_[b] = 0;
    if (events_) events_->removed(hash_[b]);
  }
  if (in_free_[b]) --n_cached_free_;
}

int32_t BlockManager::pop_free() {
  if (free_.empty()) return -1;
  const int32_t b = free_.front();
  take_from_free(b);
  if (cached_[b]) {
    uncache(b);
    ++counters_.evictions;
  }
  ref_[b] = 1;
  return b;
}

void BlockManager::release(int32_t b) {
  if (--ref_[b] > 0) return;
  if (cached_[b]) {
    free_pos_[b] = free_.insert(free_.end(), b);  // most recently used: evicted last
    ++n_cached_free_;
  } else {
    free_pos_[b] = free_.insert(free_.begin(), b);
  }
  in_free_[b] = 1;
}

bool BlockManager::allocate(std::vector<int32_t>& table, int n) {
  if (n <= 0) return true;
  if (n > n_free()) return false;
  for (int i = 0; i < n; ++i) table.push_back(pop_free());
  return true;
}

void BlockManager::free(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it)
    if (*it >= 0) release(*it);
  table.clear();
}

void BlockManager::release_entry(std::vector<int32_t>& table, size_t i) {
  if (table[i] < 0) return;
  release(table[i]);
  table[i] = -1;
}

void BlockManager::share(const std::vector<int32_t>& table) {
  for (int32_t b : table)
    if (b >= 0) ++ref_[b];
}

uint64_t BlockManager::group_key(uint64_t hash, int g) {
  if (g == 0) return hash;
  const int32_t tag = g;
  return chain_hash(hash, &tag, 1);
}

int32_t BlockManager::lookup(uint64_t key, uint64_t parent, const int32_t* tokens) const {
  if (!prefix_caching_) return -1;
  auto it = by_hash_.find(key);
  if (it == by_hash_.end()) return -1;
  const int32_t b = it->second;
  if (parent_[b] != parent ||
      !std::equal(tokens, tokens + block_size_, tokens_.data() + static_cast<int64_t>(b) * block_size_))
    return -1;
  return b;
}

void BlockManager::acquire(int32_t b) {
  if (ref_[b] == 0) take_from_free(b);
  ++ref_[b];
}

int32_t BlockManager::make_private(std::vector<int32_t>& table, size_t i) {
  const int32_t old = table[i];
  if (ref_[old] == 1) return -1;
  const int32_t b = pop_free();
  if (b < 0) return -2;
  --ref_[old];  // still referenced by someone else: never reaches 0 here
  table[i] = b;
  return old;
}

uint64_t BlockManager::chain_hash(uint64_t parent, const int32_t* tokens, int n) {
  // splitmix64-style mixing of the parent hash and each token.
  auto mix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(parent ^ 0x5EEDB10Cull);
  for (int i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

void BlockManager::record_query(int64_t query_tokens, int64_t hit_tokens) {
  ++counters_.queries;
  counters_.query_tokens += query_tokens;
  if (hit_tokens > 0) {
    ++counters_.hits;
    counters_.hit_tokens += hit_tokens;
  }
}

void BlockManager::register_block(int32_t b, uint64_t hash, uint64_t parent, const int32_t* tokens, bool publish) {
  if (!prefix_caching_ || cached_[b] || by_hash_.count(hash)) return;
  by_hash_.emplace(hash, b);
  cached_[b] = 1;
  if (publish && events_) {
    published_[b] = 1;
    events_->stored(hash);
  }
  hash_[b] = hash;
  parent_[b] = parent;
  std::copy(tokens, tokens + block_size_, tokens_.data() + static_cast<int64_t>(b) * block_size_);
  if (in_free_[b]) ++n_cached_free_;
}

Status BlockManager::check(const std::vector<const std::vector<int32_t>*>& tables) const {
  std::vector<int> want(n_blocks_, 0);
  for (const auto* t : tables)
    for (int32_t b : *t) {
      if (b == -1) continue;
      if (b < 0 || b >= n_blocks_) return Status::errorf("block id {} out of range", b);
      ++want[b];
    }
  int32_t n_free_seen = 0, n_cached_free = 0;
  for (int32_t b : free_) {
    if (!in_free_[b]) return Status::errorf("block {} in the free queue but not marked free", b);
    ++n_free_seen;
    if (cached_[b]) ++n_cached_free;
  }
  if (n_free_seen != n_free()) return Status::error("free queue size mismatch");
  if (n_cached_free != n_cached_free_)
    return Status::errorf("cached-free count {} != {}", n_cached_free_, n_cached_free);
  for (int32_t b = 0; b < n_blocks_; ++b) {
    if (ref_[b] != want[b]) return Status::errorf("block {}: reference count {} but {} table entries", b, ref_[b], want[b]);
    if ((ref_[b] == 0) != static_cast<bool>(in_free_[b]))
      return Status::errorf("block {}: reference count {} but free flag {}", b, ref_[b], static_cast<int>(in_free_[b]));
    if (cached_[b]) {
      auto it = by_hash_.find(hash_[b]);
      if (it == by_hash_.end() || it->second != b) return Status::errorf("block {}: cache index mismatch", b);
    }
  }
  for (const auto& [h, b] : by_hash_)
    if (!cached_[b] || hash_[b] != h) return Status::errorf("cache entry for block {} is stale", b);
  return Status::ok();
}

}  // namespace ember
