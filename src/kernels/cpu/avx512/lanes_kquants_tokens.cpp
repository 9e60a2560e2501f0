// AVX-512 VNNI "token lanes" kernels for Q4_K and Q6_K x Q8_K: a few
// tokens (2 .. 16: batched decode of several sequences, speculative
// verification) against any number of weight rows.
//
// Arithmetic: exactly the row-lane contract of avx512/lanes_kquants.cpp
// (integer sums per super-block, then acc = fma(float(sumi), d * x.d, acc),
// acc_m likewise, result acc - acc_m; scalar twins in
// kernels/ref/kquants_lanes_ref.h), so every output is bit-identical to
// vec_dot, vec_dot_rows and vec_dot_tile of this level.
//
// Why this form: the row-lane tile (16 rows x up to 64 tokens) transposes its
// 16 rows' quants for every call; with few tokens that transposition costs
// as much as the products. Here the activations are transposed instead, once
// per matmul, and the weight rows are only unpacked. A zmm's 16 lanes are R
// weight rows x T = 16 / R tokens (R = 1 for 9-16 tokens, 2 for 5-8, 4 for
// 3-4, 8 for 2): lane t * R + i holds row i of a row group and token t.
// pack_tokens puts dword k of token t's super-block in lanes t * R .. t * R +
// R - 1 of vector k; each row group's quants are unpacked (nibbles -> bytes)
// and interleaved by dword (row i's dword k at k * R + i) into a small stack
// buffer, so one vpdpbusd with an R-dword broadcast (vpbroadcastd / q,
// vbroadcasti32x4 / 64x4) advances 16 (row, token) pairs. Scales, mins and
// the float steps are one instruction per row group, their per-row values
// broadcast the same way. Q4_K: half sub-blocks (16 products, |sum| <= 16 *
// 15 * 127 < 2^15) are packed into the i16 halves of each lane and weighted
// by the (sc, sc) pair with one vpdpwssd; mins come from the transposed
// sub-block sums x the (m_s, m_s+1) pairs. Q6_K: each group's sum is weighted
// by one vpmulld and the offset 32 enters as -32 * sum_g sc_g * bsums[g], as
// in the row lanes.
//
// Four row groups run at a time (two of 8 rows; their accumulators stay in
// registers), unpacked one super-block ahead (the step's small loads come
// well after the wide stores that wrote them), the next pass's rows
// prefetched meanwhile. Measured against the tile in bench_gemm (one
// thread): see KernelSet::tokens_min in registry.cpp and docs/performance.md.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <climits>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/avx512/kquants_unpack.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/lanes_kquants_common.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

using lanes::block_at;

constexpr int kLanes = 16;
static_assert(kLaneKTokensMax == kLanes, "16 (row, token) lanes");

// Rows per lane group for nc tokens (the pack and the kernels agree on it).
constexpr int lane_rows(int nc) { return nc <= 2 ? 8 : nc <= 4 ? 4 : nc <= 8 ? 2 : 1; }

// One super-block of the tokens, transposed: lane t * R + i holds token t.
struct alignas(64) PackedTokens {
  __m512i q[64];   // q[k]: dword k (quants 4k .. 4k + 3)
  __m512i bs[8];   // bs[j]: i16 pair (bsums[2j], bsums[2j + 1])
  __m512i bs2[4];  // bs2[j]: i16 pair (the sums of 32-element sub-blocks 2j, 2j + 1)
  __m512 d;        // x.d
};

// The R dwords at p, repeated 16 / R times.
template <int R>
inline __m512i bcast(const void* p) {
  if constexpr (R == 1) return _mm512_set1_epi32(static_cast<int>(simd::load_u32(p)));
  else if constexpr (R == 2) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return _mm512_set1_epi64(static_cast<long long>(v));
  } else if constexpr (R == 4) return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  else return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
template <int R>
inline __m512 bcast_ps(const float* p) { return _mm512_castsi512_ps(bcast<R>(p)); }

// out[2v], out[2v + 1] <- the units of U dwords of a[v] and b[v], alternating
// (a's unit 0, b's unit 0, a's unit 1, ...), for v < m.
template <int U>
inline void zip(const __m512i* a, const __m512i* b, int m, __m512i* out) {
  __m512i lo, hi;
  if constexpr (U == 1) {
    lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  } else if constexpr (U == 2) {
    lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
    hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  } else {
    lo = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    hi = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  }
  for (int v = 0; v < m; ++v) {
    if constexpr (U == 1) {
      out[2 * v] = _mm512_permutex2var_epi32(a[v], lo, b[v]);
      out[2 * v + 1] = _mm512_permutex2var_epi32(a[v], hi, b[v]);
    } else {
      out[2 * v] = _mm512_permutex2var_epi64(a[v], lo, b[v]);
      out[2 * v + 1] = _mm512_permutex2var_epi64(a[v], hi, b[v]);
    }
  }
}

