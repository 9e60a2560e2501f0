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
//
// q4c keys (kernels/kv_types.h) go through store_k(): the cache keeps the
// f16 rows of each token group in a KvGroupTails until the group's last
// position is written, then encodes the group into its region; the tails of
// full groups stay readable for the rest of the forward pass (queries of
// that pass inside the group read them) and are freed by the next pass's
// begin_k_writes() (a paged pool also frees, before each step, every tail
// but each sequence's frontier group's: KvBlockPool::release_tails).
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
  // Stores the K row of `pos` (n floats): kv_store_row into k_row() for
  // every per-row format; q4c caches override it (tails).
  virtual void store_k(int layer, int64_t pos, const float* src, int64_t n);
  // Before a forward pass stores K rows of positions >= first_pos of layer:
  // q4c caches free the tails of full groups that end at or before
  // first_pos (no query of this pass or later reads them).
  virtual void begin_k_writes(int layer, int64_t first_pos) {
    (void)layer;
    (void)first_pos;
  }
  // Read view of a layer for the attention kernel.
  virtual KvView view(int layer) const = 0;
  // Bytes held.
  virtual size_t memory_bytes() const = 0;
};

// The f16 tails of q4c token groups for a set of group ids (a paged cache:
// page * groups per page + group; a contiguous one: the group index). A
// tail holds kKvTokenGroup f16 rows of row_elems elements and a flag
// `full` (its group has been encoded). Memory outside the pages: a paged
// pool bounds it by freeing every tail a later pass cannot need
// (KvBlockPool::release_tails) and reserves the bound out of the KV budget
// (engine/kv/kv_pool.h kv_tail_reserve_bytes); live_bytes() / peak_bytes()
// measure it.
class KvGroupTails {
 public:
  void init(int64_t n_ids, int64_t row_elems, int head_dim);
  int64_t row_bytes() const { return row_elems_ * 2; }
  // Bytes of one tail (kKvTokenGroup rows).
  int64_t tail_bytes() const { return kKvTokenGroup * row_bytes(); }
  // Bytes of the tails allocated now, and the most there ever were.
  int64_t live_bytes() const { return n_live_ * tail_bytes(); }
  int64_t peak_bytes() const { return peak_live_ * tail_bytes(); }
  // Stores row r of group id (f16 of src, n elements) and encodes the group
  // into `region` (its q4c region) when r is its last row. A tail is started
  // fresh at r == 0; one that is missing at r > 0 (the group was encoded and
  // its tail freed, then positions were withdrawn) is first filled from the
  // encoded region.
  void store(int64_t id, int r, const float* src, int64_t n, uint8_t* region);
  // The tail's rows (null: none); whether its group is encoded.
  const uint8_t* rows(int64_t id) const { return tails_[id].rows.get(); }
  bool full(int64_t id) const { return tails_[id].full; }
  // Frees id's tail if its group is full; true if one was there (full or not).
  bool release_full(int64_t id);
  // Frees every tail, full or not, whose id keep(id) rejects.
  template <class Keep>
  void release_unless(Keep keep) {
    size_t n = 0;
    for (int64_t id : live_) {
      Tail& t = tails_[id];
      if (t.rows && !keep(id)) drop(t);
      if (t.rows) {
        live_[n++] = id;
      } else {
        t.listed = false;
      }
    }
    live_.resize(n);
  }
  // Copies / removes a tail (copy-on-write); src == -1 removes dst's.
  void copy(int64_t src, int64_t dst);
  // Frees id's tail (full or not).
  void remove(int64_t id) { drop(tails_[id]); }
  // Swap space: bytes save() writes for id (a state byte, then the rows if
  // there is a tail); save / load return the bytes written / read.
  int64_t saved_bytes(int64_t id) const { return 1 + (tails_[id].rows ? tail_bytes() : 0); }
  int64_t save(int64_t id, uint8_t* dst) const;
  int64_t load(int64_t id, const uint8_t* src);

 private:
  struct Tail {
    std::unique_ptr<uint8_t[]> rows;
    bool full = false;
    bool listed = false;  // its id is in live_
  };
  void allocate(int64_t id);
  void drop(Tail& t);
  std::vector<Tail> tails_;
  std::vector<int64_t> live_;  // each id with a tail once (a freed one's entry goes at the next sweep)
  int64_t n_live_ = 0, peak_live_ = 0;
  int64_t row_elems_ = 0;
  int head_dim_ = 0;
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
  KvView view(int layer) const override;
  size_t memory_bytes() const override;

 private:
  int64_t capacity_;
  int64_t alloc_;  // positions allocated (capacity, rounded up to whole q4c groups)
  KvTypes types_;
  int64_t k_bytes_, v_bytes_;  // per position
  std::vector<std::unique_ptr<uint8_t[]>> k_, v_;
  std::vector<const uint8_t*> k_ptr_, v_ptr_;  // one-entry block tables
  std::vector<KvGroupTails> tails_;             // q4c: per layer
  mutable std::vector<const uint8_t*> tail_ptr_;  // q4c: [layer][group] (view())
};

}  // namespace ember
