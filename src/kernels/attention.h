// Causal multi-head attention over a (possibly paged) K/V store (f32, or a
// compressed format of kernels/kv_types.h read in place), tiled
// with an online softmax (FlashAttention-style): the score matrix is never
// materialised; extra memory is O(rows x head_dim).
//
// Canonical arithmetic (what makes results batch-invariant): for every query
// row, the visible keys are cut into fixed chunks of kAttnChunk positions
// (aligned to position 0); each chunk is reduced on its own in 64-key tiles
// with an online softmax, and chunk results are merged in increasing order.
// Whether chunks run in parallel (decode: flash-decoding over the context) or
// sequentially (prefill), and whatever other rows share the batch, every row
// gets the same bits. That is the kernel of kernels/cpu/attention_tiles.h,
// compiled for AVX2 (avx2/attention.cpp) and AVX-512 (avx512/attention.cpp)
// with the same bits at both levels; the scalar level is the
// reference (kernels/ref/attention.h: a plain softmax per row in double,
// row-parallel, batch-invariant too). The functions below dispatch at the
// active ISA level (core/cpu_features.h).
#pragma once

#include <climits>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/kv_types.h"

namespace ember {

constexpr int kAttnChunk = 256;

// K/V rows addressed by position through a block table: the row of position
// p for kv head h is blocks[p / block_size] + (p % block_size) * row_bytes
// + h * kv_row_bytes(type, head_dim) (bytes; the format of kernels/
// kv_types.h, f32 by default). A contiguous cache is one block of size >=
// capacity. q4c keys (block_size % kKvTokenGroup == 0): the group of
// position p is the region at blocks[p / block_size] + (p % block_size /
// kKvTokenGroup * kKvTokenGroup) * k_row_bytes, and k_tails[(p /
// block_size) * (block_size / kKvTokenGroup) + p % block_size /
// kKvTokenGroup] the f16 rows of that group (k_tail_row_bytes apart; null
// when the cache holds none), read only where kv_key_in_tail says.
struct KvView {
  const uint8_t* const* k_blocks = nullptr;
  const uint8_t* const* v_blocks = nullptr;
  int block_size = 0;
  int64_t k_row_bytes = 0;  // bytes between consecutive positions
  int64_t v_row_bytes = 0;
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;
  const uint8_t* const* k_tails = nullptr;  // q4c only
  int64_t k_tail_row_bytes = 0;
};

// Where one sequence's K and V rows of one layer are written (the
// writable side of a KvView, Backend::kv_store): the row of position p is
// k_blocks[p / block_size] + (p % block_size) * k_row_bytes (KvView's
// addressing, head 0; kv head h at h * kv_row_bytes(k_type, head_dim)),
// encoded in k_type (kernels/kv_types.h); V alike. k_blocks null: the
// cache stores its K rows itself (a token-group key format, q4c, through
// its tails: model/kv_cache.h KvCache::store_k), and only V is written.
struct KvStoreView {
  uint8_t* const* k_blocks = nullptr;
  uint8_t* const* v_blocks = nullptr;
  int block_size = 0;
  int64_t k_row_bytes = 0;
  int64_t v_row_bytes = 0;
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;
};

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;    // Q/K
  int head_dim_v = 0;  // V
  float scale = 1.f;   // multiplies q·k
  float softcap = 0.f; // if > 0: s = softcap * tanh(s / softcap)
  int sliding_window = 0;  // if > 0: key visible iff q_pos - k_pos < window
  // Learned attention sinks (gpt-oss), [n_head] or null: head h's softmax
  // gets one more logit, sinks[h] (already scaled; no value row), in its
  // denominator: p_j = exp(s_j - m) / (sum_i exp(s_i - m) + exp(sinks[h] - m))
  // with m the largest of the scores and the sink. Not owned.
  const float* sinks = nullptr;
};

