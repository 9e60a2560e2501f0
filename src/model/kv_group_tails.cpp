// Tails of the token-group KV formats; see kv_group_tails.h.
#include "model/kv_group_tails.h"

#include <algorithm>
#include <cstring>

namespace ember {

const KvGroupCodec* kv_group_codec(KvType t) {
  // One entry per token-group key format (kernels/kv_types.h).
  static const KvGroupCodec kCodecs[] = {
      {KvType::kQ4C, kKvTokenGroup, KvType::kF16, kv_q4c_encode_group, kv_q4c_load_row},
  };
  for (const KvGroupCodec& c : kCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

void KvGroupTails::init(const KvGroupCodec& codec, int64_t n_ids, int64_t row_elems, int head_dim) {
  codec_ = &codec;
  tails_.clear();
  tails_.resize(static_cast<size_t>(n_ids));
  live_.clear();
  n_live_ = peak_live_ = 0;
  row_elems_ = row_elems;
  head_dim_ = head_dim;
}

void KvGroupTails::allocate(int64_t id) {
  Tail& t = tails_[id];
  t.rows.reset(new uint8_t[tail_bytes()]);
  t.full = false;
  peak_live_ = std::max(peak_live_, ++n_live_);
  if (!t.listed) {
    t.listed = true;
    live_.push_back(id);
  }
}

void KvGroupTails::drop(Tail& t) {
  if (!t.rows) return;
  t.rows.reset();
  t.full = false;
  --n_live_;
}

void KvGroupTails::store(int64_t id, int r, const float* src, int64_t n, uint8_t* region) {
  Tail& t = tails_[id];
  const int64_t rb = row_bytes();
  if (!t.rows) {
    allocate(id);
    // Rows before r exist only encoded (withdrawn positions after the tail
    // was freed): start from their decoded values.
    const int64_t head_region = codec_->group * static_cast<int64_t>(kv_row_bytes(codec_->type, head_dim_));
    std::vector<float> row(static_cast<size_t>(row_elems_));
    for (int j = 0; j < r; ++j) {
      for (int64_t h = 0; h < row_elems_ / head_dim_; ++h)
        codec_->load_row(region + h * head_region, j, head_dim_, row.data() + h * head_dim_);
      kv_store_row(codec_->staged, row.data(), row_elems_, t.rows.get() + j * rb);
    }
  }
  t.full = false;
  kv_store_row(codec_->staged, src, n, t.rows.get() + r * rb);
  if (r == codec_->group - 1) {
    codec_->encode_group(t.rows.get(), rb, static_cast<int>(n / head_dim_), head_dim_, region);
    t.full = true;
  }
}

bool KvGroupTails::release_full(int64_t id) {
  Tail& t = tails_[id];
  if (!t.rows) return false;
  if (t.full) drop(t);
  return true;
}

void KvGroupTails::copy(int64_t src, int64_t dst) {
  Tail& d = tails_[dst];
  if (src < 0 || !tails_[src].rows) {
    drop(d);
    return;
  }
  if (!d.rows) allocate(dst);
  std::memcpy(d.rows.get(), tails_[src].rows.get(), static_cast<size_t>(tail_bytes()));
  d.full = tails_[src].full;
}

int64_t KvGroupTails::save(int64_t id, uint8_t* dst) const {
  const Tail& t = tails_[id];
  dst[0] = t.rows ? (t.full ? 2 : 1) : 0;
  if (t.rows) std::memcpy(dst + 1, t.rows.get(), static_cast<size_t>(tail_bytes()));
  return saved_bytes(id);
}

int64_t KvGroupTails::load(int64_t id, const uint8_t* src) {
  Tail& t = tails_[id];
  if (src[0] == 0) {
    drop(t);
    return 1;
  }
  if (!t.rows) allocate(id);
  std::memcpy(t.rows.get(), src + 1, static_cast<size_t>(tail_bytes()));
  t.full = src[0] == 2;
  return saved_bytes(id);
}

}  // namespace ember
