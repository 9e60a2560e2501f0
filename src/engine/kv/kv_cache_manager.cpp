// Block-level KV bookkeeping per request; see kv_cache_manager.h.
#include "engine/kv/kv_cache_manager.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"

namespace ember {

KvCacheManager::KvCacheManager(const KvLayout& layout, int block_size, int32_t n_blocks, bool enable_prefix_caching,
                               int64_t n_swap_pages)
    : layout_(layout),
      block_size_(block_size),
      blocks_(n_blocks, block_size, enable_prefix_caching),
      n_swap_pages_(std::max<int64_t>(0, n_swap_pages)) {}

KvCacheManager::SeqKv& KvCacheManager::kv(const Request& r) {
  auto it = seqs_.find(r.seq_id);
  EMBER_CHECK_MSG(it != seqs_.end(), "request not registered with the KV manager");
  return it->second;
}

const KvCacheManager::SeqKv& KvCacheManager::kv(const Request& r) const {
  auto it = seqs_.find(r.seq_id);
  EMBER_CHECK_MSG(it != seqs_.end(), "request not registered with the KV manager");
  return it->second;
}

void KvCacheManager::add(const Request& r) {
  SeqKv s;
  s.tables.resize(layout_.n_groups);
  s.released.assign(layout_.n_groups, 0);
  const bool inserted = seqs_.emplace(r.seq_id, std::move(s)).second;
  EMBER_CHECK_MSG(inserted, "request registered twice with the KV manager");
}

void KvCacheManager::remove(const Request& r) {
  auto it = seqs_.find(r.seq_id);
  if (it == seqs_.end()) return;
  SeqKv& s = it->second;
  free_tables(s);
  for (int32_t slot : s.swap_slots) swap_free_.push_back(slot);
  swap_used_ -= static_cast<int64_t>(s.swap_slots.size());
  seqs_.erase(it);
}

const BlockTables& KvCacheManager::tables(const Request& r) const { return kv(r).tables; }

bool KvCacheManager::holds_blocks(const Request& r) const {
  const SeqKv& s = kv(r);
  return !s.tables.empty() && !s.tables[0].empty();
}

bool KvCacheManager::swapped(const Request& r) const { return kv(r).swapped; }

int64_t KvCacheManager::capacity(const Request& r) const {
  const SeqKv& s = kv(r);
  return s.tables.empty() ? 0 : static_cast<int64_t>(s.tables[0].size()) * block_size_;
}

void KvCacheManager::free_tables(SeqKv& s) {
  for (auto& t : s.tables) blocks_.free(t);
  std::fill(s.released.begin(), s.released.end(), 0);
}

void KvCacheManager::free_blocks(const Request& r) {
  SeqKv& s = kv(r);
  free_tables(s);
  s.hashes.clear();
}

// First block of the k leading blocks that group g still needs (sliding
// groups: only those within the window of position k * block_size).
int KvCacheManager::first_needed(int g, int64_t k) const {
  const int w = layout_.group_window[g];
  if (w <= 0) return 0;
  const int64_t lo = k * block_size_ - w + 1;
  return lo <= 0 ? 0 : static_cast<int>(lo / block_size_);
}

int64_t KvCacheManager::match_prefix(const Request& r) {
  SeqKv& s = kv(r);
  EMBER_CHECK(!holds_blocks(r));
  const int bs = block_size_, n_groups = layout_.n_groups;
  const int64_t n_tokens = r.num_tokens();
  const int max_blocks = static_cast<int>((n_tokens - 1) / bs);  // leave >= 1 token to compute
  std::vector<uint64_t> hashes;
  std::vector<std::vector<int32_t>> found(n_groups);
  uint64_t parent = 0;
  for (int i = 0; i < max_blocks; ++i) {
    const int32_t* tk = r.tokens.data() + static_cast<int64_t>(i) * bs;
    const uint64_t h = BlockManager::chain_hash(parent, tk, bs);
    bool any = false;
    for (int g = 0; g < n_groups; ++g) {
      found[g].push_back(blocks_.lookup(BlockManager::group_key(h, g), parent, tk));
      any |= found[g].back() >= 0;
    }
    if (!any) break;
    hashes.push_back(h);
    parent = h;
  }
  int k = static_cast<int>(hashes.size());
  for (; k > 0; --k) {
    bool ok = true;
    for (int g = 0; g < n_groups && ok; ++g)
      for (int i = first_needed(g, k); i < k && ok; ++i) ok = found[g][i] >= 0;
    if (ok) break;
  }
  for (int g = 0; g < n_groups; ++g) {
    const int from = first_needed(g, k);
    for (int i = 0; i < k; ++i) {
      if (i < from) {
        s.tables[g].push_back(-1);
      } else {
        blocks_.acquire(found[g][i]);
        s.tables[g].push_back(found[g][i]);
      }
    }
    s.released[g] = static_cast<size_t>(from);
  }
  s.hashes.assign(hashes.begin(), hashes.begin() + k);
  return static_cast<int64_t>(k) * bs;
}

bool KvCacheManager::allocate_slots(const Request& r, int64_t n_new, int64_t n_lookahead, std::vector<KvOp>* ops) {
  SeqKv& s = kv(r);
  const int bs = block_size_;
  const int64_t n_tokens = r.num_computed_tokens + n_new + n_lookahead;
  const int64_t need = std::max<int64_t>(0, (n_tokens + bs - 1) / bs - static_cast<int64_t>(s.tables[0].size()));
  // Copy-on-write: the partial block receiving the first new token may be
  // shared with forked samples; full blocks are never written again.
  const size_t wb = static_cast<size_t>(r.num_computed_tokens / bs);
  const int filled = static_cast<int>(r.num_computed_tokens % bs);
  auto shared_partial = [&](const std::vector<int32_t>& t) {
    return filled != 0 && wb < t.size() && t[wb] >= 0 && blocks_.ref_count(t[wb]) > 1;
  };
  int n_cow = 0;
  for (const auto& t : s.tables) n_cow += shared_partial(t);
  if (need * layout_.n_groups + n_cow > blocks_.n_free()) return false;
  for (auto& t : s.tables) {
    if (shared_partial(t)) {
      const int32_t old = blocks_.make_private(t, wb);
      ops->push_back({KvOp::Kind::kCopy, old, t[wb], filled});
      ++n_cow_copies_;
    }
    const bool ok = blocks_.allocate(t, static_cast<int>(need));
    EMBER_CHECK(ok);  // checked above
  }
  return true;
}

void KvCacheManager::rollback(const Request& r, int64_t k) {
  if (k <= 0) return;
  SeqKv& s = kv(r);
  const int64_t end = std::max<int64_t>(0, r.num_computed_tokens - k);
  const size_t keep = static_cast<size_t>((end + block_size_ - 1) / block_size_);
  for (int g = 0; g < layout_.n_groups; ++g) {
    auto& t = s.tables[g];
    while (t.size() > keep) {
      blocks_.release_entry(t, t.size() - 1);
      t.pop_back();
    }
    s.released[g] = std::min(s.released[g], t.size());
  }
  const size_t full = static_cast<size_t>(end / block_size_);
  if (s.hashes.size() > full) s.hashes.resize(full);
}

void KvCacheManager::cache_blocks(const Request& r) {
  if (!blocks_.prefix_caching()) return;
  SeqKv& s = kv(r);
  const int bs = block_size_;
  const int64_t n_final = std::min(r.num_computed_tokens, r.num_tokens());
  const size_t n_full = static_cast<size_t>(n_final / bs);
  while (s.hashes.size() < n_full) {
    const size_t i = s.hashes.size();
    const uint64_t parent = i == 0 ? 0 : s.hashes[i - 1];
    const int32_t* tk = r.tokens.data() + i * bs;
    const uint64_t h = BlockManager::chain_hash(parent, tk, bs);
    for (int g = 0; g < layout_.n_groups; ++g)
      if (s.tables[g][i] >= 0) blocks_.register_block(s.tables[g][i], BlockManager::group_key(h, g), parent, tk, g == 0);
    s.hashes.push_back(h);
  }
}

void KvCacheManager::release_out_of_window(const Request& r) {
  SeqKv& s = kv(r);
  const int bs = block_size_;
  for (int g = 0; g < layout_.n_groups; ++g) {
    const int w = layout_.group_window[g];
    if (w <= 0) continue;
    // Future queries are at positions >= num_computed_tokens and see keys > q - w.
    const int64_t lo = r.num_computed_tokens - w + 1;
    if (lo <= 0) continue;
    const size_t dead = std::min(static_cast<size_t>(lo / bs), s.tables[g].size());
    for (size_t i = s.released[g]; i < dead; ++i) blocks_.release_entry(s.tables[g], i);
    s.released[g] = std::max(s.released[g], dead);
  }
}

void KvCacheManager::fork(const Request& parent, const Request& child) {
  const SeqKv& p = kv(parent);
  SeqKv& c = kv(child);
  EMBER_CHECK(!holds_blocks(child));
  c.tables = p.tables;
  for (const auto& t : c.tables) blocks_.share(t);
  c.released = p.released;
  c.hashes = p.hashes;
}

int32_t KvCacheManager::take_swap_slot() {
  if (!swap_free_.empty()) {
    const int32_t s = swap_free_.back();
    swap_free_.pop_back();
    return s;
  }
  return swap_high_++;
}

bool KvCacheManager::swap_out(const Request& r, std::vector<KvOp>* ops) {
  SeqKv& s = kv(r);
  if (!holds_blocks(r)) return false;
  int64_t n_pages = 0;
  for (const auto& t : s.tables)
    for (int32_t b : t) n_pages += b >= 0;
  if (swap_used_ + n_pages > n_swap_pages_) return false;
  s.swap_present.assign(layout_.n_groups, {});
  s.swap_slots.clear();
  for (int g = 0; g < layout_.n_groups; ++g)
    for (size_t i = 0; i < s.tables[g].size(); ++i) {
      const int32_t b = s.tables[g][i];
      s.swap_present[g].push_back(b >= 0);
      if (b < 0) continue;
      const int32_t slot = take_swap_slot();
      s.swap_slots.push_back(slot);
      const int64_t computed = r.num_computed_tokens - static_cast<int64_t>(i) * block_size_;
      ops->push_back({KvOp::Kind::kSwapOut, b, slot, static_cast<int>(std::clamp<int64_t>(computed, 0, block_size_))});
    }
  s.swap_released = s.released;
  swap_used_ += n_pages;
  s.swapped = true;
  ++n_swap_outs_;
  free_tables(s);
  s.hashes.clear();
  return true;
}

bool KvCacheManager::swap_in(const Request& r, int64_t n_new, std::vector<KvOp>* ops) {
  SeqKv& s = kv(r);
  EMBER_CHECK(s.swapped);
  const int bs = block_size_;
  const int64_t n_present = static_cast<int64_t>(s.swap_slots.size());
  const int64_t entries = static_cast<int64_t>(s.swap_present[0].size());
  const int64_t need =
      n_present +
      std::max<int64_t>(0, (r.num_computed_tokens + n_new + bs - 1) / bs - entries) * layout_.n_groups;
  if (need > blocks_.n_free()) return false;
  size_t next = 0;
  for (int g = 0; g < layout_.n_groups; ++g) {
    auto& t = s.tables[g];
    t.clear();
    for (char present : s.swap_present[g]) {
      if (!present) {
        t.push_back(-1);
        continue;
      }
      const bool ok = blocks_.allocate(t, 1);
      EMBER_CHECK(ok);  // checked above
      const int32_t slot = s.swap_slots[next++];
      ops->push_back({KvOp::Kind::kSwapIn, slot, t.back(), 0});
      swap_free_.push_back(slot);
    }
  }
  s.released = s.swap_released;
  swap_used_ -= n_present;
  s.swap_slots.clear();
  s.swap_present.clear();
  s.swapped = false;
  ++n_swap_ins_;
  return true;
}

KvCacheCounters KvCacheManager::counters() const {
  KvCacheCounters c;
  c.prefix = blocks_.counters();
  c.n_cow_copies = n_cow_copies_;
  c.n_swap_outs = n_swap_outs_;
  c.n_swap_ins = n_swap_ins_;
  return c;
}

Status KvCacheManager::check(const std::vector<const Request*>& live) const {
  if (live.size() != seqs_.size())
    return Status::errorf("KV manager holds {} requests, {} are live", seqs_.size(), live.size());
  std::vector<const std::vector<int32_t>*> all;
  int64_t swap_slots = 0;
  for (const Request* r : live) {
    auto it = seqs_.find(r->seq_id);
    if (it == seqs_.end()) return Status::errorf("sequence '{}' ({}) unknown to the KV manager", r->id, r->index);
    const SeqKv& s = it->second;
    for (const auto& t : s.tables) {
      all.push_back(&t);
      if (t.size() != s.tables[0].size())
        return Status::errorf("sequence '{}' ({}): group tables differ in length", r->id, r->index);
    }
    if (s.swapped) {
      if (!s.tables[0].empty()) return Status::errorf("swapped sequence '{}' holds blocks", r->id);
      if (s.swap_present.size() != static_cast<size_t>(layout_.n_groups))
        return Status::errorf("swapped sequence '{}': swap layout lost", r->id);
    } else if (!s.swap_slots.empty()) {
      return Status::errorf("sequence '{}' holds swap slots but is not swapped", r->id);
    }
    swap_slots += static_cast<int64_t>(s.swap_slots.size());
  }
  if (swap_slots != swap_used_)
    return Status::errorf("swap space accounting: {} pages held, {} counted", swap_slots, swap_used_);
  if (swap_used_ > n_swap_pages_) return Status::errorf("swap space over budget: {} > {}", swap_used_, n_swap_pages_);
  if (static_cast<int64_t>(swap_free_.size()) + swap_used_ != swap_high_)
    return Status::errorf("swap slots: {} free + {} used != {} handed out", swap_free_.size(), swap_used_, swap_high_);
  return blocks_.check(all);
}

}  // namespace ember
