// AVX-512 VNNI decode over the interleaved Q4_K_R16 / Q6_K_R16 layouts
// (kernels/interleave.h): one token against whole 16-row groups, lane r of
// every vector = row r, in the arithmetic of the row-lane kernels
// (avx512/kquants_lanes.cpp; twins in kernels/ref/kquants_lanes.h), so
// results equal the base type's kernels bit for bit.
//
// Why: the row-lane decode of plain rows spends most of its instructions
// rearranging (per row: scale unpack and four vpermw, nibble splits; per 16
// rows: a 16 x 16 transpose of the lane sums) around four vpdpbusd per row
// and super-block, and is compute bound near 15 GB/s per core. Here the
// layout already has the tile's lane order: per super-block of a group,
// Q4_K is 32 vector loads, a nibble split each, 64 vpdpbusd with broadcast
// activation dwords, one vpshufb per scale vector and 16 vpdpwssd (decode;
// 12 in the passes of several tokens, whose mins term pairs sub-blocks);
// Q6_K for 12 tokens or more reads its group unpacked once per call (see
// unpack_q6k);
// each group is one sequential stream (the next one prefetched into L2, a
// share per 64-element step, also past the call's last group: a call is one
// task of the matmul driver, and the rows after it are the next task's; a
// prefetch past the matrix end cannot fault. 1B Q4_K_M tg128, four rounds
// alternating: 1.03-1.20x over stopping at the call's rows).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

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
// bs[c][4 i + j]: token c's activation sums of super-block i, sub-blocks as
// i16 pairs (S_0, S_2), (S_1, S_3), (S_4, S_6), (S_5, S_7) (S_s = bsums[2s] +
// bsums[2s + 1], |S_s| <= 32 * 128), to meet the mins pairs (m_0, m_2), ...
// below: the mins term in 4 vpdpwssd per super-block instead of 8.
template <int T>
void pass_q4k(const uint8_t* g, int64_t nb, const BlockQ8_K* const* xt, const int32_t* const* bs, __m512 out[],
              lanes::GroupPrefetch* pf) {
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
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c)
        sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_mask_blend_epi16(0xAAAAAAAA, a[c], _mm512_slli_epi32(b[c], 16)), scs);
    }
    // Mins: dword r of m_lo is row r's bytes m_0 .. m_3 (m_hi: m_4 .. m_7), so
    // as i16 pairs masked / shifted: (m_0, m_2), (m_1, m_3).
    __m512i mp[4];
    kq::r16_q4k_min_pairs(sc, mp);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c) summ[c] = _mm512_dpwssd_epi32(summ[c], mp[j], _mm512_set1_epi32(bs[c][4 * i + j]));
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

// ---- Q6_K for many tokens: the group unpacked once per call ----
//
// From kQ6UnpackMinTokens tokens, each group's quants are unpacked once per
// call into signed bytes q - 32 (64 vectors per super-block, in the order
// the pass reads them) and the activations flipped to unsigned x + 128, so
// one vpdpbusd gives sum((x + 128) (q - 32)) = sum(x (q - 32)) + 128 W_g
// with W_g = sum(q - 32) over sub-block g, a per-row constant: the pass then
// needs no quant extraction and no bsums correction; the group's
// C = 128 sum_g sc_g W_g is computed at unpack time and seeds each token's
// sum. Same exact int32 per super-block as pass_q6k (sum_g sc_g sum(q x) -
// 32 sum_g sc_g bsums_g), so the same bits.
constexpr int kQ6UnpackMinTokens = 12;  // 8 tokens: 0.88x the packed passes; 12: 1.03x; 32: 1.22x
constexpr size_t kQ6Vectors = 64;                      // unpacked quant vectors per super-block
constexpr size_t kQ6Unpacked = 64 * (kQ6Vectors + 1);  // + the C vector

// Vector index of quants e of (h, k): elements 128h + 32e + 4k .. + 3.
constexpr size_t q6_index(int h, int k, int e) { return static_cast<size_t>(4 * (8 * h + k) + e); }

