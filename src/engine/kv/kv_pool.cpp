// Paged KV memory pool, layer groups and per-sequence adaptor; see kv_pool.h.
#include "engine/kv/kv_pool.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <new>
#include <numeric>
#include <string>

#include "core/check.h"

namespace ember {

Result<size_t> kv_budget_from_free_memory(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) return Status::errorf("KV memory fraction {} not in (0, 1]", fraction);
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return static_cast<size_t>(static_cast<double>(kb) * 1024.0 * fraction);
  }
  return Status::error("cannot read MemAvailable from /proc/meminfo");
}

KvSpec kv_spec_from_config(const ModelConfig& cfg, KvTypes types) {
  KvSpec s;
  s.types = types;
  s.head_dim = cfg.head_dim;
  s.head_dim_v = cfg.head_dim_v;
  s.layers.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    const bool per_layer = static_cast<int>(cfg.layers.size()) == cfg.n_layer;
    const int n_kv = per_layer && cfg.layers[il].n_head_kv > 0 ? cfg.layers[il].n_head_kv : cfg.n_head_kv;
    s.layers[il].window = per_layer ? std::max(0, cfg.layers[il].sliding_window) : 0;
    s.layers[il].k_dim = static_cast<int64_t>(n_kv) * cfg.head_dim;
    s.layers[il].v_dim = static_cast<int64_t>(n_kv) * cfg.head_dim_v;
  }
  return s;
}

size_t kv_bytes_per_token(const KvSpec& spec) {
  size_t b = 0;
  for (const KvLayerSpec& l : spec.layers) b += kv_row_bytes(spec.types.k, l.k_dim) + kv_row_bytes(spec.types.v, l.v_dim);
  return b;
}

int64_t kv_tails_per_layer(int group, int max_seqs, int max_batch_tokens) {
  const int64_t r = std::max(0, max_seqs), b = std::max(0, max_batch_tokens);
  return r + (b + (group - 2) * std::min(r, b)) / group;
}

size_t kv_tail_reserve_bytes(const KvSpec& spec, const KvLayout& layout, const KvPoolLimits& limits) {
  const KvGroupCodec* codec = kv_group_codec(spec.types.k);
  if (!codec) return 0;
  const KvSlotDims d = KvSlotDims::of(spec, layout);
  size_t per_tail_set = 0;  // one tail in every layer
  for (size_t il = 0; il < layout.slot_of_layer.size(); ++il) {
    const int s = layout.slot_of_layer[il];
    if (s >= 0 && s < static_cast<int>(d.k_dim.size()))
      per_tail_set += codec->group * kv_row_bytes(codec->staged, d.k_dim[s]);
  }
  return per_tail_set *
         static_cast<size_t>(kv_tails_per_layer(codec->group, limits.max_seqs, limits.max_batch_tokens));
}

KvLayout KvLayout::from_spec(const KvSpec& spec, bool split_windows) {
  KvLayout l;
  const int L = static_cast<int>(spec.layers.size());
  l.group_of_layer.assign(L, 0);
  l.slot_of_layer.assign(L, 0);
  if (!split_windows || L == 0) {
    l.n_groups = 1;
    l.layers_per_group = L;
    for (int il = 0; il < L; ++il) l.slot_of_layer[il] = il;
    l.group_window = {0};
    return l;
  }
  std::map<int, std::vector<int>> by_window;  // window -> layers (global = 0 first)
  for (int il = 0; il < L; ++il) by_window[std::max(0, spec.layers[il].window)].push_back(il);
  int g = 0;
  for (const auto& [w, layers] : by_window) g = std::gcd(g, static_cast<int>(layers.size()));
  l.layers_per_group = g;
  l.n_groups = 0;
  l.group_window.clear();
  for (const auto& [w, layers] : by_window)
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % g == 0) {
        l.group_window.push_back(w);
        ++l.n_groups;
      }
      l.group_of_layer[layers[i]] = l.n_groups - 1;
      l.slot_of_layer[layers[i]] = static_cast<int>(i % g);
    }
  return l;
}