// The R rows' 256 unpacked quants (u[i][j]: row i's elements 64j ..) into q,
// row i's dword k at dword k * R + i.
template <int R>
inline void interleave(__m512i u[R][4], uint8_t* q) {
  if constexpr (R == 1) {
    for (int j = 0; j < 4; ++j) _mm512_store_si512(q + 64 * j, u[0][j]);
  } else {
    __m512i l1[R / 2][8];  // row pairs: dword pairs (k, rows 2h, 2h + 1)
    for (int h = 0; h < R / 2; ++h) zip<1>(u[2 * h], u[2 * h + 1], 4, l1[h]);
    if constexpr (R == 2) {
      for (int v = 0; v < 8; ++v) _mm512_store_si512(q + 64 * v, l1[0][v]);
    } else {
      __m512i l2[R / 4][16];  // row quads
      for (int h = 0; h < R / 4; ++h) zip<2>(l1[2 * h], l1[2 * h + 1], 8, l2[h]);
      if constexpr (R == 4) {
        for (int v = 0; v < 16; ++v) _mm512_store_si512(q + 64 * v, l2[0][v]);
      } else {
        __m512i l3[32];
        zip<4>(l2[0], l2[1], 16, l3);
        for (int v = 0; v < 32; ++v) _mm512_store_si512(q + 64 * v, l3[v]);
      }
    }
  }
}

// One row group's super-block, unpacked for broadcasting: row i's values at
// index [.][i].
template <int R>
struct alignas(64) RowQ4K {
  uint8_t q[kQK_K * R];  // unsigned quants, interleaved by dword
  int32_t sc[8][R];      // (sc_s, sc_s) i16 pairs
  int32_t mn[4][R];      // (m_2j, m_2j+1) i16 pairs
  float d[R], dmin[R];
};

template <int R>
struct alignas(64) RowQ6K {
  uint8_t q[kQK_K * R];  // unsigned quants 0..63, interleaved by dword
  int32_t sc[16][R];     // the signed group scales
  int32_t scp[8][R];     // (sc_2k, sc_2k+1) i16 pairs
  float d[R];
};

struct TokQ4K {
  using Block = BlockQ4_K;
  template <int R>
  using Row = RowQ4K<R>;

  template <int R>
  static void prep(const Block* const* b, Row<R>& r) {
    __m512i u[R][4];
    for (int i = 0; i < R; ++i) {
      kq::unpack_nibbles(*b[i], u[i]);
      uint8_t sc[8], m[8];
      simd::unpack_k4_scales(b[i]->scales, sc, m);
      for (int s = 0; s < 8; ++s) r.sc[s][i] = sc[s] | (sc[s] << 16);
      for (int j = 0; j < 4; ++j) r.mn[j][i] = m[2 * j] | (m[2 * j + 1] << 16);
      r.d[i] = f16_to_f32(b[i]->d);
      r.dmin[i] = f16_to_f32(b[i]->dmin);
    }
    interleave<R>(u, r.q);
  }

  // P row groups, one super-block of the tokens x.
  template <int P, int R>
  static void step(const Row<R>* rw, const PackedTokens& x, __m512 acc[P], __m512 acc_m[P]) {
    __m512i sumi[P], summ[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      summ[p] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), x.bs2[0], bcast<R>(rw[p].mn[0]));
#pragma GCC unroll 3
      for (int j = 1; j < 4; ++j) summ[p] = _mm512_dpwssd_epi32(summ[p], x.bs2[j], bcast<R>(rw[p].mn[j]));
      sumi[p] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      __m512i a[P], b[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) a[p] = b[p] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const __m512i xa = _mm512_load_si512(&x.q[8 * s + l]);
        const __m512i xb = _mm512_load_si512(&x.q[8 * s + 4 + l]);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) {
          a[p] = _mm512_dpbusd_epi32(a[p], bcast<R>(rw[p].q + 4 * R * (8 * s + l)), xa);
          b[p] = _mm512_dpbusd_epi32(b[p], bcast<R>(rw[p].q + 4 * R * (8 * s + 4 + l)), xb);
        }
      }
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p)
        sumi[p] = _mm512_dpwssd_epi32(sumi[p], _mm512_mask_blend_epi16(0xAAAAAAAA, a[p], _mm512_slli_epi32(b[p], 16)),
                                      bcast<R>(rw[p].sc[s]));
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[p]), _mm512_mul_ps(bcast_ps<R>(rw[p].d), x.d), acc[p]);
      acc_m[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[p]), _mm512_mul_ps(bcast_ps<R>(rw[p].dmin), x.d), acc_m[p]);
    }
  }
};

