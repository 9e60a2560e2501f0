// Tails of the token-group KV formats (q4c keys, kernels/kv_types.h). A
// format that encodes K over groups of consecutive positions (q4c: a scale
// and a minimum per channel over 16 positions) cannot encode a group before
// its last position is written. Until then the group's rows live in a tail
// outside the pages, in the format's staging type (what the attention
// kernels read from a tail: kv_key_in_tail, kernels/attention.h), and the
// group is encoded from those values when its last row arrives. A query
// inside an unfinished group reads its keys from the tail, so every query
// sees what it would see decoding alone, whatever the batch.
//
// What is particular to a format is its KvGroupCodec (kv_group_codec: the
// group size, the staging type, the group encoder and row decoder, which
// are its kernels). The rest is common: KvGroupTails holds the tails of one
// layer (or page slot), and the caches store through it
// (ContiguousKvCache, model/kv_cache.h; PagedKvCache and KvBlockPool,
// engine/kv/kv_pool.h, which also bound the tails, reserve that bound out of
// the KV budget and carry the tails through copy-on-write and swap).
//
// Not thread-safe: the caches' owner serializes access (the engine thread
// and the forward pass it drives, one layer's tails per writer).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kv_types.h"

namespace ember {

// A token-group key format.
struct KvGroupCodec {
  KvType type;    // the K format
  int group;      // positions per group, groups aligned to position 0
  KvType staged;  // a tail's row format
  // Encodes the `group` staged rows of a full group (row r at rows + r *
  // row_stride bytes, n_heads heads of head_dim) into its region: per head
  // h, group * kv_row_bytes(type, head_dim) bytes at h times that.
  void (*encode_group)(const uint8_t* rows, int64_t row_stride, int n_heads, int head_dim, uint8_t* region);
  // Decodes position r (< group) of one head's part of a region into
  // head_dim floats.
  void (*load_row)(const uint8_t* head_region, int r, int head_dim, float* dst);
};

// The codec of a token-group key format (kv_token_grouped), else null.
const KvGroupCodec* kv_group_codec(KvType t);

// The tails of one layer's (one page slot's) token groups for a set of
// group ids (a paged pool: page * groups per page + group; a contiguous
// cache: the group index). A tail holds `group` staged rows of row_elems
// elements and a flag `full` (its group has been encoded). live_bytes() /
// peak_bytes() measure the memory they hold outside the pages.
class KvGroupTails {
 public:
  void init(const KvGroupCodec& codec, int64_t n_ids, int64_t row_elems, int head_dim);
  int64_t row_bytes() const { return static_cast<int64_t>(kv_row_bytes(codec_->staged, row_elems_)); }
  // Bytes of one tail (a group of rows).
  int64_t tail_bytes() const { return codec_->group * row_bytes(); }
  // Bytes of the tails allocated now, and the most there ever were.
  int64_t live_bytes() const { return n_live_ * tail_bytes(); }
  int64_t peak_bytes() const { return peak_live_ * tail_bytes(); }
  // Stores row r of group id (n floats of src, in the staging type) and
  // encodes the group into `region` (its encoded region) when r is its last
  // row. A tail is started fresh at r == 0; one that is missing at r > 0
  // (the group was encoded and its tail freed, then positions were
  // withdrawn) is first filled from the encoded region.
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
  const KvGroupCodec* codec_ = nullptr;
  std::vector<Tail> tails_;
  std::vector<int64_t> live_;  // each id with a tail once (a freed one's entry goes at the next sweep)
  int64_t n_live_ = 0, peak_live_ = 0;
  int64_t row_elems_ = 0;
  int head_dim_ = 0;
};

}  // namespace ember
