// KvCacheManager: which KV pages each request holds, as block ids only
// (the memory belongs to the model runner). It owns slot allocation with
// copy-on-write, group-aware prefix matching and registration, sliding-
// window release, swap-space accounting, forks, rollback of speculative
// slots, and the block-accounting invariants. Memory work it decides on
// (copy a page, move a page to or from swap space) is returned as an
// ordered list of KvOps (kv_pool.h) that the model runner applies before the next
// forward pass, so the manager runs without a model (tests use the fake
// runner) and a GPU runner can apply the same ops to device memory.
//
// Tables: per request one block table per layer group (KvLayout), all of
// the same length (one entry per block of positions), -1 where a sliding-
// window group released the page. A page id is meaningful in every group,
// so one BlockManager and one free list serve all groups.
//
// Prefix cache: only full blocks whose tokens are all final (computed and
// part of Request::tokens, never speculative tokens) are registered, under
// a hash chained over the tokens of all blocks before them.
//
// Not thread-safe: owned by the Engine, used on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/kv/block_manager.h"
#include "engine/kv/kv_pool.h"
#include "engine/request.h"

namespace ember {

using BlockTables = std::vector<std::vector<int32_t>>;  // [n_groups][blocks of positions]

struct KvCacheCounters {
  PrefixCacheCounters prefix;
  int64_t n_cow_copies = 0;  // shared partial blocks copied before a write
  int64_t n_swap_outs = 0, n_swap_ins = 0;
};

class KvCacheManager {
 public:
  // n_swap_pages: how many pages swap space holds (0: no swapping).
  KvCacheManager(const KvLayout& layout, int block_size, int32_t n_blocks, bool enable_prefix_caching,
                 int64_t n_swap_pages);

  const KvLayout& layout() const { return layout_; }
  int block_size() const { return block_size_; }
  int n_groups() const { return layout_.n_groups; }
  int32_t n_blocks() const { return blocks_.n_blocks(); }
  bool prefix_caching() const { return blocks_.prefix_caching(); }

  // Publishes the prefix cache's layer-group-0 block hashes (the chain
  // hashes themselves) to `log` (not owned; nullptr: off). See kv_events.h.
  void set_event_log(KvEventLog* log) { blocks_.set_event_log(log); }

  // Registers / forgets a request (remove() frees its blocks and swap slots).
  void add(const Request& r);
  void remove(const Request& r);

  const BlockTables& tables(const Request& r) const;
  bool holds_blocks(const Request& r) const;
  bool swapped(const Request& r) const;
  // Positions r's tables cover.
  int64_t capacity(const Request& r) const;

  // Longest reusable prefix of r.tokens: k leading full blocks cached in
  // every group that still needs them (sliding groups only the blocks in the
  // window of position k * block_size), leaving at least one token to
  // compute. The blocks are acquired into r's tables (which must be empty).
  // Returns the tokens matched (k * block_size). Counts nothing: the caller
  // records the lookup it acts on with record_query().
  int64_t match_prefix(const Request& r);
  void record_query(int64_t query_tokens, int64_t hit_tokens) { blocks_.record_query(query_tokens, hit_tokens); }

  // Makes r's tables cover num_computed_tokens + n_new + n_lookahead
  // positions; if the first new position falls into a shared partial block
  // (a forked sample), that block is first replaced by a private copy
  // (a kCopy op). False, with nothing changed, if the free blocks do not
  // suffice. Lookahead slots are for speculative tokens.
  bool allocate_slots(const Request& r, int64_t n_new, int64_t n_lookahead, std::vector<KvOp>* ops);
  // Frees all of r's blocks (preemption, failed admission) and forgets its
  // prefix hashes; registered blocks stay cached (LRU) for a later hit.
  void free_blocks(const Request& r);
  // Withdraws r's last k computed positions (rejected speculative tokens):
  // blocks wholly at or past num_computed_tokens - k leave its tables, tail
  // first. Call before lowering r.num_computed_tokens. Registered blocks are
  // never affected (they hold final tokens only).
  void rollback(const Request& r, int64_t k);
  // Registers r's full blocks of final computed tokens in the prefix cache.
  void cache_blocks(const Request& r);
  // Releases the pages of sliding-window groups that no query at position
  // >= num_computed_tokens can see.
  void release_out_of_window(const Request& r);
  // child (registered with add(), no blocks) shares parent's blocks and hashes.
  void fork(const Request& parent, const Request& child);

  // Moves r's pages to swap space (kSwapOut ops) and frees its blocks; false
  // (nothing changed) if r holds no blocks or they do not fit.
  bool swap_out(const Request& r, std::vector<KvOp>* ops);
  // Brings a swapped-out request's pages back (kSwapIn ops) with room for
  // n_new more tokens; false (nothing changed) if the free blocks do not
  // suffice.
  bool swap_in(const Request& r, int64_t n_new, std::vector<KvOp>* ops);

  int32_t n_free_blocks() const { return blocks_.n_free(); }
  int32_t n_used_blocks() const { return blocks_.n_used(); }
  int32_t n_cached_free_blocks() const { return blocks_.n_cached_free(); }
  int64_t n_swap_pages_used() const { return swap_used_; }
  KvCacheCounters counters() const;

  // Tables of equal length per request, swapped requests hold no blocks,
  // swap slots accounted, reference counts == table entries over the given
  // live requests (all of them, running and waiting). Error: the first
  // violation.
  Status check(const std::vector<const Request*>& live) const;

 private:
  struct SeqKv {
    BlockTables tables;
    std::vector<uint64_t> hashes;  // chain hashes of the leading full blocks (registered or matched)
    std::vector<size_t> released;  // per group: entries below this are released (-1)
    // Swapped out: the swap slots of the pages present, in table order per
    // group, which table entries had a page, and the release marks.
    bool swapped = false;
    std::vector<int32_t> swap_slots;
    std::vector<std::vector<char>> swap_present;
    std::vector<size_t> swap_released;
  };
  SeqKv& kv(const Request& r);
  const SeqKv& kv(const Request& r) const;
  int first_needed(int g, int64_t k_blocks) const;
  void free_tables(SeqKv& s);
  int32_t take_swap_slot();

  KvLayout layout_;
  int block_size_;
  BlockManager blocks_;
  int64_t n_swap_pages_;
  int64_t swap_used_ = 0;
  int32_t swap_high_ = 0;               // slots ever handed out
  std::vector<int32_t> swap_free_;      // returned slots
  int64_t n_cow_copies_ = 0, n_swap_outs_ = 0, n_swap_ins_ = 0;
  std::unordered_map<uint64_t, SeqKv> seqs_;  // by Request::seq_id
};

}  // namespace ember