Result<std::unique_ptr<KvBlockPool>> KvBlockPool::create(const ModelConfig& cfg, int block_size, size_t memory_bytes,
                                                         int64_t n_blocks, KvTypes types) {
  return create(kv_spec_from_config(cfg, types), KvLayout::from_config(cfg, false), block_size, memory_bytes,
                n_blocks);
}

KvSlotDims KvSlotDims::of(const KvSpec& spec, const KvLayout& layout) {
  KvSlotDims d;
  d.k_dim.assign(std::max(0, layout.layers_per_group), 0);
  d.v_dim.assign(std::max(0, layout.layers_per_group), 0);
  for (size_t il = 0; il < spec.layers.size() && il < layout.slot_of_layer.size(); ++il) {
    const int s = layout.slot_of_layer[il];
    if (s < 0 || s >= layout.layers_per_group) continue;
    d.k_dim[s] = std::max(d.k_dim[s], spec.layers[il].k_dim);
    d.v_dim[s] = std::max(d.v_dim[s], spec.layers[il].v_dim);
  }
  for (size_t s = 0; s < d.k_dim.size(); ++s) {
    d.k_bytes.push_back(static_cast<int64_t>(kv_row_bytes(spec.types.k, d.k_dim[s])));
    d.v_bytes.push_back(static_cast<int64_t>(kv_row_bytes(spec.types.v, d.v_dim[s])));
  }
  return d;
}

size_t KvSlotDims::page_bytes(int block_size) const {
  size_t bytes = 0;
  for (size_t s = 0; s < k_bytes.size(); ++s) bytes += static_cast<size_t>(k_bytes[s] + v_bytes[s]);
  return bytes * static_cast<size_t>(block_size);
}

