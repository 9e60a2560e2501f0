// AVX2 tiled online-softmax attention (the op table's entry at the AVX2 and
// AVX-512 levels); see kernels/attention.h for the canonical order. K/V rows
// in any format of kernels/kv_types.h are decoded in registers, 8 elements
// at a time, as they are read (never a page or a row to memory).
#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"

namespace ember::avx2 {

namespace {

constexpr int kTile = 64;       // keys per online-softmax step
constexpr int kTokenTile = 4;   // query tokens per prefill task


// Running softmax state of one row: max m, denominator l, numerator acc[dv].
struct RowState {
  float m;
  float l;
  float* acc;
};

constexpr int kMaxGroup = 8;  // query heads of one token reduced together
// Rows one reduce_chunk call takes: the heads of a group for every token of a
// prefill task that has the same key range in a chunk (they share each K/V
// row load).
constexpr int kMaxRows = kTokenTile * kMaxGroup;
// Head dims that are not a multiple of 16 take a plain path; compressed
// rows are decoded one head row at a time into a buffer this large.
constexpr int kMaxOddHeadDim = 1024;


// Loaders of 8 consecutive elements (from element i, i % 8 == 0) of a K/V
// head row stored in a format of kernels/kv_types.h, decoded to exactly the
// floats kv_load_row gives. F32 is a plain load (the historical kernel).
struct LoadF32 {
  static constexpr KvType kType = KvType::kF32;
  static __m256 load8(const uint8_t* row, int i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i); }
};
struct LoadF16 {
  static constexpr KvType kType = KvType::kF16;
  static __m256 load8(const uint8_t* row, int i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
};
struct LoadBF16 {
  static constexpr KvType kType = KvType::kBF16;
  static __m256 load8(const uint8_t* row, int i) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
};
inline float group_scale(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return _cvtsh_ss(h);
}
struct LoadQ8 {
  static constexpr KvType kType = KvType::kQ8;
  static __m256 load8(const uint8_t* row, int i) {
    const uint8_t* b = row + (i / kKvGroup) * (2 + kKvGroup);
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % kKvGroup));
    return _mm256_mul_ps(_mm256_set1_ps(group_scale(b)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
};
struct LoadQ4 {
  static constexpr KvType kType = KvType::kQ4;
  static __m256 load8(const uint8_t* row, int i) {
    const uint8_t* b = row + (i / kKvGroup) * (2 + kKvGroup / 2);
    const int o = i % kKvGroup;
    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + (o & 15))));
    q = o < kKvGroup / 2 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_set1_ps(group_scale(b)), _mm256_cvtepi32_ps(q));
  }
};

// out[r] = dot_f32(q[r], k, dk) for r < M (k decoded by KL), bit for bit
// the f32 kernel's arithmetic (same two accumulators and reduction),
// loading and decoding each K vector once for M rows. Requires dk % 16 == 0.
template <class KL, int M>
void dot_rows(const float* const* q, int dk, const uint8_t* k, float* out) {
  __m256 a0[M], a1[M];
  #pragma GCC unroll 8
  for (int r = 0; r < M; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int i = 0; i < dk; i += 16) {
    const __m256 k0 = KL::load8(k, i), k1 = KL::load8(k, i + 8);
    #pragma GCC unroll 8
    for (int r = 0; r < M; ++r) {
      a0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i), k0, a0[r]);
      a1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i + 8), k1, a1[r]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < M; ++r) out[r] = simd::hsum_f32x8(_mm256_add_ps(a0[r], a1[r]));
}

template <class KL>
void dot_group(const float* const* q, int nr, int dk, const uint8_t* k, float* out) {
  if (dk % 16 != 0) {  // odd head dims (f32, f16, bf16): one decoded head row, then the f32 dot
    float row[kMaxOddHeadDim];
    const float* kf = reinterpret_cast<const float*>(k);
    if (KL::kType != KvType::kF32) {
      kv_load_row(KL::kType, k, dk, row);
      kf = row;
    }
    for (int r = 0; r < nr; ++r) out[r] = dot_f32(q[r], kf, dk);
    return;
  }
  int r = 0;
  for (; r + 4 <= nr; r += 4) dot_rows<KL, 4>(q + r, dk, k, out + r);
  switch (nr - r) {
    case 3: dot_rows<KL, 3>(q + r, dk, k, out + r); break;
    case 2: dot_rows<KL, 2>(q + r, dk, k, out + r); break;
    case 1: dot_rows<KL, 1>(q + r, dk, k, out + r); break;
    default: break;
  }
}

