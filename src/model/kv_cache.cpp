// Contiguous KV cache; see kv_cache.h.
#include "model/kv_cache.h"

#include "core/check.h"

namespace ember {

void KvCache::store_k(int layer, int64_t pos, const float* src, int64_t n) {
  kv_store_row(types().k, src, n, k_row(layer, pos));
}

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int64_t capacity, KvTypes types)
    : capacity_(capacity),
      codec_(kv_group_codec(types.k)),
      alloc_(codec_ ? (capacity + codec_->group - 1) / codec_->group * codec_->group : capacity),
      types_(types),
      k_bytes_(static_cast<int64_t>(kv_row_bytes(types.k, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim))),
      v_bytes_(static_cast<int64_t>(
          kv_row_bytes(types.v, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim_v))) {
  EMBER_CHECK_MSG(kv_type_check(types.k, cfg.head_dim).is_ok() && kv_type_check(types.v, cfg.head_dim_v).is_ok(),
                  "KV cache types do not fit the model's head dims");
  EMBER_CHECK_MSG(!kv_group_codec(types.v), "token-group formats (q4c) are key formats");
  for (int il = 0; il < cfg.n_layer; ++il) {
    // 32-byte aligned rows are not needed (the kernels load unaligned); the
    // buffers are uninitialised: only written rows are read.
    k_.emplace_back(new uint8_t[alloc_ * k_bytes_]);
    v_.emplace_back(new uint8_t[capacity_ * v_bytes_]);
    k_ptr_.push_back(k_.back().get());
    v_ptr_.push_back(v_.back().get());
  }
  if (codec_) {
    tails_.resize(cfg.n_layer);
    for (KvGroupTails& t : tails_)
      t.init(*codec_, alloc_ / codec_->group, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim, cfg.head_dim);
    tail_ptr_.resize(static_cast<size_t>(cfg.n_layer * alloc_ / codec_->group));
  }
}

void ContiguousKvCache::store_k(int layer, int64_t pos, const float* src, int64_t n) {
  if (!codec_) return KvCache::store_k(layer, pos, src, n);
  const int64_t g = pos / codec_->group;
  tails_[layer].store(g, static_cast<int>(pos % codec_->group), src, n,
                      k_[layer].get() + g * codec_->group * k_bytes_);
}

void ContiguousKvCache::begin_k_writes(int layer, int64_t first_pos) {
  if (!codec_) return;
  // Tails exist only for the groups of the last passes: walk back from the
  // last group ending at or before first_pos until one holds none.
  for (int64_t g = first_pos / codec_->group - 1; g >= 0; --g)
    if (!tails_[layer].release_full(g)) break;
}

KvStoreView ContiguousKvCache::store_view(int layer) {
  KvStoreView v;
  v.k_blocks = codec_ ? nullptr : &k_ptr_[layer];
  v.v_blocks = &v_ptr_[layer];
  v.block_size = static_cast<int>(alloc_);
  v.k_row_bytes = k_bytes_;
  v.v_row_bytes = v_bytes_;
  v.k_type = types_.k;
  v.v_type = types_.v;
  return v;
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
  if (codec_) {
    const int64_t ng = alloc_ / codec_->group;
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