Result<std::unique_ptr<KvBlockPool>> KvBlockPool::create(const KvSpec& spec, const KvLayout& layout, int block_size,
                                                         size_t memory_bytes, int64_t n_blocks,
                                                         const KvPoolLimits& limits, Backend* memory) {
  if (block_size < 1 || block_size > 4096) return Status::errorf("KV block size {} out of range [1, 4096]", block_size);
  if (spec.layers.empty()) return Status::error("KV pool: invalid model shape");
  for (const KvLayerSpec& l : spec.layers)
    if (l.k_dim < 1 || l.v_dim < 1) return Status::error("KV pool: invalid model shape");
  if (layout.layers_per_group < 1 || layout.group_of_layer.size() != spec.layers.size())
    return Status::error("KV pool: layout does not match the model");
  if (spec.head_dim > 0) EMBER_RETURN_IF_ERROR(kv_type_check(spec.types.k, spec.head_dim));
  if (spec.head_dim_v > 0) EMBER_RETURN_IF_ERROR(kv_type_check(spec.types.v, spec.head_dim_v));
  const KvGroupCodec* codec = kv_group_codec(spec.types.k);
  if (kv_group_codec(spec.types.v))
    return Status::errorf("KV cache dtype {} is a key format (V: f32, f16, bf16, q8, q4)", kv_type_name(spec.types.v));
  if (codec && (block_size % codec->group != 0 || spec.head_dim <= 0))
    return Status::errorf("KV cache dtype {} needs a block size that is a multiple of {} (have {})",
                          kv_type_name(codec->type), codec->group, block_size);
  auto grouped = [](KvType t) { return t == KvType::kQ8 || t == KvType::kQ4 || t == KvType::kQ4C; };
  for (const KvLayerSpec& l : spec.layers)
    if ((grouped(spec.types.k) && l.k_dim % kKvGroup) || (grouped(spec.types.v) && l.v_dim % kKvGroup))
      return Status::errorf("KV pool: rows of {} / {} elements do not split into groups of {}", l.k_dim, l.v_dim,
                            kKvGroup);
  auto p = std::unique_ptr<KvBlockPool>(new KvBlockPool());
  p->layout_ = layout;
  p->types_ = spec.types;
  p->block_size_ = block_size;
  p->dims_ = KvSlotDims::of(spec, layout);
  p->codec_ = codec;
  // Token groups: the tails' worst case comes out of the budget first.
  const size_t reserve = kv_tail_reserve_bytes(spec, layout, limits);
  p->tail_reserve_ = reserve;
  const size_t per_block = p->bytes_per_block();
  if (n_blocks <= 0) {
    const char* staged = codec ? kv_type_name(codec->staged) : "";
    const char* name = codec ? kv_type_name(codec->type) : "";
    if (reserve > 0 && memory_bytes <= reserve)
      return Status::errorf(
          "KV cache budget of {} bytes ({:.1f} MiB) cannot hold the {} key tails reserve of {} bytes ({:.1f} MiB: "
          "{} token groups for {} sequences and steps of {} tokens) and any pages: raise the KV cache memory or "
          "lower max_num_seqs / max_num_batched_tokens",
          memory_bytes, memory_bytes / 1048576.0, name, reserve, reserve / 1048576.0, staged, limits.max_seqs,
          limits.max_batch_tokens);
    const size_t pages = memory_bytes - reserve;
    n_blocks = static_cast<int64_t>(pages / per_block);
    if (n_blocks < 1) {
      const Status below =
          Status::errorf("KV cache budget of {} bytes is below one block ({} bytes)", pages, per_block);
      return reserve > 0 ? below.with_context(fmt::format("after the {} key tails reserve of {} bytes ({:.1f} MiB) "
                                                          "out of {} bytes",
                                                          name, reserve, reserve / 1048576.0, memory_bytes))
                         : below;
    }
  }
  if (n_blocks > (int64_t{1} << 30)) return Status::errorf("KV pool: {} blocks is too many", n_blocks);
  p->n_blocks_ = static_cast<int32_t>(n_blocks);
  if (memory && !memory->host_memory()) {
    if (codec)
      return Status::errorf("KV pool: keys in {} (token groups) are not stored in the {} backend's memory",
                            kv_type_name(codec->type), memory->name());
    p->memory_ = memory;
  }
  for (int s = 0; s < layout.layers_per_group; ++s) {
    const size_t k_n = static_cast<size_t>(n_blocks) * block_size * p->dims_.k_bytes[s];
    const size_t v_n = static_cast<size_t>(n_blocks) * block_size * p->dims_.v_bytes[s];
    if (p->memory_) {
      auto k = p->memory_->alloc(k_n);
      auto v = k ? p->memory_->alloc(v_n) : nullptr;
      if (!k || !v)
        return Status::errorf("KV pool: cannot allocate {} bytes of {} memory", per_block * n_blocks,
                              p->memory_->name());
      p->k_.push_back(k->as<uint8_t>());
      p->v_.push_back(v->as<uint8_t>());
      p->backend_pages_.push_back(std::move(k));
      p->backend_pages_.push_back(std::move(v));
      continue;
    }
    uint8_t* k = new (std::nothrow) uint8_t[k_n];
    uint8_t* v = new (std::nothrow) uint8_t[v_n];
    if (!k || !v) {
      delete[] k;
      delete[] v;
      return Status::errorf("KV pool: cannot allocate {} bytes", per_block * n_blocks);
    }
    p->host_.emplace_back(k);  // uninitialised: only written rows are read
    p->host_.emplace_back(v);
    p->k_.push_back(k);
    p->v_.push_back(v);
  }
  if (codec) {
    p->tails_.resize(layout.layers_per_group);
    for (int s = 0; s < layout.layers_per_group; ++s)
      p->tails_[s].init(*codec, n_blocks * p->groups_per_page(), p->dims_.k_dim[s], spec.head_dim);
  }
  return p;
}