struct TokQ6K {
  using Block = BlockQ6_K;
  template <int R>
  using Row = RowQ6K<R>;

  template <int R>
  static void prep(const Block* const* b, Row<R>& r) {
    __m512i u[R][4];
    for (int i = 0; i < R; ++i) {
      kq::unpack_q6(*b[i], u[i]);
      for (int g = 0; g < 16; ++g) r.sc[g][i] = b[i]->scales[g];
      for (int k = 0; k < 8; ++k)
        r.scp[k][i] = static_cast<uint16_t>(b[i]->scales[2 * k]) | (static_cast<uint16_t>(b[i]->scales[2 * k + 1]) << 16);
      r.d[i] = f16_to_f32(b[i]->d);
    }
    interleave<R>(u, r.q);
  }

  template <int P, int R>
  static void step(const Row<R>* rw, const PackedTokens& x, __m512 acc[P], __m512*) {
    __m512i sumi[P], corr[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      corr[p] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), x.bs[0], bcast<R>(rw[p].scp[0]));
#pragma GCC unroll 7
      for (int k = 1; k < 8; ++k) corr[p] = _mm512_dpwssd_epi32(corr[p], x.bs[k], bcast<R>(rw[p].scp[k]));
      sumi[p] = _mm512_setzero_si512();
    }
#pragma GCC unroll 16
    for (int gq = 0; gq < 16; ++gq) {
      __m512i a[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) a[p] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const __m512i xv = _mm512_load_si512(&x.q[4 * gq + l]);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) a[p] = _mm512_dpbusd_epi32(a[p], bcast<R>(rw[p].q + 4 * R * (4 * gq + l)), xv);
      }
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) sumi[p] = _mm512_add_epi32(sumi[p], _mm512_mullo_epi32(a[p], bcast<R>(rw[p].sc[gq])));
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const __m512i v = _mm512_sub_epi32(sumi[p], _mm512_slli_epi32(corr[p], 5));
      acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(bcast_ps<R>(rw[p].d), x.d), acc[p]);
    }
  }
};

// Prefetches block i of rows [r, r + n) (the next pass's rows, fetched a
// block per step of this pass, so they are in cache when that pass starts).
template <class Block>
inline void prefetch_rows(const uint8_t* w, size_t w_row_bytes, int64_t r, int64_t n, int64_t i) {
  for (int64_t p = 0; p < n; ++p) {
    const char* b = reinterpret_cast<const char*>(w + static_cast<size_t>(r + p) * w_row_bytes) + i * sizeof(Block);
    for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
    _mm_prefetch(b + sizeof(Block) - 1, _MM_HINT_T0);
  }
}

template <class T, int R>
void tokens_r(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const PackedTokens* packed,
              int64_t nr, int nc) {
  using Block = typename T::Block;
  using Row = typename T::template Row<R>;
  constexpr int P = R == 8 ? 2 : 4;  // row groups per pass
  constexpr int kRows = P * R;
  const int64_t nb = n / kQK_K;
  const int nri = static_cast<int>(std::min<int64_t>(nr, INT32_MAX));
  for (int64_t r0 = 0; r0 < nr; r0 += kRows) {
    __m512 acc[P], acc_m[P];
    for (int p = 0; p < P; ++p) acc[p] = acc_m[p] = _mm512_setzero_ps();
    Row rw[2][P];  // double-buffered, one super-block ahead
    auto prep = [&](int64_t i, Row* dst) {
      for (int p = 0; p < P; ++p) {
        const Block* b[R];
        for (int k = 0; k < R; ++k)
          b[k] = block_at<Block>(w, w_row_bytes, nri, static_cast<int>(std::min<int64_t>(r0 + p * R + k, nr - 1)), i);
        T::template prep<R>(b, dst[p]);
      }
    };
    prep(0, rw[0]);
    const int64_t n_next = std::clamp<int64_t>(nr - (r0 + kRows), 0, kRows);
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_rows<Block>(w, w_row_bytes, r0 + kRows, n_next, i);
      if (i + 1 < nb) prep(i + 1, rw[(i + 1) & 1]);
      T::template step<P, R>(rw[i & 1], packed[i], acc, acc_m);
    }
    // Lane t * R + k of group p: row r0 + p * R + k, token t.
    for (int p = 0; p < P; ++p) {
      alignas(64) float out[kLanes];
      _mm512_store_ps(out, _mm512_sub_ps(acc[p], acc_m[p]));
      const int64_t rb = r0 + p * R;
      const int nk = static_cast<int>(std::clamp<int64_t>(nr - rb, 0, R));
      for (int t = 0; t < nc; ++t)
        for (int k = 0; k < nk; ++k) s[t * lds + rb + k] = out[t * R + k];
    }
  }
}

