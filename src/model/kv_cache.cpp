// Contiguous KV cache; see kv_cache.h.
#include "model/kv_cache.h"

#include "core/check.h"

namespace ember {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int64_t capacity, KvTypes types)
    : capacity_(capacity),
      types_(types),
      k_bytes_(static_cast<int64_t>(kv_row_bytes(types.k, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim))),
      v_bytes_(static_cast<int64_t>(
          kv_row_bytes(types.v, static_cast<int64_t>(cfg.max_n_head_kv()) * cfg.head_dim_v))) {
  EMBER_CHECK_MSG(kv_type_check(types.k, cfg.head_dim).is_ok() && kv_type_check(types.v, cfg.head_dim_v).is_ok(),
                  "KV cache types do not fit the model's head dims");
  for (int il = 0; il < cfg.n_layer; ++il) {
    // 32-byte aligned rows are not needed (the kernels load unaligned); the
    // buffers are uninitialised: only written rows are read.
    k_.emplace_back(new uint8_t[capacity_ * k_bytes_]);
    v_.emplace_back(new uint8_t[capacity_ * v_bytes_]);
    k_ptr_.push_back(k_.back().get());
    v_ptr_.push_back(v_.back().get());
  }
}

KvView ContiguousKvCache::view(int layer) const {
  KvView v;
  v.k_blocks = &k_ptr_[layer];
  v.v_blocks = &v_ptr_[layer];
  v.block_size = static_cast<int>(capacity_);
  v.k_row_bytes = k_bytes_;
  v.v_row_bytes = v_bytes_;
  v.k_type = types_.k;
  v.v_type = types_.v;
  return v;
}

size_t ContiguousKvCache::memory_bytes() const {
  return static_cast<size_t>(capacity_) * static_cast<size_t>(k_bytes_ + v_bytes_) * k_.size();
}

}  // namespace ember