void KvBlockPool::move_bytes(uint8_t* dst, const uint8_t* src, size_t n) {
  if (memory_)
    memory_->copy(dst, src, n);
  else
    std::copy(src, src + n, dst);
}

size_t KvBlockPool::bytes_per_block() const { return dims_.page_bytes(block_size_); }

KvMemory KvBlockPool::memory() const {
  KvMemory m;
  m.page_bytes = bytes_per_block();
  m.tail_reserve_bytes = static_cast<int64_t>(tail_reserve_);
  m.tail_bytes = static_cast<int64_t>(tail_bytes());
  m.tail_peak_bytes = static_cast<int64_t>(tail_peak_bytes());
  return m;
}

void KvBlockPool::apply_ops(const std::vector<KvOp>& ops, const std::vector<KvFrontier>& live, KvSwapPages* swap) {
  // Token groups: only the tail of each live sequence's frontier group
  // outlives a step ("Tails" in kv_pool.h): dead ones go before the ops add
  // any (except on pages a swap-out still reads), the rest after them.
  swap_out_pages_.clear();
  if (codec_) {
    for (const KvOp& op : ops)
      if (op.kind == KvOp::Kind::kSwapOut) swap_out_pages_.push_back(op.src);
    release_tails(live, swap_out_pages_);
  }
  for (const KvOp& op : ops) {
    switch (op.kind) {
      case KvOp::Kind::kCopy:
        copy_block(op.src, op.dst, op.n_rows);
        break;
      case KvOp::Kind::kSwapOut: {
        if (swap->size() <= static_cast<size_t>(op.dst)) swap->resize(op.dst + 1);
        std::vector<uint8_t>& host = (*swap)[op.dst];
        host.resize(swap_page_bytes(op.src, op.n_rows));
        read_page(op.src, host.data(), op.n_rows);
        break;
      }
      case KvOp::Kind::kSwapIn:
        EMBER_CHECK(static_cast<size_t>(op.src) < swap->size() && !(*swap)[op.src].empty());
        write_page(op.dst, (*swap)[op.src].data());
        std::vector<uint8_t>().swap((*swap)[op.src]);  // host memory goes back with the slot
        break;
    }
  }
  if (!swap_out_pages_.empty()) release_tails(live);
}

void KvBlockPool::copy_block(int32_t src, int32_t dst, int n_rows) {
  n_rows = std::clamp(n_rows, 0, block_size_);
  const int gpp = groups_per_page();
  const int open = open_group(n_rows);
  for (int s = 0; s < layout_.layers_per_group; ++s) {
    move_bytes(k_block(s, dst), k_block(s, src), static_cast<size_t>(n_rows * k_row_bytes(s)));
    move_bytes(v_block(s, dst), v_block(s, src), static_cast<size_t>(n_rows * v_row_bytes(s)));
    if (!tails_.empty())
      for (int g = 0; g < gpp; ++g) tails_[s].copy(g == open ? int64_t{src} * gpp + g : -1, int64_t{dst} * gpp + g);
  }
}

void KvBlockPool::release_tails(const std::vector<KvFrontier>& live, const std::vector<int32_t>& keep_pages) {
  if (tails_.empty()) return;
  const int gpp = groups_per_page();
  keep_ids_.clear();
  for (const KvFrontier& f : live) {
    if (!f.tables || f.pos < 0) continue;
    const size_t i = static_cast<size_t>(f.pos / block_size_);
    for (const std::vector<int32_t>& t : *f.tables)
      if (i < t.size() && t[i] >= 0) keep_ids_.push_back(int64_t{t[i]} * gpp + f.pos % block_size_ / codec_->group);
  }
  std::sort(keep_ids_.begin(), keep_ids_.end());
  keep_pages_.assign(keep_pages.begin(), keep_pages.end());
  std::sort(keep_pages_.begin(), keep_pages_.end());
  auto keep = [&](int64_t id) {
    return std::binary_search(keep_ids_.begin(), keep_ids_.end(), id) ||
           std::binary_search(keep_pages_.begin(), keep_pages_.end(), static_cast<int32_t>(id / gpp));
  };
  for (KvGroupTails& t : tails_) t.release_unless(keep);
}

