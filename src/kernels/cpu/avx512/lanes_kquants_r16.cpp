// AVX-512 VNNI decode over the interleaved Q4_K_R16 / Q6_K_R16 layouts
// (kernels/interleave.h): one token against whole 16-row groups, lane r of
// every vector = row r, in the arithmetic of the row-lane kernels
// (avx512/lanes_kquants.cpp; twins in kernels/ref/kquants_lanes_ref.h), so
// results equal the base type's kernels bit for bit.
//
// Why: the row-lane decode of plain rows spends most of its instructions
// rearranging (per row: scale unpack and four vpermw, nibble splits; per 16
// rows: a 16 x 16 transpose of the lane sums) around four vpdpbusd per row
// and super-block, and is compute bound near 15 GB/s per core. Here the
// layout already has the tile's lane order: per super-block of a group,
// Q4_K is 32 vector loads, a nibble split each, 64 vpdpbusd with broadcast
// activation dwords, one vpshufb per scale and min vector and 16 vpdpwssd;
// each group is one sequential stream (the next one prefetched into L2, a
// share per 64-element step, also past the call's last group: a call is one
// task of the matmul driver, and the rows after it are the next task's; a
// prefetch past the matrix end cannot fault. 1B Q4_K_M tg128, four rounds
// alternating: 1.03-1.20x over stopping at the call's rows).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "kernels/cpu/avx512/kquants_unpack.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

using kq::pair_index;

constexpr int kR = 16;

inline __m512i bcast32(const void* p) { return _mm512_set1_epi32(static_cast<int>(simd::load_u32(p))); }
inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Q4_K: acc += sumi * d * x.d, acc_m += summ * dmin * x.d for the 16 rows.
void rows_q4k(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_K* x, int64_t nr) {
  const int64_t nb = n / kQK_K;
  const size_t sb = kR * sizeof(BlockQ4_K);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i ix[4] = {pair_index(0), pair_index(1), pair_index(2), pair_index(3)};
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const uint8_t* g = w + static_cast<size_t>(r0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(g + kR * w_row_bytes, kR * w_row_bytes, nb * 4);
    __m512 acc = _mm512_setzero_ps(), acc_m = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* p = g + static_cast<size_t>(i) * sb;
      const BlockQ8_K& xb = x[i];
      const kq::R16Q4KScales sc = kq::r16_q4k_scales(p);
      __m512i sumi = _mm512_setzero_si512(), summ = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        pf.step();
        // a / b: the first / second 16 elements of sub-block 2j (low
        // nibbles) and 2j + 1 (high nibbles); 16 products fit i16.
        __m512i a0 = _mm512_setzero_si512(), b0 = a0, a1 = a0, b1 = a0;
#pragma GCC unroll 8
        for (int l = 0; l < 8; ++l) {
          const __m512i q = _mm512_loadu_si512(p + kq::kR16Q4KQuants + 64 * (8 * j + l));
          const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
          const int8_t* y = xb.qs + 64 * j + 4 * l;
          if (l < 4) {
            a0 = _mm512_dpbusd_epi32(a0, lo, bcast32(y));
            a1 = _mm512_dpbusd_epi32(a1, hi, bcast32(y + 32));
          } else {
            b0 = _mm512_dpbusd_epi32(b0, lo, bcast32(y));
            b1 = _mm512_dpbusd_epi32(b1, hi, bcast32(y + 32));
          }
        }
        const __m512i sv = j < 2 ? sc.sc_lo : sc.sc_hi;
        const __m512i s0 = _mm512_shuffle_epi8(sv, ix[(2 * j) & 3]);
        const __m512i s1 = _mm512_shuffle_epi8(sv, ix[(2 * j + 1) & 3]);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_mask_blend_epi16(0xAAAAAAAA, a0, _mm512_slli_epi32(b0, 16)), s0);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_mask_blend_epi16(0xAAAAAAAA, a1, _mm512_slli_epi32(b1, 16)), s1);
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k)
        summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(k < 4 ? sc.m_lo : sc.m_hi, ix[k & 3]),
                                   bcast32(xb.bsums + 2 * k));
      const __m512 vxd = _mm512_set1_ps(xb.d);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(load_f16x16(p), vxd), acc);
      acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(load_f16x16(p + 32), vxd), acc_m);
    }
    _mm512_storeu_ps(s + r0, _mm512_sub_ps(acc, acc_m));
  }
}