// The nb super-blocks of the group at g into out (nb * kQ6Unpacked bytes).
void unpack_q6k(const uint8_t* g, int64_t nb, uint8_t* out) {
  const size_t sb = kR * sizeof(BlockQ6_K);
  const __m512i k32 = _mm512_set1_epi8(32), ones = _mm512_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = g + static_cast<size_t>(i) * sb;
    uint8_t* o = out + static_cast<size_t>(i) * kQ6Unpacked;
    __m512i c = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {
        __m512i bytes[4];  // per e: the byte sums of the sub-block's 4 vectors (<= 4 * 63)
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const int k = 4 * half + kk;
          __m512i q[4];
          kq::r16_q6k_quants(p, h, k, q);
#pragma GCC unroll 4
          for (int e = 0; e < 4; ++e) {
            _mm512_storeu_si512(o + 64 * q6_index(h, k, e), _mm512_sub_epi8(q[e], k32));
            bytes[e] = kk == 0 ? q[e] : _mm512_add_epi8(bytes[e], q[e]);
          }
        }
#pragma GCC unroll 4
        for (int e = 0; e < 4; ++e) {
          // W_g = sum(q) - 16 * 32 per row; C += sc_g * W_g.
          const __m512i w = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), bytes[e], ones),
                                             _mm512_set1_epi32(16 * 32));
          c = _mm512_add_epi32(c, _mm512_mullo_epi32(w, kq::r16_q6k_scale(p, 8 * h + 2 * e + half)));
        }
      }
    _mm512_storeu_si512(o + 64 * kQ6Vectors, _mm512_slli_epi32(c, 7));
  }
}