size_t KvBlockPool::tail_bytes() const {
  size_t b = 0;
  for (const KvGroupTails& t : tails_) b += static_cast<size_t>(t.live_bytes());
  return b;
}

size_t KvBlockPool::tail_peak_bytes() const {
  size_t b = 0;
  for (const KvGroupTails& t : tails_) b += static_cast<size_t>(t.peak_bytes());
  return b;
}

size_t KvBlockPool::swap_page_bytes(int32_t b, int n_rows) const {
  size_t bytes = bytes_per_block() + tails_.size() * static_cast<size_t>(groups_per_page());  // state bytes
  const int open = open_group(n_rows);
  if (open >= 0)
    for (const KvGroupTails& t : tails_)
      if (t.rows(int64_t{b} * groups_per_page() + open)) bytes += static_cast<size_t>(t.tail_bytes());
  return bytes;
}

void KvBlockPool::read_page(int32_t b, uint8_t* dst, int n_rows) {
  for (int s = 0; s < layout_.layers_per_group; ++s) {
    const size_t kn = static_cast<size_t>(block_size_) * k_row_bytes(s);
    const size_t vn = static_cast<size_t>(block_size_) * v_row_bytes(s);
    move_bytes(dst, k_block(s, b), kn);
    dst += kn;
    move_bytes(dst, v_block(s, b), vn);
    dst += vn;
  }
  const int open = open_group(n_rows);
  for (const KvGroupTails& t : tails_)
    for (int g = 0; g < groups_per_page(); ++g) {
      if (g == open) {
        dst += t.save(int64_t{b} * groups_per_page() + g, dst);
      } else {
        *dst++ = 0;  // no tail: the group is encoded, or holds no computed row
      }
    }
}

void KvBlockPool::write_page(int32_t b, const uint8_t* src) {
  for (int s = 0; s < layout_.layers_per_group; ++s) {
    const size_t kn = static_cast<size_t>(block_size_) * k_row_bytes(s);
    const size_t vn = static_cast<size_t>(block_size_) * v_row_bytes(s);
    move_bytes(k_block(s, b), src, kn);
    src += kn;
    move_bytes(v_block(s, b), src, vn);
    src += vn;
  }
  for (KvGroupTails& t : tails_)
    for (int g = 0; g < groups_per_page(); ++g) src += t.load(int64_t{b} * groups_per_page() + g, src);
}

PagedKvCache::PagedKvCache(KvBlockPool& pool, const std::vector<std::vector<int32_t>>& tables)
    : pool_(pool), tables_(&tables) {}

void PagedKvCache::sync() {
  const KvLayout& l = pool_.layout();
  n_synced_ = tables_->empty() ? 0 : (*tables_)[0].size();
  for (const auto& t : *tables_) n_synced_ = std::min(n_synced_, t.size());
  const size_t L = l.group_of_layer.size();
  k_ptr_.resize(L * n_synced_);
  v_ptr_.resize(L * n_synced_);
  if (pool_.group_codec()) tail_ptr_.resize(L * n_synced_ * pool_.groups_per_page());
  for (size_t il = 0; il < L; ++il) {
    const std::vector<int32_t>& t = (*tables_)[l.group_of_layer[il]];
    const int s = l.slot_of_layer[il];
    for (size_t i = 0; i < n_synced_; ++i) {
      k_ptr_[il * n_synced_ + i] = t[i] >= 0 ? pool_.k_block(s, t[i]) : nullptr;
      v_ptr_[il * n_synced_ + i] = t[i] >= 0 ? pool_.v_block(s, t[i]) : nullptr;
    }
  }
}

