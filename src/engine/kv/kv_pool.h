// Paged KV memory: one preallocated pool of fixed-size pages, the page ops
// of a step (copy-on-write, swap), and PagedKvCache, the KvCache adaptor
// through which the forward pass reads and writes one sequence's K/V via its
// block tables. Everything a KV format needs beyond its row layout lives
// here and in model/ (kv_cache.h, kv_group_tails.h), so the scheduler, the
// engine and the model runner see only the KvTypes.
//
// Layers are split into KV groups (KvLayout): layers with the same attention
// window, cut into groups of equal size so every group uses the same page
// shape ([block_size positions] x [layers_per_group layers] x K/V). A
// sequence has one block table per group, all of the same length (one entry
// per block of positions); a page id is meaningful in any group, so one
// BlockManager serves them all. Sliding-window groups release pages whose
// positions left the window (table entry -1), global groups keep all. With
// a single group (all layers) this is a plain paged cache.
//
// What the KV cache must hold comes from the model runner as a KvSpec (per
// layer: attention window and K/V row sizes), so the layout and the block
// bookkeeping never need the model itself. Layers may differ in K/V row
// size (structured pruning): each page slot is as wide as the widest layer
// stored in that slot. Rows are stored in the spec's KvTypes (f32, f16,
// bf16, q8, q4, q4c: kernels/kv_types.h, scales inside the page), so the
// page ops (copy-on-write, swap) move bytes whatever the format. A
// token-group key format (q4c; block_size a multiple of its group) also has
// tails per (slot, page, token group) (model/kv_group_tails.h), outside the
// pages and bounded (below: "Tails"); the page ops move the one tail a
// copied or swapped page still needs (that of its sequence's frontier
// group), and apply_ops frees the tails no later pass can read.
//
// Block ownership (reference counts, free lists, prefix cache) lives in
// BlockManager and KvCacheManager; this file only owns memory. Not
// thread-safe: used from the engine thread (and the forward pass it drives).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace ember {

// Bytes of KV budget from a fraction (0, 1] of the memory the system reports
// available (MemAvailable in /proc/meminfo). Errors if it cannot be read.
Result<size_t> kv_budget_from_free_memory(double fraction);

// Per layer: what its K/V cache rows look like.
struct KvLayerSpec {
  int window = 0;      // 0: global attention; else sliding window (positions)
  int64_t k_dim = 0;   // floats per K row (n_head_kv * head_dim)
  int64_t v_dim = 0;   // floats per V row (n_head_kv * head_dim_v)
};
struct KvSpec {
  std::vector<KvLayerSpec> layers;  // [n_layer]
  KvTypes types;                    // storage formats of K and V (kernels/kv_types.h)
  int head_dim = 0, head_dim_v = 0; // for the q8 / q4 group check (0: not checked)
};
KvSpec kv_spec_from_config(const ModelConfig& cfg, KvTypes types = {});
// Bytes of KV cache per token position over all layers (K + V, in the
// spec's formats, each layer its own width): the capacity unit users see.
size_t kv_bytes_per_token(const KvSpec& spec);

// Where a sequence that holds pages writes its next K row: its tables and
// that position (its num_computed_tokens; a scheduled slice's pos0), and
// which sequence it is (Request::seq_id: a step input names it).
struct KvFrontier {
  const std::vector<std::vector<int32_t>>* tables = nullptr;
  int64_t pos = 0;
  uint64_t seq = 0;
};

// A page op of a step, made by the KV manager (kv_cache_manager.h) and
// applied by the model runner, in list order, before the forward pass
// (KvBlockPool::apply_ops).
struct KvOp {
  enum class Kind { kCopy, kSwapOut, kSwapIn };
  Kind kind = Kind::kCopy;
  int32_t src = -1;  // kCopy, kSwapOut: page id; kSwapIn: swap slot
  int32_t dst = -1;  // kCopy, kSwapIn: page id; kSwapOut: swap slot
  int n_rows = 0;    // kCopy: leading positions of the page to copy (the rest is unwritten);
                     // kSwapOut: positions of the page its sequence has computed
};

// Host copies of swapped-out pages by swap slot (empty: a free slot).
using KvSwapPages = std::vector<std::vector<uint8_t>>;

