// The tiled online-softmax attention of the AVX2 and AVX-512 levels, written
// once over an ISA "vector of 16 floats" (the traits V of avx2/attention.cpp
// and avx512/attention.cpp) so that both levels compute the canonical
// arithmetic of kernels/attention.h with the same bits:
//   q·k   per 16 elements, fmas into a 16-lane accumulator (AVX2: two 8-lane
//         halves a0 = lanes 0-7, a1 = lanes 8-15; AVX-512: one register),
//         then hsum_f32x8(a0 + a1); head dims that are not a multiple of 16
//         take avx2::dot_f32 on one decoded head row;
//   p·V   acc[i] = fma(p_j, v_j[i], acc[i]) for keys j in increasing order;
//   softmax per 64-key tile (aligned to the chunk's first key): avx2::
//         exp_shifted_row, avx2::scale_row, and the chunk merge / final
//         division of avx2/attention.cpp (one compiled copy for both levels).
// K/V rows in any format of kernels/kv_types.h are decoded in registers, 16
// elements at a time, as they are read (never a page or a row to memory,
// except one head row for the odd head dims); q4c keys from their group
// region, or from the f16 tail for a query's own unfinished group (dot_key).
//
// Prefill shares each K/V load among many query rows: all query heads of a
// kv head (GQA), for every token of a token tile whose keys in a chunk start
// at the same position, including the diagonal chunk, where the tokens' key
// ranges end at different positions. Rows are ordered by decreasing end, so
// the rows that see key j are a prefix, and each row does exactly the
// arithmetic it does alone (a key a row does not see is never added to it).
//
// Decode (a few tokens) splits each token's keys into 256-key chunks and
// walks a chunk tile by tile for a block of kv heads at once, so it reads
// the cache rows (all heads of a position) in order and prefetches the next
// tile's rows while computing; compressed keys are decoded once per 16 keys
// into an L1 buffer shared by the query heads of their kv head.
//
// Internal to the CPU backend; everything here has internal linkage (the
// header is compiled into both ISA files with different flags). Stateless:
// threading is the pool's parallel_for, each task writing only its rows.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"