// acc_r[i] += p[r][j] * v_j[i] for j = 0..n-1 in order, for M rows: the same
// fused multiply-adds as axpy_f32 per key, with accumulators kept in
// registers across keys (16 floats at a time), V decoded by VL. Requires
// dv % 16 == 0.
template <class VL, int M>
void pv_rows(float* const* acc, const float (*p)[kTile], const uint8_t* const* vrows, int n, int dv) {
  for (int i = 0; i < dv; i += 16) {
    __m256 a0[M], a1[M];
    #pragma GCC unroll 8
    for (int r = 0; r < M; ++r) {
      a0[r] = _mm256_loadu_ps(acc[r] + i);
      a1[r] = _mm256_loadu_ps(acc[r] + i + 8);
    }
    for (int j = 0; j < n; ++j) {
      const __m256 v0 = VL::load8(vrows[j], i), v1 = VL::load8(vrows[j], i + 8);
      #pragma GCC unroll 8
      for (int r = 0; r < M; ++r) {
        const __m256 pj = _mm256_set1_ps(p[r][j]);
        a0[r] = _mm256_fmadd_ps(pj, v0, a0[r]);
        a1[r] = _mm256_fmadd_ps(pj, v1, a1[r]);
      }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < M; ++r) {
      _mm256_storeu_ps(acc[r] + i, a0[r]);
      _mm256_storeu_ps(acc[r] + i + 8, a1[r]);
    }
  }
}

template <class VL>
void pv_group(float* const* acc, int nr, const float (*p)[kTile], const uint8_t* const* vrows, int n, int dv) {
  if (dv % 16 != 0) {  // odd head dims: each V row decoded once (not f32), then axpy
    float row[kMaxOddHeadDim];
    for (int j = 0; j < n; ++j) {
      const float* vf = reinterpret_cast<const float*>(vrows[j]);
      if (VL::kType != KvType::kF32) {
        kv_load_row(VL::kType, vrows[j], dv, row);
        vf = row;
      }
      for (int r = 0; r < nr; ++r) axpy_f32(acc[r], p[r][j], vf, dv);
    }
    return;
  }
  int r = 0;
  for (; r + 4 <= nr; r += 4) pv_rows<VL, 4>(acc + r, p + r, vrows, n, dv);
  switch (nr - r) {
    case 3: pv_rows<VL, 3>(acc + r, p + r, vrows, n, dv); break;
    case 2: pv_rows<VL, 2>(acc + r, p + r, vrows, n, dv); break;
    case 1: pv_rows<VL, 1>(acc + r, p + r, vrows, n, dv); break;
    default: break;
  }
}