// What the pool serves at most: sequences that hold pages at once and
// tokens one forward pass writes. A token-group format sizes its tails'
// reserve from them (below: "Tails"); 0, 0: no reserve (the tails are not
// bounded by the budget).
struct KvPoolLimits {
  int max_seqs = 0;
  int max_batch_tokens = 0;
};

// The pool's memory as the engine reports it: one page (the unit of swap
// space) and, for a token-group format, its tails: the budget reserved for
// them, the bytes held now and the sum over the slots of the most each ever
// held (>= the peak of their sum; 0 for per-row formats).
struct KvMemory {
  size_t page_bytes = 0;
  int64_t tail_reserve_bytes = 0;
  int64_t tail_bytes = 0;
  int64_t tail_peak_bytes = 0;
};

struct KvLayout {
  int n_groups = 1;
  int layers_per_group = 0;
  std::vector<int> group_of_layer;  // [n_layer]
  std::vector<int> slot_of_layer;   // [n_layer] index within its group
  std::vector<int> group_window;    // [n_groups] 0: global attention

  // One group per window size, split to the gcd of the per-window layer
  // counts (Gemma 3 270M: 3 global + 15 sliding layers -> 6 groups of 3).
  // split_windows = false: a single group of all layers.
  static KvLayout from_spec(const KvSpec& spec, bool split_windows);
  static KvLayout from_config(const ModelConfig& cfg, bool split_windows) {
    return from_spec(kv_spec_from_config(cfg), split_windows);
  }
};

// Elements per position of page slot s (K and V): the widest layer in slot
// s, and the bytes of such a row in the spec's formats.
struct KvSlotDims {
  std::vector<int64_t> k_dim, v_dim;      // [layers_per_group]
  std::vector<int64_t> k_bytes, v_bytes;  // [layers_per_group]
  static KvSlotDims of(const KvSpec& spec, const KvLayout& layout);
  // Bytes of one page of block_size positions (all slots, K + V).
  size_t page_bytes(int block_size) const;
};

// Tails: the bound. A tail is the staged copy of one token group of G
// positions of one layer (q4c: G = 16 f16 rows of its page slot's K width,
// 2 * 16 * k_dim bytes). A query reads only its own group's tail, and only
// in a pass that writes that group, so before each step's page ops (and
// after them, if a swap-out read some first) apply_ops frees every tail but
// one per sequence that holds pages: that of the group holding its frontier
// (release_tails; a rollback may have reopened that group, full or not).
// The ops carry only that tail (copy_block, read_page). The forward pass
// then writes, per slice of n tokens, the groups [pos0, pos0 + n) touches:
// at most floor((n + G - 2) / G) + 1, the frontier group among them. Per
// layer, with R sequences holding pages (running ones; R <= max_seqs: the
// engine refuses more samples than that when the pool has a reserve), S <=
// min(R, B) of them in the pass and sum n <= B (max_batch_tokens):
//
//   tails <= sum over the slices (floor((n + G - 2) / G) + 1) + (R - S)
//         <= R + floor((B + (G - 2) * min(R, B)) / G)
//
// (floors of a sum bound the sum of floors from below; the bound grows with
// S). Sequences a preemption swaps out keep their tails until their
// kSwapOut ops have read them: they were running in the previous pass,
// counted there, and are not running now (no admission in a step that
// preempts). Finished sequences' tails go at the next step, before any op
// adds one. kv_tails_per_layer is that count; kv_tail_reserve_bytes sums
// it over the layers at their slots' widths: what KvBlockPool::create takes
// out of the KV budget before sizing the pages (0 for per-row formats).
int64_t kv_tails_per_layer(int group, int max_seqs, int max_batch_tokens);
size_t kv_tail_reserve_bytes(const KvSpec& spec, const KvLayout& layout, const KvPoolLimits& limits);