namespace ember {

namespace avx2 {
// Running softmax state of one row: max m, denominator l, numerator acc[dv].
struct AttnRowState {
  float m;
  float l;
  float* acc;
};
// into <- merge(into, part), the canonical chunk merge (avx2/attention.cpp).
void attn_merge_state(AttnRowState* into, const AttnRowState& part, int dv);
// out[i] = acc[i] / l (0 when l == 0); with an attention sink (sink >
// -inf, AttentionShape::sinks), the sink's term joins the denominator:
// m' = max(m, sink), out[i] = acc[i] * a / (l * a + exp(sink - m')) with
// a = exp(m - m').
void attn_finish_row(const AttnRowState& st, float sink, float* out, int dv);
}  // namespace avx2

namespace {
namespace attn_tiles {

using avx2::AttnRowState;

constexpr int kTile = 64;           // keys per online-softmax step
constexpr int kDecodeTokens = 4;    // batches up to this size take the flash-decoding path
constexpr int kTokenTile = 8;       // query tokens per prefill task
constexpr int kMaxGroup = 8;        // query heads of one token reduced together
// Rows one reduce_chunk call takes: the heads of a group for every token of a
// prefill task whose keys in a chunk start at the same position.
constexpr int kMaxRows = kTokenTile * kMaxGroup;
// Prefill reduce calls take whole tokens up to this many rows at head dims
// up to 128 (proportionally fewer above: more rows per K/V load outgrow L1
// with their q rows and accumulators).
constexpr int kShareRows = 16;
// The f16 scale that opens a q8 / q4 group at b.
inline float group_scale(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return _cvtsh_ss(h);
}

// out[k] = the row of position p0 + k (k < n) of head h in blocks of
// block_size positions, row_bytes apart, head rows of head_bytes: one
// division for the n rows instead of one per row.
inline void kv_rows(const uint8_t* const* blocks, int block_size, int64_t row_bytes, int64_t head_bytes, int64_t p0,
                    int n, int h, const uint8_t** out) {
  int64_t b = p0 / block_size;
  int64_t o = p0 % block_size;
  const int64_t off = static_cast<int64_t>(h) * head_bytes;
  for (int k = 0; k < n; ++k) {
    out[k] = blocks[b] + o * row_bytes + off;
    if (++o == block_size) {
      o = 0;
      ++b;
    }
  }
}

// Prefetches (into L1) the rows of heads [h0, h1) of positions [p0, p0 + n)
// (a contiguous run within each block when they are all the row's heads).
// Decode reads one head's rows a cache row apart (all heads of a position
// are one row), a stride the hardware prefetchers follow poorly across the
// pages of a paged cache. Into L1 although
// a tile of all heads can outgrow it (q8 1B shape: 70 KB): the lines a unit
// prefetches are read one tile later, and what L1 evicts stays in L2; into
// L2 (T1) measured the same for f32 and 5% slower for q8
// (docs/performance.md, "Decode attention").
inline void prefetch_heads(const uint8_t* const* blocks, int block_size, int64_t row_bytes, int64_t head_bytes,
                           int64_t p0, int n, int h0, int h1) {
  const uint8_t* rows[kTile];
  const int64_t len = static_cast<int64_t>(h1 - h0) * head_bytes;
  for (int k0 = 0; k0 < n; k0 += kTile) {
    const int m = std::min(kTile, n - k0);
    kv_rows(blocks, block_size, row_bytes, head_bytes, p0 + k0, m, h0, rows);
    for (int k = 0; k < m; ++k) {
      const char* r = reinterpret_cast<const char*>(rows[k]);
      for (int64_t x = 0; x < len; x += 64) lanes::prefetch_line<true>(r + x);
      lanes::prefetch_line<true>(r + len - 1);
    }
  }
}

// prefetch_heads for the K and V rows of a view (V only for q4c keys, which
// live in group regions and tails).
inline void prefetch_kv(const KvView& kv, int dk, int dv, int64_t p0, int n, int h0, int h1) {
  if (!kv_token_grouped(kv.k_type))
    prefetch_heads(kv.k_blocks, kv.block_size, kv.k_row_bytes, kv_row_bytes(kv.k_type, dk), p0, n, h0, h1);
  prefetch_heads(kv.v_blocks, kv.block_size, kv.v_row_bytes, kv_row_bytes(kv.v_type, dv), p0, n, h0, h1);
}

// Compressed rows of odd head dims are decoded one head row at a time into a
// buffer this large.
constexpr int kMaxOddHeadDim = 1024;

// out[r] = q[r]·k for r < M (K decoded by V::load_kv<KT>; q4c: position
// kr of the group region k, V::load_q4c), loading and decoding each K vector
// once for the M rows. Requires dk % 16 == 0.
template <class V, KvType KT, int M>
void dot_rows(const float* const* q, int dk, const uint8_t* k, int kr, float* out) {
  typename V::Vec a[M];
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r) a[r] = V::zero();
  for (int i = 0; i < dk; i += 16) {
    typename V::Vec kv;
    if constexpr (KT == KvType::kQ4C)
      kv = V::load_q4c(k, kr, dk, i);
    else
      kv = V::template load_kv<KT>(k, i);
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) a[r] = V::fmadd(V::load(q[r] + i), kv, a[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r) out[r] = V::hsum(a[r]);
}

// dot_rows for the last nr < M + 1 rows.
template <class V, KvType KT, int M>
void dot_tail(const float* const* q, int nr, int dk, const uint8_t* k, int kr, float* out) {
  if constexpr (M > 0) {
    if (nr == M)
      dot_rows<V, KT, M>(q, dk, k, kr, out);
    else
      dot_tail<V, KT, M - 1>(q, nr, dk, k, kr, out);
  }
}

template <class V, KvType KT>
void dot_group(const float* const* q, int nr, int dk, const uint8_t* k, int kr, float* out) {
  if constexpr (KT != KvType::kQ4C) {  // q4c head dims are multiples of 32
    if (dk % 16 != 0) {  // odd head dims: one decoded head row (not f32), then the f32 dot
      float row[kMaxOddHeadDim];
      const float* kf = reinterpret_cast<const float*>(k);
      if (KT != KvType::kF32) {
        kv_load_row(KT, k, dk, row);
        kf = row;
      }
      for (int r = 0; r < nr; ++r) out[r] = avx2::dot_f32(q[r], kf, dk);
      return;
    }
  }
  constexpr int kW = V::kDotRows;
  int r = 0;
  for (; r + kW <= nr; r += kW) dot_rows<V, KT, kW>(q + r, dk, k, kr, out + r);
  dot_tail<V, KT, kW - 1>(q + r, nr - r, dk, k, kr, out + r);
}

// q·k of key position p for the first `rows` rows: every format but q4c
// through dot_group; q4c rows whose tail starts at or before p (tail_from)
// read the key's f16 tail row, the others the encoded group, each row with
// exactly the arithmetic it has alone.
template <class V, KvType KT>
void dot_key(const float* const* q, int rows, int dk, const KvView& kv, int64_t p, int hkv, const int64_t* tail_from,
             float* out) {
  if constexpr (KT != KvType::kQ4C) {
    dot_group<V, KT>(q, rows, dk, kv_key_row(kv, p, hkv, dk), 0, out);
  } else {
    const float* qs[2][kMaxRows];
    int idx[2][kMaxRows], n[2] = {0, 0};
    for (int r = 0; r < rows; ++r) {
      const int t = p >= tail_from[r] ? 1 : 0;
      qs[t][n[t]] = q[r];
      idx[t][n[t]++] = r;
    }
    float d[kMaxRows];
    const uint8_t* region = kv_q4c_region(kv, p, hkv, dk);
    const int kr = static_cast<int>(p % kKvTokenGroup);
    if (n[0] == rows) {
      dot_group<V, KvType::kQ4C>(q, rows, dk, region, kr, out);
      return;
    }
    if (n[0] > 0) {
      dot_group<V, KvType::kQ4C>(qs[0], n[0], dk, region, kr, d);
      for (int i = 0; i < n[0]; ++i) out[idx[0][i]] = d[i];
    }
    dot_group<V, KvType::kF16>(qs[1], n[1], dk, kv_q4c_tail_row(kv, p, hkv, dk), 0, d);
    for (int i = 0; i < n[1]; ++i) out[idx[1][i]] = d[i];
  }
}

// Elements i..i+31 (i % 32 == 0, a whole q8 / q4 group) of a head row:
// *a = load_kv<KT>(row, i), *b = load_kv<KT>(row, i + 16), the group's
// scale converted once where V has a group loader.
template <class V, KvType KT>
inline void load_kv_group(const uint8_t* row, int i, typename V::Vec* a, typename V::Vec* b) {
  if constexpr (requires { V::template load_group<KT>(row, i, a, b); }) {
    V::template load_group<KT>(row, i, a, b);
  } else {
    *a = V::template load_kv<KT>(row, i);
    *b = V::template load_kv<KT>(row, i + 16);
  }
}

// out[0..n) = the head row decoded (load_kv<KT>'s floats), n % 16 == 0;
// q8 / q4 a group at a time.
template <class V, KvType KT>
void decode_head_row(const uint8_t* row, int n, float* out) {
  int i = 0;
  if constexpr (KT == KvType::kQ8 || KT == KvType::kQ4) {
    for (; i + 32 <= n; i += 32) {
      typename V::Vec a, b;
      load_kv_group<V, KT>(row, i, &a, &b);
      V::store(out + i, a);
      V::store(out + i + 16, b);
    }
  }
  for (; i < n; i += 16) V::store(out + i, V::template load_kv<KT>(row, i));
}

// Scores of 16 keys (rows kr[0..15] of type KT) for `rows` rows that all
// see them: sc[r][j + k] = (q[r]·k_k) * scale, each dot with dot_rows' fmas
// and V::hsum's adds (the levels with V::kHsum16 reduce 16 keys together).
// Rows run one at a time against the 16 keys (16 accumulators in registers;
// the keys' rows stay in L1 for the next row). dk % 16 == 0.
template <class V, KvType KT>
void keys16_rows(const float* const* q, int rows, int dk, const uint8_t* const* kr, float scale, float (*sc)[kTile],
                 int j) {
  for (int r = 0; r < rows; ++r) {
    typename V::Vec a[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) a[k] = V::zero();
    for (int i = 0; i < dk; i += 16) {
      const typename V::Vec qv = V::load(q[r] + i);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) a[k] = V::fmadd(qv, V::template load_kv<KT>(kr[k], i), a[k]);
    }
    V::hsum16_scaled(a, scale, sc[r] + j);
  }
}

// Head dims up to this many have the 16 keys of a compressed format decoded
// once into an L1 buffer (16 KiB at 256) for all rows of dot_keys16.
constexpr int kMaxDecodedKeyDim = 256;

// keys16_rows for the keys p0 .. p0 + 15 of kv head hkv. With several rows
// and a compressed K format, the 16 rows are decoded once (the exact floats
// load_kv<KT> gives) into a buffer the rows then read as f32: the same
// floats in the same fmas, so the same bits, without decoding each key once
// per row. Not for q4c keys; dk % 16 == 0.
template <class V, KvType KT>
void dot_keys16(const float* const* q, int rows, int dk, const KvView& kv, int64_t p0, int hkv, float scale,
                float (*sc)[kTile], int j) {
  const uint8_t* kr[16];
  kv_rows(kv.k_blocks, kv.block_size, kv.k_row_bytes, kv_row_bytes(KT, dk), p0, 16, hkv, kr);
  if constexpr (KT != KvType::kF32) {
    if (rows > 1 && dk <= kMaxDecodedKeyDim) {
      alignas(64) float dec[16 * kMaxDecodedKeyDim];
      const uint8_t* dr[16];
      for (int k = 0; k < 16; ++k) {
        float* d = dec + k * dk;
        decode_head_row<V, KT>(kr[k], dk, d);
        dr[k] = reinterpret_cast<const uint8_t*>(d);
      }
      keys16_rows<V, KvType::kF32>(q, rows, dk, dr, scale, sc, j);
      return;
    }
  }
  keys16_rows<V, KT>(q, rows, dk, kr, scale, sc, j);
}

// acc_r[i] += p[r][j] * v_j[i] for j = j0..j1-1 in order, for M rows, with
// accumulators kept in registers across keys (16 floats at a time), V rows
// decoded by V::load_kv<VT>. Requires dv % 16 == 0.
template <class V, KvType VT, int M>
void pv_rows(float* const* acc, const float (*p)[kTile], const uint8_t* const* vrows, int j0, int j1, int dv) {
  int i0 = 0;
  if constexpr ((VT == KvType::kQ8 || VT == KvType::kQ4) && M <= V::kPvPairRows) {
    // A whole 32-element group per key (one scale for both halves), the
    // same fmas per accumulator in the same key order.
    for (; i0 + 32 <= dv; i0 += 32) {
      typename V::Vec a[M], b[M];
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) {
        a[r] = V::load(acc[r] + i0);
        b[r] = V::load(acc[r] + i0 + 16);
      }
      for (int j = j0; j < j1; ++j) {
        typename V::Vec va, vb;
        load_kv_group<V, VT>(vrows[j], i0, &va, &vb);
#pragma GCC unroll 8
        for (int r = 0; r < M; ++r) {
          const typename V::Vec pj = V::set1(p[r][j]);
          a[r] = V::fmadd(pj, va, a[r]);
          b[r] = V::fmadd(pj, vb, b[r]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) {
        V::store(acc[r] + i0, a[r]);
        V::store(acc[r] + i0 + 16, b[r]);
      }
    }
  }
  for (int i = i0; i < dv; i += 16) {
    typename V::Vec a[M];
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) a[r] = V::load(acc[r] + i);
    for (int j = j0; j < j1; ++j) {
      const typename V::Vec v = V::template load_kv<VT>(vrows[j], i);
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) a[r] = V::fmadd(V::set1(p[r][j]), v, a[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) V::store(acc[r] + i, a[r]);
  }
}

// pv_rows for the last nr < M + 1 rows.
template <class V, KvType VT, int M>
void pv_tail(float* const* acc, int nr, const float (*p)[kTile], const uint8_t* const* vrows, int j0, int j1, int dv) {
  if constexpr (M > 0) {
    if (nr == M)
      pv_rows<V, VT, M>(acc, p, vrows, j0, j1, dv);
    else
      pv_tail<V, VT, M - 1>(acc, nr, p, vrows, j0, j1, dv);
  }
}

template <class V, KvType VT>
void pv_group(float* const* acc, int nr, const float (*p)[kTile], const uint8_t* const* vrows, int j0, int j1,
              int dv) {
  if (dv % 16 != 0) {  // odd head dims: each V row decoded once (not f32), then axpy
    float row[kMaxOddHeadDim];
    for (int j = j0; j < j1; ++j) {
      const float* vf = reinterpret_cast<const float*>(vrows[j]);
      if (VT != KvType::kF32) {
        kv_load_row(VT, vrows[j], dv, row);
        vf = row;
      }
      for (int r = 0; r < nr; ++r) avx2::axpy_f32(acc[r], p[r][j], vf, dv);
    }
    return;
  }
  constexpr int kW = V::kPvRows;
  int r = 0;
  for (; r + kW <= nr; r += kW) pv_rows<V, VT, kW>(acc + r, p + r, vrows, j0, j1, dv);
  pv_tail<V, VT, kW - 1>(acc + r, nr - r, p + r, vrows, j0, j1, dv);
}

// One 64-key tile [t0, t0 + 64) of a reduce (below) for nr <= kMaxRows rows
// whose running states st[r] it updates: scores into sc (nr rows of
// scratch), the tile's online-softmax step, p·V into the accumulators.
// ke[r]: row r's key end (not increasing with r); only rows with ke[r] > t0
// take part. Each row's arithmetic is independent of the other rows.
template <class V, KvType KT, KvType VT>
void reduce_tile(const AttentionShape& s, const float* const* q, int nr, int hkv, const KvView& kv, int64_t t0,
                 const int64_t* ke, const int64_t* tail_from, AttnRowState* const* st, float (*sc)[kTile]) {
  const int dk = s.head_dim, dv = s.head_dim_v;
  float mn[kMaxRows];
  int nk[kMaxRows];  // keys of the tile row r sees
  float dots[kMaxRows];
  float l[kMaxRows];
  const uint8_t* vrows[kTile];
  float* accs[kMaxRows];
  int na = 0;  // rows that see keys of this tile (a prefix)
  while (na < nr && ke[na] > t0) ++na;
  if (na == 0) return;
  for (int r = 0; r < na; ++r) {
    nk[r] = static_cast<int>(std::min<int64_t>(ke[r], t0 + kTile) - t0);
    accs[r] = st[r]->acc;
  }
  const int n = nk[0];
  int rows = na;  // rows that see key j
  for (int j = 0; j < n; ++j) {
    while (nk[rows - 1] <= j) --rows;
    if constexpr (V::kHsum16 && KT != KvType::kQ4C) {
      // 16 keys every row here sees, no softcap: their scores at once.
      if (!(s.softcap > 0.f) && dk % 16 == 0 && j + 16 <= nk[rows - 1]) {
        dot_keys16<V, KT>(q, rows, dk, kv, t0 + j, hkv, s.scale, sc, j);
        j += 15;
        continue;
      }
    }
    dot_key<V, KT>(q, rows, dk, kv, t0 + j, hkv, tail_from, dots);
    for (int r = 0; r < rows; ++r) {
      float v = dots[r] * s.scale;
      if (s.softcap > 0.f) v = s.softcap * std::tanh(v / s.softcap);
      sc[r][j] = v;
    }
  }
  for (int r = 0; r < na; ++r) {
    // The tile's maximum (max is exact: any order gives the same value).
    mn[r] = std::max(st[r]->m, avx2::max_row(sc[r], nk[r]));
    const float corr = std::exp(st[r]->m - mn[r]);
    if (corr != 1.f) {
      avx2::scale_row(st[r]->acc, corr, dv);
      st[r]->l *= corr;
    }
    avx2::exp_shifted_row(sc[r], nk[r], mn[r]);
    l[r] = st[r]->l;
  }
  // Each row's denominator adds its keys in order; the rows' chains are
  // interleaved (independent, so the adds overlap).
  for (int j = 0, rj = na; j < n; ++j) {
    while (nk[rj - 1] <= j) --rj;
    for (int r = 0; r < rj; ++r) l[r] += sc[r][j];
  }
  for (int r = 0; r < na; ++r) st[r]->l = l[r];
  kv_rows(kv.v_blocks, kv.block_size, kv.v_row_bytes, kv_row_bytes(VT, dv), t0, n, hkv, vrows);
  // Keys [j0, j1) seen by the first `rows` rows, from the last row's end up.
  for (int j0 = 0; j0 < n;) {
    rows = na;
    while (nk[rows - 1] <= j0) --rows;
    const int j1 = nk[rows - 1];
    pv_group<V, VT>(accs, rows, sc, vrows, j0, j1, dv);
    j0 = j1;
  }
  for (int r = 0; r < na; ++r) st[r]->m = mn[r];
}

// Fresh states (m = -inf, l = 0, acc = 0) for nr rows.
inline void init_states(AttnRowState* const* st, int nr, int dv) {
  for (int r = 0; r < nr; ++r) {
    st[r]->m = -INFINITY;
    st[r]->l = 0.f;
    std::fill(st[r]->acc, st[r]->acc + dv, 0.f);
  }
}

// Reduces keys [kb, ke[r]) (already clipped to row r's visible range) into
// fresh states for nr <= kMaxRows query rows q[r] that attend to the same kv
// head, in 64-key tiles aligned to kb. ke must not increase with r (so the
// rows that see a key are a prefix). Each row's arithmetic is independent of
// which other rows share the call. tail_from[r]: kv_tail_from of row r's
// query (q4c keys; ignored otherwise).
template <class V, KvType KT, KvType VT>
struct ReduceChunk {
  static void run(const AttentionShape& s, const float* const* q, int nr, int hkv, const KvView& kv, int64_t kb,
                  const int64_t* ke, const int64_t* tail_from, AttnRowState* const* st) {
    init_states(st, nr, s.head_dim_v);
    float sc[kMaxRows][kTile];
    for (int64_t t0 = kb; t0 < ke[0]; t0 += kTile) {
      // The next tile's K and V rows of this head (the first tile's too).
      for (int64_t pf = t0 == kb ? t0 : t0 + kTile; pf < std::min(ke[0], t0 + 2 * kTile); pf += kTile) {
        const int np = static_cast<int>(std::min<int64_t>(ke[0], pf + kTile) - pf);
        prefetch_kv(kv, s.head_dim, s.head_dim_v, pf, np, hkv, hkv + 1);
      }
      reduce_tile<V, KT, VT>(s, q, nr, hkv, kv, t0, ke, tail_from, st, sc);
    }
  }
};

// reduce_tile as a dispatchable function.
template <class V, KvType KT, KvType VT>
struct ReduceTile {
  static void run(const AttentionShape& s, const float* const* q, int nr, int hkv, const KvView& kv, int64_t t0,
                  const int64_t* ke, const int64_t* tail_from, AttnRowState* const* st, float (*sc)[kTile]) {
    reduce_tile<V, KT, VT>(s, q, nr, hkv, kv, t0, ke, tail_from, st, sc);
  }
};

using ReduceChunkFn = void (*)(const AttentionShape&, const float* const*, int, int, const KvView&, int64_t,
                               const int64_t*, const int64_t*, AttnRowState* const*);
using ReduceTileFn = void (*)(const AttentionShape&, const float* const*, int, int, const KvView&, int64_t,
                              const int64_t*, const int64_t*, AttnRowState* const*, float (*)[kTile]);

template <class V, template <class, KvType, KvType> class Op, KvType KT>
auto op_for_v(KvType v) {
  switch (v) {
    case KvType::kF32: return &Op<V, KT, KvType::kF32>::run;
    case KvType::kF16: return &Op<V, KT, KvType::kF16>::run;
    case KvType::kBF16: return &Op<V, KT, KvType::kBF16>::run;
    case KvType::kQ8: return &Op<V, KT, KvType::kQ8>::run;
    case KvType::kQ4: return &Op<V, KT, KvType::kQ4>::run;
    case KvType::kQ4C: break;  // a key format (refused for V at start-up)
  }
  return &Op<V, KT, KvType::kF32>::run;
}

// Op<V, K, V format>::run for a view's K/V formats.
template <class V, template <class, KvType, KvType> class Op>
auto op_for(const KvView& kv) {
  switch (kv.k_type) {
    case KvType::kF32: return op_for_v<V, Op, KvType::kF32>(kv.v_type);
    case KvType::kF16: return op_for_v<V, Op, KvType::kF16>(kv.v_type);
    case KvType::kBF16: return op_for_v<V, Op, KvType::kBF16>(kv.v_type);
    case KvType::kQ8: return op_for_v<V, Op, KvType::kQ8>(kv.v_type);
    case KvType::kQ4: return op_for_v<V, Op, KvType::kQ4>(kv.v_type);
    case KvType::kQ4C: return op_for_v<V, Op, KvType::kQ4C>(kv.v_type);
  }
  return op_for_v<V, Op, KvType::kF32>(kv.v_type);
}

// The reduce of a view's K/V formats.
template <class V>
ReduceChunkFn reduce_for(const KvView& kv) {
  return op_for<V, ReduceChunk>(kv);
}

// Chunk index range [c0, c1) intersecting the visible keys of position p.
inline void chunk_range(const AttentionShape& s, int64_t p, int64_t* c0, int64_t* c1) {
  int64_t lo, hi;
  attention_visible_range(s, p, &lo, &hi);
  *c0 = lo / kAttnChunk;
  *c1 = (hi + kAttnChunk - 1) / kAttnChunk;
}

inline int64_t scratch_floats(const AttentionShape& s, int64_t n_tokens, int n_threads, int64_t max_pos) {
  const int64_t dv = s.head_dim_v;
  const int64_t n_chunks = max_pos / kAttnChunk + 1;
  // Decode path: one partial (dv + 2) per (row, chunk).
  const int64_t decode = n_tokens <= kDecodeTokens ? n_tokens * s.n_head * n_chunks * (dv + 2) : 0;
  // Prefill path: per thread, running + part accumulators for a head group.
  const int64_t prefill = static_cast<int64_t>(n_threads) * 2 * kMaxRows * dv;
  return decode + prefill + 64;
}

// Row groups (of at most kMaxGroup query heads of one kv head) one decode
// item reduces together, tile by tile.
constexpr int kMaxDecodeUnits = 8;

// Decode (n_tokens <= kDecodeTokens): parallel over (token, chunk, block of
// kv heads) partials, then the ordered merge per row. An item walks its
// chunk tile by tile, each tile for all of its heads (the heads of a
// position are one row of the cache, so the item reads the cache in order),
// prefetching the next tile's rows while it computes; each row's arithmetic
// is that of reduce_chunk alone.
template <class V>
void decode(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens, const KvView* views,
            const int32_t* view_of_token, float* out, float* scratch, ThreadPool& pool) {
  const int rep = s.n_head / s.n_head_kv;
  const int dk = s.head_dim, dv = s.head_dim_v;
  const int64_t q_stride = static_cast<int64_t>(s.n_head) * dk;
  const int64_t o_stride = static_cast<int64_t>(s.n_head) * dv;
  int64_t max_pos = 0;
  for (int64_t t = 0; t < n_tokens; ++t) max_pos = std::max<int64_t>(max_pos, pos[t]);
  const int64_t n_chunks = max_pos / kAttnChunk + 1;
  const int64_t part_size = dv + 2;
  // Heads per item: as many as fit kMaxDecodeUnits row groups, fewer while
  // that leaves under two items per thread (short contexts).
  const int groups = (rep + kMaxGroup - 1) / kMaxGroup;
  int hb = std::max(1, std::min(s.n_head_kv, kMaxDecodeUnits / groups));
  while (hb > 1 && n_tokens * n_chunks * ((s.n_head_kv + hb - 1) / hb) < 2 * pool.size()) hb = (hb + 1) / 2;
  const int64_t n_hblocks = (s.n_head_kv + hb - 1) / hb;
  const int64_t n_items = n_tokens * n_chunks * n_hblocks;
  pool.parallel_for(n_items, 1, [&](int64_t b, int64_t e, int) {
    AttnRowState st[kMaxDecodeUnits][kMaxGroup];
    AttnRowState* sp[kMaxDecodeUnits][kMaxGroup];
    const float* qr[kMaxDecodeUnits][kMaxGroup];
    int64_t ends[kMaxDecodeUnits][kMaxGroup], tails[kMaxDecodeUnits][kMaxGroup];
    int unit_head[kMaxDecodeUnits], unit_rows[kMaxDecodeUnits];
    float* parts[kMaxDecodeUnits][kMaxGroup];  // each row's partial: m, l, acc[dv]
    float sc[kMaxGroup][kTile];
    for (int64_t it = b; it < e; ++it) {
      // Head block innermost: a thread's consecutive items read neighbouring
      // parts of the same positions' rows.
      const int h_lo = static_cast<int>(it % n_hblocks) * hb;
      const int h_hi = std::min(s.n_head_kv, h_lo + hb);
      const int64_t c = it / n_hblocks % n_chunks;
      const int64_t t = it / n_hblocks / n_chunks;
      const KvView& kv = views[view_of_token ? view_of_token[t] : 0];
      int64_t lo, hi;
      attention_visible_range(s, pos[t], &lo, &hi);
      const int64_t kb = std::max(lo, c * kAttnChunk), ke = std::min(hi, (c + 1) * kAttnChunk);
      auto part = [&](int h) { return scratch + ((t * s.n_head + h) * n_chunks + c) * part_size; };
      if (kb >= ke) {
        for (int h = h_lo * rep; h < h_hi * rep; ++h) {
          part(h)[0] = -INFINITY;  // empty: skipped at merge
          part(h)[1] = 0.f;
        }
        continue;
      }
      const ReduceTileFn tile = op_for<V, ReduceTile>(kv);
      // The item's row groups, at most kMaxDecodeUnits at a time (more only
      // where one kv head has over kMaxDecodeUnits * kMaxGroup query heads).
      const int n_units = (h_hi - h_lo) * groups;
      for (int u0 = 0; u0 < n_units; u0 += kMaxDecodeUnits) {
        const int nu = std::min(kMaxDecodeUnits, n_units - u0);
        for (int u = 0; u < nu; ++u) {
          const int hkv = h_lo + (u0 + u) / groups;
          const int h0 = hkv * rep + (u0 + u) % groups * kMaxGroup;
          const int nr = std::min(kMaxGroup, (hkv + 1) * rep - h0);
          unit_head[u] = hkv;
          unit_rows[u] = nr;
          for (int r = 0; r < nr; ++r) {
            parts[u][r] = part(h0 + r);
            st[u][r] = AttnRowState{0, 0, parts[u][r] + 2};
            sp[u][r] = &st[u][r];
            qr[u][r] = q + t * q_stride + static_cast<int64_t>(h0 + r) * dk;
            ends[u][r] = ke;
            tails[u][r] = kv_tail_from(kv, pos[t]);
          }
          init_states(sp[u], nr, dv);
        }
        const int ph0 = unit_head[0], ph1 = unit_head[nu - 1] + 1;  // the heads these units read
        for (int64_t t0 = kb; t0 < ke; t0 += kTile) {
          // The rows of the next tile (the first tile's too), a share before
          // each unit's step so the prefetches spread over the tile's work.
          const int64_t pf = t0 == kb ? t0 : t0 + kTile;
          const int64_t pf_end = std::min(ke, t0 + 2 * kTile);
          const int64_t per_unit = (pf_end - pf + nu - 1) / nu;
          for (int u = 0; u < nu; ++u) {
            const int64_t p0 = pf + u * per_unit;
            const int np = static_cast<int>(std::min(pf_end, p0 + per_unit) - p0);
            if (np > 0) prefetch_kv(kv, dk, dv, p0, np, ph0, ph1);
            tile(s, qr[u], unit_rows[u], unit_head[u], kv, t0, ends[u], tails[u], sp[u], sc);
          }
        }
        for (int u = 0; u < nu; ++u)
          for (int r = 0; r < unit_rows[u]; ++r) {
            parts[u][r][0] = st[u][r].m;
            parts[u][r][1] = st[u][r].l;
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
      AttnRowState acc{first[0], first[1], first + 2};
      for (int64_t c = c0 + 1; c < c1; ++c) {
        float* p = scratch + (row * n_chunks + c) * part_size;
        if (p[1] == 0.f && p[0] == -INFINITY) continue;
        avx2::attn_merge_state(&acc, AttnRowState{p[0], p[1], p + 2}, dv);
      }
      const int h = static_cast<int>(row % s.n_head);
      avx2::attn_finish_row(acc, s.sinks ? s.sinks[h] : -INFINITY, out + t * o_stride + h * dv, dv);
    }
  });
}

// Prefill: tasks of (kv head, token tile). Every row reduces its chunks in
// increasing order (the first into its running state, later ones into a
// fresh part state merged after it), exactly as alone; chunk by chunk, the
// rows of the task's tokens whose keys in that chunk start at the same
// position (same view) go through one reduce_chunk call, ordered by
// decreasing key end, so each K/V row is loaded once for all of them.
template <class V>
void prefill(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens, const KvView* views,
             const int32_t* view_of_token, float* out, float* scratch, ThreadPool& pool) {
  auto kv_of = [&](int64_t t) -> const KvView& { return views[view_of_token ? view_of_token[t] : 0]; };
  const int rep = s.n_head / s.n_head_kv;
  const int dk = s.head_dim, dv = s.head_dim_v;
  const int64_t q_stride = static_cast<int64_t>(s.n_head) * dk;
  const int64_t o_stride = static_cast<int64_t>(s.n_head) * dv;
  const int64_t n_tiles = (n_tokens + kTokenTile - 1) / kTokenTile;
  pool.parallel_for(s.n_head_kv * n_tiles, 1, [&](int64_t b, int64_t e, int ith) {
    float* run_acc = scratch + static_cast<int64_t>(ith) * 2 * kMaxRows * dv;
    float* part_acc = run_acc + kMaxRows * dv;
    AttnRowState run[kMaxRows], part[kMaxRows];
    AttnRowState* sp[kMaxRows];
    const float* qr[kMaxRows];
    int64_t ends[kMaxRows], tails[kMaxRows];
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
          run[i] = AttnRowState{0, 0, run_acc + i * dv};
          part[i] = AttnRowState{0, 0, part_acc + i * dv};
        }
        for (int64_t c = c_first; c < c_last; ++c) {
          bool done[kTokenTile] = {};
          for (int i = 0; i < nt; ++i) {
            if (done[i] || c < c0[i] || c >= c1[i]) continue;
            const int64_t kb = std::max(lo[i], c * kAttnChunk);
            const KvView& kv = kv_of(t0 + i);
            // Token i and every later token whose keys here start at kb,
            // by decreasing key end (stable).
            int toks[kTokenTile], nsel = 0;
            int64_t tke[kTokenTile];
            for (int j = i; j < nt; ++j) {
              if (done[j] || c < c0[j] || c >= c1[j] || &kv_of(t0 + j) != &kv) continue;
              if (std::max(lo[j], c * kAttnChunk) != kb) continue;
              done[j] = true;
              const int64_t kej = std::min(hi[j], (c + 1) * kAttnChunk);
              int at = nsel++;
              for (; at > 0 && tke[at - 1] < kej; --at) {
                toks[at] = toks[at - 1];
                tke[at] = tke[at - 1];
              }
              toks[at] = j;
              tke[at] = kej;
            }
            // Reduce calls of at most kShareRows rows (whole tokens; at least one).
            const int per_call = std::max(1, kShareRows * 128 / std::max({128, dk, dv}) / nr);
            for (int k0 = 0; k0 < nsel; k0 += per_call) {
              int n = 0, n_merge = 0;
              for (int k = k0; k < std::min(nsel, k0 + per_call); ++k) {
                const int j = toks[k];
                for (int r = 0; r < nr; ++r, ++n) {
                  const int row = j * nr + r;
                  qr[n] = q + (t0 + j) * q_stride + static_cast<int64_t>(h0 + r) * dk;
                  ends[n] = tke[k];
                  tails[n] = kv_tail_from(kv, pos[t0 + j]);
                  if (c == c0[j]) {
                    sp[n] = &run[row];
                  } else {
                    sp[n] = &part[row];
                    merge_rows[n_merge++] = row;
                  }
                }
              }
              reduce_for<V>(kv)(s, qr, n, hkv, kv, kb, ends, tails, sp);
              for (int k = 0; k < n_merge; ++k) avx2::attn_merge_state(&run[merge_rows[k]], part[merge_rows[k]], dv);
            }
          }
        }
        for (int i = 0; i < nt; ++i)
          for (int r = 0; r < nr; ++r)
            avx2::attn_finish_row(run[i * nr + r], s.sinks ? s.sinks[h0 + r] : -INFINITY,
                                  out + (t0 + i) * o_stride + static_cast<int64_t>(h0 + r) * dv, dv);
      }
    }
  });
}

// attention_ragged of kernels/attention.h at the level of V.
template <class V>
void ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens, const KvView* views,
            const int32_t* view_of_token, float* out, float* scratch, ThreadPool& pool) {
  if (n_tokens <= kDecodeTokens)
    decode<V>(s, q, pos, n_tokens, views, view_of_token, out, scratch, pool);
  else
    prefill<V>(s, q, pos, n_tokens, views, view_of_token, out, scratch, pool);
}

}  // namespace attn_tiles
}  // namespace

}  // namespace ember