// Reduces keys [kb, ke) (already clipped to the rows' visible range) into
// fresh states for nr <= kMaxRows query rows q[r] that attend to the same kv
// head and positions (heads of a GQA group, of one or several tokens), in
// 64-key tiles aligned to kb. Each row's arithmetic is independent of which
// other rows share the call. K rows decoded by KL, V rows by VL.
template <class KL, class VL>
void reduce_chunk_t(const AttentionShape& s, const float* const* q, int nr, int hkv, const KvView& kv, int64_t kb,
                    int64_t ke, RowState* const* st) {
  const int dk = s.head_dim, dv = s.head_dim_v;
  for (int r = 0; r < nr; ++r) {
    st[r]->m = -INFINITY;
    st[r]->l = 0.f;
    std::fill(st[r]->acc, st[r]->acc + dv, 0.f);
  }
  float sc[kMaxRows][kTile];
  float mt[kMaxRows], mn[kMaxRows];
  for (int64_t t0 = kb; t0 < ke; t0 += kTile) {
    const int64_t t1 = std::min(ke, t0 + kTile);
    const int n = static_cast<int>(t1 - t0);
    for (int r = 0; r < nr; ++r) mt[r] = -INFINITY;
    float dots[kMaxRows];
    for (int j = 0; j < n; ++j) {
      dot_group<KL>(q, nr, dk, kv_key_row(kv, t0 + j, hkv, dk), dots);
      for (int r = 0; r < nr; ++r) {
        float v = dots[r] * s.scale;
        if (s.softcap > 0.f) v = s.softcap * std::tanh(v / s.softcap);
        sc[r][j] = v;
        mt[r] = std::max(mt[r], v);
      }
    }
    for (int r = 0; r < nr; ++r) {
      mn[r] = std::max(st[r]->m, mt[r]);
      const float corr = std::exp(st[r]->m - mn[r]);
      if (corr != 1.f) {
        scale_row(st[r]->acc, corr, dv);
        st[r]->l *= corr;
      }
      exp_shifted_row(sc[r], n, mn[r]);
    }
    const uint8_t* vrows[kTile];
    float* accs[kMaxRows];
    for (int j = 0; j < n; ++j) vrows[j] = kv_value_row(kv, t0 + j, hkv, dv);
    for (int r = 0; r < nr; ++r) {
      accs[r] = st[r]->acc;
      for (int j = 0; j < n; ++j) st[r]->l += sc[r][j];
    }
    pv_group<VL>(accs, nr, sc, vrows, n, dv);
    for (int r = 0; r < nr; ++r) st[r]->m = mn[r];
  }
}

using ReduceChunkFn = void (*)(const AttentionShape&, const float* const*, int, int, const KvView&, int64_t, int64_t,
                               RowState* const*);

template <class KL>
ReduceChunkFn reduce_for_v(KvType v) {
  switch (v) {
    case KvType::kF32: return reduce_chunk_t<KL, LoadF32>;
    case KvType::kF16: return reduce_chunk_t<KL, LoadF16>;
    case KvType::kBF16: return reduce_chunk_t<KL, LoadBF16>;
    case KvType::kQ8: return reduce_chunk_t<KL, LoadQ8>;
    case KvType::kQ4: return reduce_chunk_t<KL, LoadQ4>;
  }
  return reduce_chunk_t<KL, LoadF32>;
}

ReduceChunkFn reduce_for(KvType k, KvType v) {
  switch (k) {
    case KvType::kF32: return reduce_for_v<LoadF32>(v);
    case KvType::kF16: return reduce_for_v<LoadF16>(v);
    case KvType::kBF16: return reduce_for_v<LoadBF16>(v);
    case KvType::kQ8: return reduce_for_v<LoadQ8>(v);
    case KvType::kQ4: return reduce_for_v<LoadQ4>(v);
  }
  return reduce_for_v<LoadF32>(v);
}

// One reduce_chunk call through the view's K/V formats.
inline void reduce_chunk(const AttentionShape& s, const float* const* q, int nr, int hkv, const KvView& kv, int64_t kb,
                         int64_t ke, RowState* const* st) {
  if (kv.k_type == KvType::kF32 && kv.v_type == KvType::kF32) {
    reduce_chunk_t<LoadF32, LoadF32>(s, q, nr, hkv, kv, kb, ke, st);
    return;
  }
  reduce_for(kv.k_type, kv.v_type)(s, q, nr, hkv, kv, kb, ke, st);
}

// into <- merge(into, part), the canonical chunk merge.
void merge_state(RowState* into, const RowState& part, int dv) {
  const float mn = std::max(into->m, part.m);
  const float a = std::exp(into->m - mn);
  const float b = std::exp(part.m - mn);
  for (int i = 0; i < dv; ++i) into->acc[i] = into->acc[i] * a + part.acc[i] * b;
  into->l = into->l * a + part.l * b;
  into->m = mn;
}

void finish_row(const RowState& st, float* out, int dv) {
  const float inv = st.l > 0.f ? 1.f / st.l : 0.f;
  for (int i = 0; i < dv; ++i) out[i] = st.acc[i] * inv;
}

