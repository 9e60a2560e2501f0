// Contiguous KV cache; see kv_cache.h.
#include "model/kv_cache.h"

namespace ember {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int64_t capacity)
    : capacity_(capacity),
      k_dim_(static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim),
      v_dim_(static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim_v) {
  for (int il = 0; il < cfg.n_layer; ++il) {
    k_.emplace_back(new float[capacity_ * k_dim_]);  // uninitialised: only written rows are read
    v_.emplace_back(new float[capacity_ * v_dim_]);
    k_ptr_.push_back(k_.back().get());
    v_ptr_.push_back(v_.back().get());
  }
}

KvView ContiguousKvCache::view(int layer) const {
  KvView v;
  v.k_blocks = &k_ptr_[layer];
  v.v_blocks = &v_ptr_[layer];
  v.block_size = static_cast<int>(capacity_);
  v.k_row_stride = k_dim_;
  v.v_row_stride = v_dim_;
  return v;
}

size_t ContiguousKvCache::memory_bytes() const {
  return static_cast<size_t>(capacity_) * static_cast<size_t>(k_dim_ + v_dim_) * sizeof(float) * k_.size();
}

}  // namespace ember