// One pass of tokens xt[0 .. T) over the group's nb super-blocks at g:
// out[c] lane r = result of row r, token c. Packed (u null): sumi = sum_g
// sc_g sum(q x) - 32 sum_g sc_g bsums_g, the quants extracted here; unpacked
// (u: unpack_q6k's bytes, xu: the tokens' flipped quants): sumi = sum_g sc_g
// sum((x + 128)(q - 32)) - C. The same int32 either way.
template <int T, bool kUnpacked>
void pass_q6k(const uint8_t* g, const uint8_t* u, int64_t nb, const BlockQ8_K* const* xt, const uint8_t* const* xu,
              __m512 out[], lanes::GroupPrefetch* pf) {
  const size_t sb = kR * sizeof(BlockQ6_K);
  __m512 acc[T];
  for (int c = 0; c < T; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = g + static_cast<size_t>(i) * sb;
    const uint8_t* ui = kUnpacked ? u + static_cast<size_t>(i) * kQ6Unpacked : nullptr;
    __m512i sumi[T], corr[T];
    if constexpr (kUnpacked) {
      const __m512i cv = _mm512_loadu_si512(ui + 64 * kQ6Vectors);
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c) sumi[c] = _mm512_sub_epi32(_mm512_setzero_si512(), cv);
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < T; ++c) sumi[c] = corr[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i pair = kq::r16_q6k_scale_pair(p, k);
#pragma GCC unroll 4
        for (int c = 0; c < T; ++c) corr[c] = _mm512_dpwssd_epi32(corr[c], pair, bcast32(xt[c][i].bsums + 2 * k));
      }
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
          if constexpr (kUnpacked) {
#pragma GCC unroll 4
            for (int e = 0; e < 4; ++e) q[e] = _mm512_loadu_si512(ui + 64 * q6_index(h, k, e));
          } else {
            kq::r16_q6k_quants(p, h, k, q);
          }
#pragma GCC unroll 4
          for (int e = 0; e < 4; ++e)
#pragma GCC unroll 4
            for (int c = 0; c < T; ++c) {
              const int off = 128 * h + 32 * e + 4 * k;
              if constexpr (kUnpacked)  // u8 operand: the flipped activations
                a[e][c] = _mm512_dpbusd_epi32(a[e][c], bcast32(xu[c] + 256 * i + off), q[e]);
              else
                a[e][c] = _mm512_dpbusd_epi32(a[e][c], q[e], bcast32(xt[c][i].qs + off));
            }
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
      const __m512i v = kUnpacked ? sumi[c] : _mm512_sub_epi32(sumi[c], _mm512_slli_epi32(corr[c], 5));
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
  // Q6_K from kQ6UnpackMinTokens: the tokens' quants flipped once, each
  // group unpacked once (see unpack_q6k).
  const bool unpacked = !kQ4 && nc >= kQ6UnpackMinTokens;
  thread_local std::vector<int32_t> pairs;  // Q4_K: the tokens' sub-block sums as pass_q4k takes them
  const int32_t* bs[kInterleavedFewMax];
  if (kQ4) {
    pairs.resize(static_cast<size_t>(nc * nb * 4));
    for (int t = 0; t < nc; ++t) {
      int32_t* o = pairs.data() + static_cast<size_t>(t * nb * 4);
      for (int64_t i = 0; i < nb; ++i) kq::q4k_bsum_pairs(xt[t][i], o + 4 * i);
      bs[t] = o;
    }
  }
  thread_local std::vector<uint8_t> ubuf;
  const uint8_t* xu[kInterleavedFewMax];
  uint8_t* ugroup = nullptr;
  if (unpacked) {
    const size_t xb = static_cast<size_t>(nb) * kQK_K;
    ubuf.resize(static_cast<size_t>(nc) * xb + static_cast<size_t>(nb) * kQ6Unpacked);
    const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int t = 0; t < nc; ++t) {
      uint8_t* o = ubuf.data() + static_cast<size_t>(t) * xb;
      for (int64_t i = 0; i < nb; ++i)
        for (int j = 0; j < kQK_K; j += 64)
          _mm512_storeu_si512(o + kQK_K * i + j, _mm512_xor_si512(_mm512_loadu_si512(xt[t][i].qs + j), k80));
      xu[t] = o;
    }
    ugroup = ubuf.data() + static_cast<size_t>(nc) * xb;
  }
  // One pass of T tokens from t0 over the group at g.
  auto pass = [&]<int T>(const uint8_t* g, int t0, __m512 out[], lanes::GroupPrefetch* p) {
    if constexpr (kQ4) pass_q4k<T>(g, nb, xt + t0, bs + t0, out, p);
    else if (unpacked) pass_q6k<T, true>(g, ugroup, nb, xt + t0, xu + t0, out, p);
    else pass_q6k<T, false>(g, nullptr, nb, xt + t0, nullptr, out, p);
  };
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const uint8_t* g = w + static_cast<size_t>(r0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(g + kR * w_row_bytes, kR * w_row_bytes, nb * 4);
    if (unpacked) unpack_q6k(g, nb, ugroup);
    for (int t0 = 0; t0 < nc; t0 += 4) {
      const int gt = std::min(4, nc - t0);
      lanes::GroupPrefetch* p = t0 == 0 ? &pf : nullptr;
      __m512 out[4];
      switch (gt) {
        case 1: pass.template operator()<1>(g, t0, out, p); break;
        case 2: pass.template operator()<2>(g, t0, out, p); break;
        case 3: pass.template operator()<3>(g, t0, out, p); break;
        default: pass.template operator()<4>(g, t0, out, p); break;
      }
      for (int c = 0; c < gt; ++c) _mm512_storeu_ps(s + (t0 + c) * lds + r0, out[c]);
    }
    pf.finish();
  }
}

}  // namespace

void q4_K_r16_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                  size_t x_row_bytes, int64_t nr, int nc) {
  few<true>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes, nr,
            nc);
}
void q6_K_r16_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                  size_t x_row_bytes, int64_t nr, int nc) {
  few<false>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes, nr,
             nc);
}

void q4_K_r16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_q4k(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x), nr);
}
void q6_K_r16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  few<false>(n, s, 0, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), 0, nr, 1);
}

}  // namespace ember::avx512