class KvBlockPool {
 public:
  // n_blocks > 0 fixes the page count; otherwise as many pages as fit in
  // memory_bytes, after a token-group format's tails reserve for `limits`
  // (with a fixed page count the reserve is on top). Errors on a bad block
  // size, a budget below the reserve and one page, or KV formats that do
  // not fit the head dims.
  // `memory`: a backend whose memory (Backend::alloc, not host memory) holds
  // the pages, and whose copy() moves them (null, or a backend over host
  // memory: host pages, as before); not owned, must outlive the pool. A
  // device backend takes only per-row formats (no tails).
  static Result<std::unique_ptr<KvBlockPool>> create(const KvSpec& spec, const KvLayout& layout, int block_size,
                                                     size_t memory_bytes, int64_t n_blocks = 0,
                                                     const KvPoolLimits& limits = {}, Backend* memory = nullptr);
  static Result<std::unique_ptr<KvBlockPool>> create(const ModelConfig& cfg, const KvLayout& layout, int block_size,
                                                     size_t memory_bytes, int64_t n_blocks = 0) {
    return create(kv_spec_from_config(cfg), layout, block_size, memory_bytes, n_blocks);
  }
  // Single-group layout (all layers in every page).
  static Result<std::unique_ptr<KvBlockPool>> create(const ModelConfig& cfg, int block_size, size_t memory_bytes,
                                                     int64_t n_blocks = 0, KvTypes types = {});

  const KvLayout& layout() const { return layout_; }
  KvTypes types() const { return types_; }
  int block_size() const { return block_size_; }
  int32_t n_blocks() const { return n_blocks_; }
  // Bytes of one page (K + V of its group's layers).
  size_t bytes_per_block() const;
  size_t memory_bytes() const { return bytes_per_block() * static_cast<size_t>(n_blocks_); }
  // Pages, and the tails' reserve, live and peak bytes.
  KvMemory memory() const;

  // Page b, layer slot s: [block_size, k_dim(s)] (K) and [block_size,
  // v_dim(s)] (V) elements, k_row_bytes(s) (v_row_bytes(s)) bytes a position.
  // (In the backend's memory for a pool made with one: read and written
  // by its ops and copy() only.)
  uint8_t* k_block(int slot, int32_t b) { return k_[slot] + static_cast<int64_t>(b) * block_size_ * dims_.k_bytes[slot]; }
  uint8_t* v_block(int slot, int32_t b) { return v_[slot] + static_cast<int64_t>(b) * block_size_ * dims_.v_bytes[slot]; }
  const uint8_t* k_block(int slot, int32_t b) const {
    return k_[slot] + static_cast<int64_t>(b) * block_size_ * dims_.k_bytes[slot];
  }
  const uint8_t* v_block(int slot, int32_t b) const {
    return v_[slot] + static_cast<int64_t>(b) * block_size_ * dims_.v_bytes[slot];
  }
  // Row widths (elements per position) and strides (bytes) of slot s.
  int64_t k_dim(int slot) const { return dims_.k_dim[slot]; }
  int64_t v_dim(int slot) const { return dims_.v_dim[slot]; }
  int64_t k_row_bytes(int slot) const { return dims_.k_bytes[slot]; }
  int64_t v_row_bytes(int slot) const { return dims_.v_bytes[slot]; }

  // A step's page ops, in order: kCopy (copy_block), kSwapOut (read_page
  // into (*swap)[dst], sized to fit), kSwapIn (write_page from (*swap)[src],
  // whose host memory then goes back). `live`: the frontier of every
  // sequence that holds pages (the step's slices and the idle ones): the
  // tails no later pass can read go first (release_tails), those of pages a
  // swap-out reads once it has.
  void apply_ops(const std::vector<KvOp>& ops, const std::vector<KvFrontier>& live, KvSwapPages* swap);

  // Copies the first n_rows positions of page src into dst in every slot
  // (copy-on-write of a shared partial block; token groups: dst gets only
  // the tail of the group holding position n_rows, the copier's frontier:
  // the groups before it are encoded).
  void copy_block(int32_t src, int32_t dst, int n_rows);
  // Copies of a whole page (bytes_per_block(): all slots, K then V per
  // slot, in the pool's formats; token groups: then its tail states) to /
  // from a host buffer (swap space) of swap_page_bytes(b, n_rows) bytes.
  // n_rows: the positions of the page its sequence has computed (token
  // groups: only the tail of the group holding the next one travels).
  void read_page(int32_t b, uint8_t* dst, int n_rows);
  void write_page(int32_t b, const uint8_t* src);
  size_t swap_page_bytes(int32_t b, int n_rows) const;

  // Token groups: frees every tail a later pass cannot read or rewrite,
  // which is all but the tail of the group holding each frontier in `live`
  // (every sequence that holds pages), full or not, and the tails of
  // keep_pages (sources of swap-outs still to be read). Groups before a
  // frontier are full and read encoded, rows past it are withdrawn or
  // unwritten, pages no one holds are dead.
  void release_tails(const std::vector<KvFrontier>& live, const std::vector<int32_t>& keep_pages = {});
  // Token groups: bytes of the tails allocated now, and the sum over the
  // slots of the most each ever held (>= the peak of their sum).
  size_t tail_bytes() const;
  size_t tail_peak_bytes() const;