// ---- 1 .. 4 tokens at once per pass over a group (Q6_K decode: T = 1) ----

// One pass of tokens xt[0 .. T) over the group's nb super-blocks at g:
// out[c] lane r = result of row r, token c.
template <int T>
void pass_q4k(const uint8_t* g, int64_t nb, const BlockQ8_K* const* xt, __m512 out[], lanes::GroupPrefetch* pf) {
  const size_t sb = kR * sizeof(BlockQ4_K);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i ix[4] = {pair_index(0), pair_index(1), pair_index(2), pair_index(3)};
  __m512 acc[T], acc_m[T];
  for (int c = 0; c < T; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = g + static_cast<size_t>(i) * sb;
    const kq::R16Q4KScales sc = kq::r16_q4k_scales(p);
    __m512i sumi[T], summ[T];
#pragma GCC unroll 4
    for (int c = 0; c < T; ++c) sumi[c] = summ[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {  // sub-block s: low nibbles of vectors 8j + l (s = 2j), high (s = 2j + 1)
      if (pf && s % 2 == 0) pf->step();
      const int j = s / 2;
      __m512i a[T], b[T];
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c) a[c] = b[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const __m512i q = _mm512_loadu_si512(p + kq::kR16Q4KQuants + 64 * (8 * j + l));
        const __m512i wq = s % 2 ? _mm512_and_si512(_mm512_srli_epi16(q, 4), m4) : _mm512_and_si512(q, m4);
#pragma GCC unroll 4
        for (int c = 0; c < T; ++c) {
          const __m512i y = bcast32(xt[c][i].qs + 32 * s + 4 * l);
          if (l < 4) a[c] = _mm512_dpbusd_epi32(a[c], wq, y);
          else b[c] = _mm512_dpbusd_epi32(b[c], wq, y);
        }
      }
      const __m512i scs = _mm512_shuffle_epi8(s < 4 ? sc.sc_lo : sc.sc_hi, ix[s & 3]);
      const __m512i mns = _mm512_shuffle_epi8(s < 4 ? sc.m_lo : sc.m_hi, ix[s & 3]);
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c) {
        sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_mask_blend_epi16(0xAAAAAAAA, a[c], _mm512_slli_epi32(b[c], 16)), scs);
        summ[c] = _mm512_dpwssd_epi32(summ[c], mns, bcast32(xt[c][i].bsums + 2 * s));
      }
    }
    const __m512 d = load_f16x16(p), dmin = load_f16x16(p + 32);
#pragma GCC unroll 4
    for (int c = 0; c < T; ++c) {
      const __m512 vxd = _mm512_set1_ps(xt[c][i].d);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(d, vxd), acc[c]);
      acc_m[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[c]), _mm512_mul_ps(dmin, vxd), acc_m[c]);
    }
  }
  for (int c = 0; c < T; ++c) out[c] = _mm512_sub_ps(acc[c], acc_m[c]);
}