KvStoreView PagedKvCache::store_view(int layer) {
  KvStoreView v;
  v.k_blocks = pool_.group_codec() ? nullptr : k_ptr_.data() + static_cast<size_t>(layer) * n_synced_;
  v.v_blocks = v_ptr_.data() + static_cast<size_t>(layer) * n_synced_;
  v.block_size = pool_.block_size();
  const int s = pool_.layout().slot_of_layer[layer];
  v.k_row_bytes = pool_.k_row_bytes(s);
  v.v_row_bytes = pool_.v_row_bytes(s);
  v.k_type = pool_.types().k;
  v.v_type = pool_.types().v;
  return v;
}

KvView PagedKvCache::view(int layer) const {
  KvView v;
  v.k_blocks = k_ptr_.data() + static_cast<size_t>(layer) * n_synced_;
  v.v_blocks = v_ptr_.data() + static_cast<size_t>(layer) * n_synced_;
  v.block_size = pool_.block_size();
  const int s = pool_.layout().slot_of_layer[layer];
  v.k_row_bytes = pool_.k_row_bytes(s);
  v.v_row_bytes = pool_.v_row_bytes(s);
  v.k_type = pool_.types().k;
  v.v_type = pool_.types().v;
  if (pool_.group_codec()) {
    const int gpp = pool_.groups_per_page();
    const std::vector<int32_t>& t = (*tables_)[pool_.layout().group_of_layer[layer]];
    const uint8_t** tp = tail_ptr_.data() + static_cast<size_t>(layer) * n_synced_ * gpp;
    for (size_t i = 0; i < n_synced_; ++i)
      for (int g = 0; g < gpp; ++g)
        tp[i * gpp + g] = t[i] >= 0 ? pool_.tails(s).rows(int64_t{t[i]} * gpp + g) : nullptr;
    v.k_tails = tp;
    v.k_tail_row_bytes = pool_.tails(s).row_bytes();
  }
  return v;
}

void PagedKvCache::store_k(int layer, int64_t pos, const float* src, int64_t n) {
  const KvGroupCodec* codec = pool_.group_codec();
  if (!codec) return KvCache::store_k(layer, pos, src, n);
  const KvLayout& l = pool_.layout();
  const int s = l.slot_of_layer[layer], bs = pool_.block_size(), G = codec->group;
  const int32_t page = (*tables_)[l.group_of_layer[layer]][pos / bs];
  const int g = static_cast<int>(pos % bs / G);
  pool_.tails(s).store(int64_t{page} * pool_.groups_per_page() + g, static_cast<int>(pos % G), src, n,
                       pool_.k_block(s, page) + int64_t{g} * G * pool_.k_row_bytes(s));
}

void PagedKvCache::begin_k_writes(int layer, int64_t first_pos) {
  const KvGroupCodec* codec = pool_.group_codec();
  if (!codec) return;
  const KvLayout& l = pool_.layout();
  const int s = l.slot_of_layer[layer], bs = pool_.block_size(), G = codec->group;
  const std::vector<int32_t>& t = (*tables_)[l.group_of_layer[layer]];
  // Tails exist only for the groups of the last passes: walk back from the
  // last group ending at or before first_pos until one holds none.
  for (int64_t g = first_pos / G - 1; g >= 0; --g) {
    const int64_t p = g * G;
    if (static_cast<size_t>(p / bs) >= t.size() || t[p / bs] < 0) break;
    if (!pool_.tails(s).release_full(int64_t{t[p / bs]} * pool_.groups_per_page() + p % bs / G)) break;
  }
}

size_t PagedKvCache::memory_bytes() const {
  size_t pages = 0;
  for (const auto& t : *tables_)
    for (int32_t b : t) pages += b >= 0;
  return pages * pool_.bytes_per_block();
}

}  // namespace ember