template <class T>
void tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* packed, int64_t nr,
            int nc) {
  const auto* pk = static_cast<const PackedTokens*>(packed);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (lane_rows(nc)) {
    case 8: return tokens_r<T, 8>(n, s, lds, wb, w_row_bytes, pk, nr, nc);
    case 4: return tokens_r<T, 4>(n, s, lds, wb, w_row_bytes, pk, nr, nc);
    case 2: return tokens_r<T, 2>(n, s, lds, wb, w_row_bytes, pk, nr, nc);
    default: return tokens_r<T, 1>(n, s, lds, wb, w_row_bytes, pk, nr, nc);
  }
}

}  // namespace

size_t tokens_pack_bytes_q8_K(int64_t n, int) { return static_cast<size_t>(n / kQK_K) * sizeof(PackedTokens); }

void pack_tokens_q8_K(int64_t, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b, int64_t e) {
  auto* out = static_cast<PackedTokens*>(packed);
  const auto* xb = static_cast<const uint8_t*>(x);
  const int R = lane_rows(nc);
  for (int64_t i = b; i < e; ++i) {
    PackedTokens& pk = out[i];
    // Lane l: token l / R (lanes past the tokens: zeros, never stored).
    const BlockQ8_K* blk[kLanes];
    for (int l = 0; l < kLanes; ++l)
      blk[l] = l / R < nc ? reinterpret_cast<const BlockQ8_K*>(xb + static_cast<size_t>(l / R) * x_row_bytes) + i
                          : nullptr;
    __m512i in[kLanes];
    for (int m = 0; m < 4; ++m) {
      for (int l = 0; l < kLanes; ++l) in[l] = blk[l] ? _mm512_loadu_si512(blk[l]->qs + 64 * m) : _mm512_setzero_si512();
      kq::transpose16(in, pk.q + 16 * m);
    }
    __m512i bt[kLanes];
    for (int l = 0; l < kLanes; ++l)
      in[l] = blk[l] ? _mm512_zextsi256_si512(kq::loadu(blk[l]->bsums)) : _mm512_setzero_si512();
    kq::transpose16(in, bt);
    for (int j = 0; j < 8; ++j) pk.bs[j] = bt[j];
    // Sub-block sums (|sum| <= 32 * 127, an exact i16): the pair sums of bs,
    // repacked two sub-blocks per dword.
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF), ones = _mm512_set1_epi16(1);
    for (int j = 0; j < 4; ++j) {
      const __m512i s0 = _mm512_madd_epi16(bt[2 * j], ones), s1 = _mm512_madd_epi16(bt[2 * j + 1], ones);
      pk.bs2[j] = _mm512_or_si512(_mm512_and_si512(s0, lo16), _mm512_slli_epi32(s1, 16));
    }
    alignas(64) float d[kLanes];
    for (int l = 0; l < kLanes; ++l) d[l] = blk[l] ? blk[l]->d : 0.0f;
    pk.d = _mm512_load_ps(d);
  }
}

void vec_dot_tokens_lanes_q4_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                                    const void* packed, int64_t nr, int nc) {
  tokens<TokQ4K>(n, s, lds, w, w_row_bytes, packed, nr, nc);
}

void vec_dot_tokens_lanes_q6_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                                    const void* packed, int64_t nr, int nc) {
  tokens<TokQ6K>(n, s, lds, w, w_row_bytes, packed, nr, nc);
}

}  // namespace ember::avx512
