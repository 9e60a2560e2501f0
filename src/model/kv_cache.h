// KV cache interface and the contiguous single-sequence implementation.
// The forward pass writes a layer's K/V rows through a KvStoreView (the
// layer's pages, writable: one Backend::kv_store per layer and step encodes
// every token's rows in the cache's types(), kernels/kv_types.h) and reads
// them through a KvView (block table), so a paged cache plugs in unchanged.
// k_row()/v_row() address one row (tests, tools).
//
// Row layout every implementation provides: one K row and one V row per
// (layer, position), each with room for the largest layer
// (ModelConfig::max_n_head_kv() heads of head_dim, resp. head_dim_v).
// Layer il writes and reads only its own first cfg.layers[il].n_head_kv
// heads, head h at byte offset h * kv_row_bytes(type, head_dim); the rest
// of a shorter layer's row is never read. The view's row strides are the
// full row.
//
// Token-group key formats (q4c, model/kv_group_tails.h) go through
// store_k(): the cache keeps the rows of each unfinished group in its tail
// (KvGroupTails) until the group's last position is written, then encodes
// the group into its region; the tails of full groups stay readable for the
// rest of the forward pass (queries of that pass inside the group read
// them) and are freed by the next pass's begin_k_writes() (a paged pool also
// frees, before each step, every tail but each sequence's frontier
// group's: KvBlockPool::release_tails).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention.h"
#include "model/config.h"
#include "model/kv_group_tails.h"

namespace ember {

class KvCache {
 public:
  virtual ~KvCache() = default;
  // Number of positions that can be stored.
  virtual int64_t capacity() const = 0;
  // Destination (bytes, in types().k / .v) of the K (V) row of position
  // `pos` (layout above).
  virtual uint8_t* k_row(int layer, int64_t pos) = 0;
  virtual uint8_t* v_row(int layer, int64_t pos) = 0;
  // Storage formats of the K and V rows.
  virtual KvTypes types() const = 0;
  // Stores the K row of `pos` (n floats): kv_store_row into k_row() for
  // every per-row format; token-group caches override it (tails).
  virtual void store_k(int layer, int64_t pos, const float* src, int64_t n);
  // Before a forward pass stores K rows of positions >= first_pos of layer:
  // token-group caches free the tails of full groups that end at or before
  // first_pos (no query of this pass or later reads them).
  virtual void begin_k_writes(int layer, int64_t first_pos) {
    (void)layer;
    (void)first_pos;
  }
  // Write view of a layer for Backend::kv_store (k_blocks null for a
  // token-group key format: its K rows go through store_k) and read view
  // for the attention kernel; both valid until the cache changes.
  virtual KvStoreView store_view(int layer) = 0;
  virtual KvView view(int layer) const = 0;
  // Bytes held.
  virtual size_t memory_bytes() const = 0;
};

// One contiguous buffer per layer: [capacity, max_n_head_kv * head_dim]
// elements of types.k for K ([.., max_n_head_kv * head_dim_v] of types.v
// for V). The types must fit the model (kv_type_check; a programmer error
// otherwise: check at the boundary).
class ContiguousKvCache final : public KvCache {
 public:
  ContiguousKvCache(const ModelConfig& cfg, int64_t capacity, KvTypes types = {});
  int64_t capacity() const override { return capacity_; }
  uint8_t* k_row(int layer, int64_t pos) override { return k_[layer].get() + pos * k_bytes_; }
  uint8_t* v_row(int layer, int64_t pos) override { return v_[layer].get() + pos * v_bytes_; }
  KvTypes types() const override { return types_; }
  void store_k(int layer, int64_t pos, const float* src, int64_t n) override;
  void begin_k_writes(int layer, int64_t first_pos) override;
  KvStoreView store_view(int layer) override;
  KvView view(int layer) const override;
  size_t memory_bytes() const override;

 private:
  int64_t capacity_;
  const KvGroupCodec* codec_;  // a token-group key format's (null: a per-row format)
  int64_t alloc_;  // positions allocated (capacity, rounded up to whole token groups)
  KvTypes types_;
  int64_t k_bytes_, v_bytes_;  // per position
  std::vector<std::unique_ptr<uint8_t[]>> k_, v_;
  std::vector<uint8_t*> k_ptr_, v_ptr_;  // one-entry block tables
  std::vector<KvGroupTails> tails_;               // token groups: per layer
  mutable std::vector<const uint8_t*> tail_ptr_;  // token groups: [layer][group] (view())
};

}  // namespace ember