// Q6_K: sumi = sum_g sc_g * sum(q * x) - 32 * sum_g sc_g * bsums[g].
template <int T>
void pass_q6k(const uint8_t* g, int64_t nb, const BlockQ8_K* const* xt, __m512 out[], lanes::GroupPrefetch* pf) {
  const size_t sb = kR * sizeof(BlockQ6_K);
  __m512 acc[T];
  for (int c = 0; c < T; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = g + static_cast<size_t>(i) * sb;
    __m512i sumi[T], corr[T];
#pragma GCC unroll 4
    for (int c = 0; c < T; ++c) sumi[c] = corr[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i pair = kq::r16_q6k_scale_pair(p, k);
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c) corr[c] = _mm512_dpwssd_epi32(corr[c], pair, bcast32(xt[c][i].bsums + 2 * k));
    }
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        if (pf) pf->step();
        __m512i a[4][T];
#pragma GCC unroll 4
        for (int e = 0; e < 4; ++e)
#pragma GCC unroll 4
          for (int c = 0; c < T; ++c) a[e][c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const int k = 4 * half + kk;
          __m512i q[4];
          kq::r16_q6k_quants(p, h, k, q);
#pragma GCC unroll 4
          for (int e = 0; e < 4; ++e)
#pragma GCC unroll 4
            for (int c = 0; c < T; ++c)
              a[e][c] = _mm512_dpbusd_epi32(a[e][c], q[e], bcast32(xt[c][i].qs + 128 * h + 32 * e + 4 * k));
        }
#pragma GCC unroll 4
        for (int e = 0; e < 4; ++e) {
          const __m512i scg = kq::r16_q6k_scale(p, 8 * h + 2 * e + half);
#pragma GCC unroll 4
          for (int c = 0; c < T; ++c) sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(a[e][c], scg));
        }
      }
    const __m512 d = load_f16x16(p);
#pragma GCC unroll 4
    for (int c = 0; c < T; ++c) {
      const __m512i v = _mm512_sub_epi32(sumi[c], _mm512_slli_epi32(corr[c], 5));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(d, _mm512_set1_ps(xt[c][i].d)), acc[c]);
    }
  }
  for (int c = 0; c < T; ++c) out[c] = acc[c];
}

// nc tokens (1 .. kInterleavedFewMax) over whole groups: passes of up to
// four tokens over each group (the group stays in L2 between passes).
template <bool kQ4>
void few(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x, size_t x_row_bytes,
         int64_t nr, int nc) {
  const int64_t nb = n / kQK_K;
  const BlockQ8_K* xt[kInterleavedFewMax];
  for (int t = 0; t < nc; ++t) xt[t] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(t) * x_row_bytes);
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const uint8_t* g = w + static_cast<size_t>(r0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(g + kR * w_row_bytes, kR * w_row_bytes, nb * 4);
    for (int t0 = 0; t0 < nc; t0 += 4) {
      const int gt = std::min(4, nc - t0);
      lanes::GroupPrefetch* p = t0 == 0 ? &pf : nullptr;
      __m512 out[4];
      switch (gt) {
        case 1: kQ4 ? pass_q4k<1>(g, nb, xt + t0, out, p) : pass_q6k<1>(g, nb, xt + t0, out, p); break;
        case 2: kQ4 ? pass_q4k<2>(g, nb, xt + t0, out, p) : pass_q6k<2>(g, nb, xt + t0, out, p); break;
        case 3: kQ4 ? pass_q4k<3>(g, nb, xt + t0, out, p) : pass_q6k<3>(g, nb, xt + t0, out, p); break;
        default: kQ4 ? pass_q4k<4>(g, nb, xt + t0, out, p) : pass_q6k<4>(g, nb, xt + t0, out, p); break;
      }
      for (int c = 0; c < gt; ++c) _mm512_storeu_ps(s + (t0 + c) * lds + r0, out[c]);
    }
    pf.finish();
  }
}

}  // namespace

void vec_dot_few_r16_q4_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                               size_t x_row_bytes, int64_t nr, int nc) {
  few<true>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes, nr,
            nc);
}
void vec_dot_few_r16_q6_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                               size_t x_row_bytes, int64_t nr, int nc) {
  few<false>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes, nr,
             nc);
}

void vec_dot_rows_r16_q4_K_q8_K(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_q4k(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x), nr);
}
void vec_dot_rows_r16_q6_K_q8_K(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  few<false>(n, s, 0, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), 0, nr, 1);
}

}  // namespace ember::avx512
