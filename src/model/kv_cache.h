// KV cache interface and the contiguous single-sequence implementation.
// The forward pass writes K/V rows through k_row()/v_row() (encoded with
// kv_store_row in the cache's types(), kernels/kv_types.h) and reads them
// through a KvView (block table), so a paged cache plugs in unchanged.
//
// Row layout every implementation provides: one K row and one V row per
// (layer, position), each with room for the largest layer
// (ModelConfig::max_n_head_kv() heads of head_dim, resp. head_dim_v).
// Layer il writes and reads only its own first cfg.layers[il].n_head_kv
// heads, head h at byte offset h * kv_row_bytes(type, head_dim); the rest
// of a shorter layer's row is never read. The view's row strides are the
// full row.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention.h"
#include "model/config.h"

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
  // Read view of a layer for the attention kernel.
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
  KvView view(int layer) const override;
  size_t memory_bytes() const override;

 private:
  int64_t capacity_;
  KvTypes types_;
  int64_t k_bytes_, v_bytes_;  // per position
  std::vector<std::unique_ptr<uint8_t[]>> k_, v_;
  std::vector<const uint8_t*> k_ptr_, v_ptr_;  // one-entry block tables
};

}  // namespace ember