// Chunk index range [c0, c1) intersecting the visible keys of position p.
inline void chunk_range(const AttentionShape& s, int64_t p, int64_t* c0, int64_t* c1) {
  int64_t lo, hi;
  attention_visible_range(s, p, &lo, &hi);
  *c0 = lo / kAttnChunk;
  *c1 = (hi + kAttnChunk - 1) / kAttnChunk;
}

}  // namespace

int64_t attention_scratch_floats(const AttentionShape& s, int64_t n_tokens, int n_threads, int64_t max_pos) {
  const int64_t dv = s.head_dim_v;
  const int64_t n_chunks = max_pos / kAttnChunk + 1;
  // Decode path: one partial (dv + 2) per (row, chunk).
  const int64_t decode = n_tokens <= kTokenTile ? n_tokens * s.n_head * n_chunks * (dv + 2) : 0;
  // Prefill path: per thread, running + part accumulators for a head group.
  const int64_t prefill = static_cast<int64_t>(n_threads) * 2 * kMaxRows * dv;
  return decode + prefill + 64;
}

void attention_ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                      const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                      ThreadPool& pool) {
  auto kv_of = [&](int64_t t) -> const KvView& { return views[view_of_token ? view_of_token[t] : 0]; };
  const int rep = s.n_head / s.n_head_kv;
  const int dk = s.head_dim, dv = s.head_dim_v;
  const int64_t q_stride = static_cast<int64_t>(s.n_head) * dk;
  const int64_t o_stride = static_cast<int64_t>(s.n_head) * dv;

  if (n_tokens <= kTokenTile) {
    // Decode: parallel over (token, kv head, chunk) partials, then ordered merge.
    int64_t max_pos = 0;
    for (int64_t t = 0; t < n_tokens; ++t) max_pos = std::max<int64_t>(max_pos, pos[t]);
    const int64_t n_chunks = max_pos / kAttnChunk + 1;
    const int64_t part_size = dv + 2;
    const int64_t n_items = n_tokens * s.n_head_kv * n_chunks;
    pool.parallel_for(n_items, 1, [&](int64_t b, int64_t e, int) {
      RowState st[kMaxGroup];
      RowState* sp[kMaxGroup];
      const float* qr[kMaxGroup];
      for (int64_t it = b; it < e; ++it) {
        const int64_t c = it % n_chunks;
        const int64_t t = it / n_chunks / s.n_head_kv;
        const int hkv = static_cast<int>(it / n_chunks % s.n_head_kv);
        int64_t lo, hi;
        attention_visible_range(s, pos[t], &lo, &hi);
        const int64_t kb = std::max(lo, c * kAttnChunk), ke = std::min(hi, (c + 1) * kAttnChunk);
        for (int h0 = hkv * rep; h0 < (hkv + 1) * rep; h0 += kMaxGroup) {
          const int nr = std::min(kMaxGroup, (hkv + 1) * rep - h0);
          auto part = [&](int r) { return scratch + ((t * s.n_head + h0 + r) * n_chunks + c) * part_size; };
          if (kb >= ke) {
            for (int r = 0; r < nr; ++r) {
              part(r)[0] = -INFINITY;  // empty: skipped at merge
              part(r)[1] = 0.f;
            }
            continue;
          }
          for (int r = 0; r < nr; ++r) {
            st[r] = RowState{0, 0, part(r) + 2};
            sp[r] = &st[r];
            qr[r] = q + t * q_stride + static_cast<int64_t>(h0 + r) * dk;
          }
          reduce_chunk(s, qr, nr, hkv, kv_of(t), kb, ke, sp);
          for (int r = 0; r < nr; ++r) {
            part(r)[0] = st[r].m;
            part(r)[1] = st[r].l;
          }
        }
      }
    });
    pool.parallel_for(n_tokens * s.n_head, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t t = row / s.n_head;
        int64_t c0, c1;
        chunk_range(s, pos[t], &c0, &c1);
        float* first = scratch + (row * n_chunks + c0) * part_size;
        RowState acc{first[0], first[1], first + 2};
        for (int64_t c = c0 + 1; c < c1; ++c) {
          float* p = scratch + (row * n_chunks + c) * part_size;
          if (p[1] == 0.f && p[0] == -INFINITY) continue;
          merge_state(&acc, RowState{p[0], p[1], p + 2}, dv);
        }
        finish_row(acc, out + t * o_stride + (row % s.n_head) * dv, dv);
      }
    });
    return;
  }

  // Prefill: tasks of (kv head, token tile). Every row reduces its chunks in
  // increasing order (the first into its running state, later ones into a
  // fresh part state merged after it), exactly as alone; chunk by chunk, the
  // rows of the task's tokens whose key range in that chunk is the same go
  // through one reduce_chunk call, so each K/V row is loaded once for all
  // of them.
  const int64_t n_tiles = (n_tokens + kTokenTile - 1) / kTokenTile;
  pool.parallel_for(s.n_head_kv * n_tiles, 1, [&](int64_t b, int64_t e, int ith) {
    float* run_acc = scratch + static_cast<int64_t>(ith) * 2 * kMaxRows * dv;
    float* part_acc = run_acc + kMaxRows * dv;
    RowState run[kMaxRows], part[kMaxRows];
    RowState* sp[kMaxRows];
    const float* qr[kMaxRows];
    int merge_rows[kMaxRows];
    for (int64_t task = b; task < e; ++task) {
      const int hkv = static_cast<int>(task / n_tiles);
      const int64_t t0 = (task % n_tiles) * kTokenTile;
      const int nt = static_cast<int>(std::min<int64_t>(n_tokens, t0 + kTokenTile) - t0);
      int64_t lo[kTokenTile], hi[kTokenTile], c0[kTokenTile], c1[kTokenTile];
      int64_t c_first = INT64_MAX, c_last = 0;
      for (int i = 0; i < nt; ++i) {
        attention_visible_range(s, pos[t0 + i], &lo[i], &hi[i]);
        chunk_range(s, pos[t0 + i], &c0[i], &c1[i]);
        c_first = std::min(c_first, c0[i]);
        c_last = std::max(c_last, c1[i]);
      }
      for (int h0 = hkv * rep; h0 < (hkv + 1) * rep; h0 += kMaxGroup) {
        const int nr = std::min(kMaxGroup, (hkv + 1) * rep - h0);
        for (int i = 0; i < nt * nr; ++i) {
          run[i] = RowState{0, 0, run_acc + i * dv};
          part[i] = RowState{0, 0, part_acc + i * dv};
        }
        for (int64_t c = c_first; c < c_last; ++c) {
          bool done[kTokenTile] = {};
          for (int i = 0; i < nt; ++i) {
            if (done[i] || c < c0[i] || c >= c1[i]) continue;
            const int64_t kb = std::max(lo[i], c * kAttnChunk), ke = std::min(hi[i], (c + 1) * kAttnChunk);
            const KvView& kv = kv_of(t0 + i);
            // Rows of token i and of every later token with the same keys.
            int n = 0, n_merge = 0;
            for (int j = i; j < nt; ++j) {
              if (done[j] || c < c0[j] || c >= c1[j] || &kv_of(t0 + j) != &kv) continue;
              if (std::max(lo[j], c * kAttnChunk) != kb || std::min(hi[j], (c + 1) * kAttnChunk) != ke) continue;
              done[j] = true;
              for (int r = 0; r < nr; ++r, ++n) {
                const int row = j * nr + r;
                qr[n] = q + (t0 + j) * q_stride + static_cast<int64_t>(h0 + r) * dk;
                if (c == c0[j]) {
                  sp[n] = &run[row];
                } else {
                  sp[n] = &part[row];
                  merge_rows[n_merge++] = row;
                }
              }
            }
            reduce_chunk(s, qr, n, hkv, kv, kb, ke, sp);
            for (int k = 0; k < n_merge; ++k) merge_state(&run[merge_rows[k]], part[merge_rows[k]], dv);
          }
        }
        for (int i = 0; i < nt; ++i)
          for (int r = 0; r < nr; ++r)
            finish_row(run[i * nr + r], out + (t0 + i) * o_stride + static_cast<int64_t>(h0 + r) * dv, dv);
      }
    }
  });
}

}  // namespace ember::avx2