// Visible key positions [lo, hi) of a query at position p: causal, and
// within the sliding window when there is one.
inline void attention_visible_range(const AttentionShape& s, int64_t p, int64_t* lo, int64_t* hi) {
  *hi = p + 1;
  *lo = s.sliding_window > 0 && p - s.sliding_window + 1 > 0 ? p - s.sliding_window + 1 : 0;
}
// K / V row (bytes, the view's type) of position p for kv head h (head_dim
// hd) through a view.
inline const uint8_t* kv_key_row(const KvView& kv, int64_t p, int h, int hd) {
  return kv.k_blocks[p / kv.block_size] + (p % kv.block_size) * kv.k_row_bytes +
         static_cast<int64_t>(h) * static_cast<int64_t>(kv_row_bytes(kv.k_type, hd));
}
inline const uint8_t* kv_value_row(const KvView& kv, int64_t p, int h, int hd) {
  return kv.v_blocks[p / kv.block_size] + (p % kv.block_size) * kv.v_row_bytes +
         static_cast<int64_t>(h) * static_cast<int64_t>(kv_row_bytes(kv.v_type, hd));
}

// q4c: the first key position a query at position qpos reads from the f16
// tail (the keys of its own group when that group is not full at qpos + 1
// positions; INT64_MAX for other formats or a query that ends its group).
inline int64_t kv_tail_from(const KvView& kv, int64_t qpos) {
  if (kv.k_type != KvType::kQ4C || (qpos + 1) % kKvTokenGroup == 0) return INT64_MAX;
  return qpos / kKvTokenGroup * kKvTokenGroup;
}
// q4c: head h's part of the group region of position p, and the f16 tail
// row of (p, h).
inline const uint8_t* kv_q4c_region(const KvView& kv, int64_t p, int h, int hd) {
  return kv.k_blocks[p / kv.block_size] + (p % kv.block_size / kKvTokenGroup * kKvTokenGroup) * kv.k_row_bytes +
         static_cast<int64_t>(h) * 12 * hd;
}
inline const uint8_t* kv_q4c_tail_row(const KvView& kv, int64_t p, int h, int hd) {
  const int64_t gpb = kv.block_size / kKvTokenGroup;
  return kv.k_tails[p / kv.block_size * gpb + p % kv.block_size / kKvTokenGroup] +
         p % kKvTokenGroup * kv.k_tail_row_bytes + static_cast<int64_t>(h) * 2 * hd;
}
// The key of position p (kv head h) as a query at qpos sees it, decoded to
// floats (every format; the reference and the odd-head-dim paths).
inline void kv_load_key(const KvView& kv, int64_t p, int64_t qpos, int h, int hd, float* dst) {
  if (kv.k_type != KvType::kQ4C)
    kv_load_row(kv.k_type, kv_key_row(kv, p, h, hd), hd, dst);
  else if (p >= kv_tail_from(kv, qpos))
    kv_load_row(KvType::kF16, kv_q4c_tail_row(kv, p, h, hd), hd, dst);
  else
    kv_q4c_load_row(kv_q4c_region(kv, p, h, hd), static_cast<int>(p % kKvTokenGroup), hd, dst);
}

// Scratch (floats, 8-byte aligned as any new / vector buffer is) needed by
// attention() for n_tokens query tokens with n_threads, at every ISA level
// (a buffer sized once stays valid if the level changes).
int64_t attention_scratch_floats(const AttentionShape& s, int64_t n_tokens, int n_threads, int64_t max_pos);

// out[t, h*head_dim_v : ...] = softmax(q_t,h · K[0..pos_t]) V for each token t
// (query positions `pos[t]`, keys 0..pos[t] inclusive, subject to the window).
// q: [n_tokens, n_head*head_dim]; out: [n_tokens, n_head*head_dim_v].
void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens, const KvView& kv,
               float* out, float* scratch, ThreadPool& pool);

// Ragged batch of several sequences: token t attends to its own sequence's
// K/V, views[view_of_token[t]] (positions as above). Each row gets exactly
// the bits that attention() gives it alone, whatever the other rows are.
// Scratch: attention_scratch_floats(s, n_tokens, threads, max over pos).
void attention_ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                      const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                      ThreadPool& pool);

}  // namespace ember