  // The key format's token groups (null: a per-row format), groups per
  // page, and slot s's tails.
  const KvGroupCodec* group_codec() const { return codec_; }
  int groups_per_page() const { return codec_ ? block_size_ / codec_->group : 0; }
  KvGroupTails& tails(int slot) { return tails_[slot]; }
  const KvGroupTails& tails(int slot) const { return tails_[slot]; }

 private:
  KvBlockPool() = default;
  // Token groups: the group of a page holding position n_rows when its
  // sequence has computed n_rows of the page and that group is unfinished
  // (the one tail a copy or a swap carries); -1 if none.
  int open_group(int n_rows) const {
    return codec_ && n_rows % codec_->group != 0 && n_rows < block_size_ ? n_rows / codec_->group : -1;
  }
  KvLayout layout_;
  KvTypes types_;
  int block_size_ = 0;
  int32_t n_blocks_ = 0;
  KvSlotDims dims_;
  std::vector<uint8_t*> k_, v_;                    // per slot: [n_blocks, block_size, row bytes]
  std::vector<std::unique_ptr<uint8_t[]>> host_;   // their host memory, or
  std::vector<std::unique_ptr<BackendBuffer>> backend_pages_;  // the backend's
  Backend* memory_ = nullptr;                      // that backend (null: host pages)
  void move_bytes(uint8_t* dst, const uint8_t* src, size_t n);
  const KvGroupCodec* codec_ = nullptr;            // the key format's token groups (null: per-row)
  size_t tail_reserve_ = 0;                        // the tails' share of the budget (kv_tail_reserve_bytes)
  std::vector<KvGroupTails> tails_;                // token groups: per slot
  std::vector<int64_t> keep_ids_;                  // release_tails' frontier groups (sorted)
  std::vector<int32_t> keep_pages_;                // and pages (sorted)
  std::vector<int32_t> swap_out_pages_;            // apply_ops: pages this step's swap-outs read
};

// One sequence's view of the pool through its block tables (not owned; one
// per group, equal lengths, -1 for released pages that are never read). Call
// sync() after the tables changed and before the forward pass; capacity() is
// the number of positions the tables cover. set_tables() points the view at
// other tables (the model runner reuses views across steps).
class PagedKvCache final : public KvCache {
 public:
  PagedKvCache(KvBlockPool& pool, const std::vector<std::vector<int32_t>>& tables);
  void set_tables(const std::vector<std::vector<int32_t>>& tables) { tables_ = &tables; }
  void sync();

  int64_t capacity() const override { return static_cast<int64_t>(n_synced_) * pool_.block_size(); }
  uint8_t* k_row(int layer, int64_t pos) override {
    const KvLayout& l = pool_.layout();
    const int s = l.slot_of_layer[layer];
    return pool_.k_block(s, (*tables_)[l.group_of_layer[layer]][pos / pool_.block_size()]) +
           (pos % pool_.block_size()) * pool_.k_row_bytes(s);
  }
  uint8_t* v_row(int layer, int64_t pos) override {
    const KvLayout& l = pool_.layout();
    const int s = l.slot_of_layer[layer];
    return pool_.v_block(s, (*tables_)[l.group_of_layer[layer]][pos / pool_.block_size()]) +
           (pos % pool_.block_size()) * pool_.v_row_bytes(s);
  }
  KvTypes types() const override { return pool_.types(); }
  void store_k(int layer, int64_t pos, const float* src, int64_t n) override;
  void begin_k_writes(int layer, int64_t first_pos) override;
  KvStoreView store_view(int layer) override;
  KvView view(int layer) const override;
  size_t memory_bytes() const override;

 private:
  KvBlockPool& pool_;
  const std::vector<std::vector<int32_t>>* tables_;
  size_t n_synced_ = 0;
  std::vector<uint8_t*> k_ptr_, v_ptr_;  // [n_layer, n_synced] page pointers (null: released)
  mutable std::vector<const uint8_t*> tail_ptr_;  // token groups: [n_layer, n_synced * groups per page] (view())
};

}  // namespace ember
