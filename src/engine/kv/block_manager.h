// BlockManager: ownership of the KV pool's blocks. Reference counts, one
// free queue that doubles as the LRU of evictable prefix-cached blocks,
// copy-on-write, and the prefix cache (content-addressed full blocks).
//
// Prefix cache: a full block is identified by a hash chained over its tokens
// and its parent's hash, so a hash stands for the whole token prefix up to
// the end of that block (see docs/engine.md for why a chain rather than a
// radix tree). Entries also store the block's tokens and parent hash, which
// are compared on lookup, so a 64-bit collision can never alias content.
//
// Free queue order: never-cached blocks at the front (reused first), freed
// cached blocks at the back, so allocation evicts the least recently freed
// cached block. A cached block with reference count 0 still holds valid K/V
// and is revived by a hit.
//
// Group-aware prefix matching and registration over these primitives live in
// KvCacheManager; the scheduler only handles opaque block id lists.
//
// Publishing (optional, set_event_log): blocks registered with publish = true
// are reported to a KvEventLog when they enter the cache and when they leave
// it (kv_events.h), for a router that routes by the cache's contents.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/kv/kv_events.h"

namespace ember {

struct PrefixCacheCounters {
  int64_t queries = 0;        // lookups acted on (one per admission of a sequence)
  int64_t hits = 0;           // lookups that matched at least one block
  int64_t query_tokens = 0;   // tokens looked up (prompt tokens, less the last)
  int64_t hit_tokens = 0;     // tokens served from the cache
  int64_t evictions = 0;      // cached blocks reused for other content
};

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int block_size, bool enable_prefix_caching);

  int32_t n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks that can be allocated (unreferenced, cached or not).
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_blocks_ - n_free(); }
  // Unreferenced blocks that still hold prefix-cached content.
  int32_t n_cached_free() const { return n_cached_free_; }
  int ref_count(int32_t b) const { return ref_[b]; }

  // Tables may hold -1 (a released position block); every operation skips it.
  // Appends n fresh blocks (reference count 1) to table; all or nothing.
  bool allocate(std::vector<int32_t>& table, int n);
  // Drops one reference to each block of the table (in reverse, so a
  // sequence's tail blocks are evicted before its prefix) and clears it.
  void free(std::vector<int32_t>& table);
  // Drops one reference to table[i] and sets it to -1.
  void release_entry(std::vector<int32_t>& table, size_t i);
  // Shares a table (fork for n > 1 samples): every block gains a reference.
  void share(const std::vector<int32_t>& table);
  // Copy-on-write: if block table[i] is shared, replaces it with a fresh
  // private block and returns the old id (the caller copies the contents);
  // returns -1 if it was already private, -2 if no block is free.
  int32_t make_private(std::vector<int32_t>& table, size_t i);

  // Hash of a block given its parent's hash (0 for the first block).
  static uint64_t chain_hash(uint64_t parent, const int32_t* tokens, int n);
  void record_query(int64_t query_tokens, int64_t hit_tokens);
  // Cache key of a block hash for layer group g (g = 0: the hash itself).
  static uint64_t group_key(uint64_t hash, int g);
  // Cached block under `key` whose content is (parent, tokens), or -1. No
  // reference is taken.
  int32_t lookup(uint64_t key, uint64_t parent, const int32_t* tokens) const;
  // Takes a reference to a block (reviving a cached free block).
  void acquire(int32_t b);
  // Offers the full block b (tokens [block_size], cache key and parent hash)
  // to the cache; no-op if caching is off or the key is already cached.
  // publish: report the key to the event log now and when it is evicted.
  void register_block(int32_t b, uint64_t hash, uint64_t parent, const int32_t* tokens, bool publish = false);
  // Where published keys are reported (not owned; nullptr: nowhere).
  void set_event_log(KvEventLog* log) { events_ = log; }
  const PrefixCacheCounters& counters() const { return counters_; }
  size_t n_cached() const { return by_hash_.size(); }

  // Checks reference counts against the given tables of all live sequences,
  // the free queue and the cache index. Error describes the first violation.
  Status check(const std::vector<const std::vector<int32_t>*>& tables) const;

 private:
  int32_t pop_free();
  void release(int32_t b);
  void take_from_free(int32_t b);
  void uncache(int32_t b);

  int32_t n_blocks_;
  int block_size_;
  bool prefix_caching_;
  std::vector<int> ref_;
  std::list<int32_t> free_;
  std::vector<std::list<int32_t>::iterator> free_pos_;
  std::vector<char> in_free_;
  int32_t n_cached_free_ = 0;
  // Prefix cache: hash -> block; per block its hash, parent hash, tokens.
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<char> cached_, published_;
  std::vector<uint64_t> hash_, parent_;
  std::vector<int32_t> tokens_;  // [n_blocks, block_size]
  PrefixCacheCounters counters_;
  KvEventLog* events_ = nullptr;
};

}  // namespace ember
