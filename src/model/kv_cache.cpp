// Contiguous KV cache; see kv_cache.h.
#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace ember {

void KvCache::store_k(int layer, int64_t pos, const float* src, int64_t n) {
  kv_store_row(types().k, src, n, k_row(layer, pos));
}

void KvGroupTails::init(int64_t n_ids, int64_t row_elems, int head_dim) {
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
    std::vector<float> row(static_cast<size_t>(row_elems_));
    for (int j = 0; j < r; ++j) {
      for (int64_t h = 0; h < row_elems_ / head_dim_; ++h)
        kv_q4c_load_row(region + h * 12 * head_dim_, j, head_dim_, row.data() + h * head_dim_);
      kv_store_row(KvType::kF16, row.data(), row_elems_, t.rows.get() + j * rb);
    }
  }
  t.full = false;
  kv_store_row(KvType::kF16, src, n, t.rows.get() + r * rb);
  if (r == kKvTokenGroup - 1) {
    kv_q4c_encode_group(t.rows.get(), rb, static_cast<int>(n / head_dim_), head_dim_, region);
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

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int64_t capacity, KvTypes types)
    : capacity_(capacity),
      alloc_(kv_token_grouped(types.k) ? (capacity + kKvTokenGroup - 1) / kKvTokenGroup * kKvTokenGroup : capacity),
      types_(types),
      k_bytes_(static_cast<int64_t>(kv_row_bytes(types.k, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim))),
      v_bytes_(static_cast<int64_t>(
          kv_row_bytes(types.v, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim_v))) {
  EMBER_CHECK_MSG(kv_type_check(types.k, cfg.head_dim).is_ok() && kv_type_check(types.v, cfg.head_dim_v).is_ok(),
                  "KV cache types do not fit the model's head dims");
  EMBER_CHECK_MSG(!kv_token_grouped(types.v), "q4c is a key format");
  for (int il = 0; il < cfg.n_layer; ++il) {
    // 32-byte aligned rows are not needed (the kernels load unaligned); the
    // buffers are uninitialised: only written rows are read.
    k_.emplace_back(new uint8_t[alloc_ * k_bytes_]);
    v_.emplace_back(new uint8_t[capacity_ * v_bytes_]);
    k_ptr_.push_back(k_.back().get());
    v_ptr_.push_back(v_.back().get());
  }
  if (kv_token_grouped(types.k)) {
    tails_.resize(cfg.n_layer);
    for (KvGroupTails& t : tails_)
      t.init(alloc_ / kKvTokenGroup, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim, cfg.head_dim);
    tail_ptr_.resize(static_cast<size_t>(cfg.n_layer * alloc_ / kKvTokenGroup));
  }
}

void ContiguousKvCache::store_k(int layer, int64_t pos, const float* src, int64_t n) {
  if (!kv_token_grouped(types_.k)) return KvCache::store_k(layer, pos, src, n);
  const int64_t g = pos / kKvTokenGroup;
  tails_[layer].store(g, static_cast<int>(pos % kKvTokenGroup), src, n,
                      k_[layer].get() + g * kKvTokenGroup * k_bytes_);
}

void ContiguousKvCache::begin_k_writes(int layer, int64_t first_pos) {
  if (!kv_token_grouped(types_.k)) return;
  // Tails exist only for the groups of the last passes: walk back from the
  // last group ending at or before first_pos until one holds none.
  for (int64_t g = first_pos / kKvTokenGroup - 1; g >= 0; --g)
    if (!tails_[layer].release_full(g)) break;
}

KvView ContiguousKvCache::view(int layer) const {
  KvView v;
  v.k_blocks = &k_ptr_[layer];
  v.v_blocks = &v_ptr_[layer];
  v.block_size = static_cast<int>(alloc_);
  v.k_row_bytes = k_bytes_;
  v.v_row_bytes = v_bytes_;
  v.k_type = types_.k;
  v.v_type = types_.v;
  if (kv_token_grouped(types_.k)) {
    const int64_t ng = alloc_ / kKvTokenGroup;
    const uint8_t** t = tail_ptr_.data() + layer * ng;
    for (int64_t g = 0; g < ng; ++g) t[g] = tails_[layer].rows(g);
    v.k_tails = t;
    v.k_tail_row_bytes = tails_[layer].row_bytes();
  }
  return v;
}

size_t ContiguousKvCache::memory_bytes() const {
  return static_cast<size_t>(alloc_) * static_cast<size_t>(k_bytes_ + v_bytes_) * k_.size();
}

}  // namespace ember
