// AVX2 decode over the interleaved Q4_K_R16 / Q6_K_R16 layouts
// (kernels/interleave.h): one token against whole 16-row groups, in the
// arithmetic of the row-lane kernels (avx2/kquants_lanes.cpp; twins in
// kernels/ref/kquants_lanes.h), so results equal the base type's kernels
// bit for bit (tests/kernels/interleave_test.cpp).
//
// Why: the plain-row decode reads a group of 8 rows as 8 strided streams and
// drew ~16-17 tok/s on the 1B Q4_K_M file at either ISA level, against ~27
// for the interleaved layout at AVX-512 (2026-12-06, this VM). Here each
// group is one sequential stream (the next group prefetched into L2, a share
// per 64-element step, also past the call's rows: the next task's). A 64-byte
// vector of the layout holds the same dword of 16 rows, so its two 32-byte
// halves are the lane order of the AVX2 row lanes (rows 0-7, 8-15) with no
// transposes; each activation broadcast serves both halves.
//   Q4_K: per qs vector half a nibble split, two vpmaddubsw; 8 pieces of a
//   sub-block summed in i16 (16 products: <= 16 * 15 * 128 < 2^15), one
//   vpmaddwd by the rows' (sc, sc) pairs; mins as (m, m) pairs x bsums pairs.
//   Q6_K: quants = ql nibble | qh bits; two pieces of a group summed in i16
//   (4 products: <= 4 * 63 * 128), one vpmaddwd by (sc_g, sc_g); the offset
//   32 as -32 * sum_g sc_g * bsums[g].
#include <immintrin.h>

#include <cstddef>

#include "kernels/cpu/avx2/lanes8.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx2 {
namespace {

using lanes8::bcast32;
using lanes8::chain;
using lanes8::dup_words;
using lanes8::loadu;

constexpr int kG = 16;  // rows per interleaved group
constexpr int kH = 8;   // rows per half (one per ymm lane)

inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

void rows_q4k(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_K* x, int64_t nr) {
  const int64_t nb = n / kQK_K;
  const size_t sb = kG * sizeof(BlockQ4_K), group_bytes = kG * w_row_bytes;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
  const __m256i b0 = _mm256_set1_epi32(0xFF);
  // (v, v) i16 pairs of byte t % 4 of each lane of v.
  auto pair = [&](__m256i v, int t) { return dup_words(_mm256_and_si256(_mm256_srli_epi32(v, 8 * (t % 4)), b0)); };
  for (int64_t g0 = 0; g0 < nr; g0 += kG) {
    const uint8_t* gp = w + static_cast<size_t>(g0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(gp + group_bytes, group_bytes, 4 * nb);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, acc_m[2] = {acc[0], acc[0]};
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* p = gp + static_cast<size_t>(i) * sb;
      const BlockQ8_K& xb = x[i];
      // Scales as simd::unpack_k4_scales, 4 bytes per lane: [half][sub-blocks 0..3 | 4..7].
      __m256i sc[2][2], mn[2][2];
      for (int h = 0; h < 2; ++h) {
        const __m256i a0 = loadu(p + 64 + 32 * h), a1 = loadu(p + 128 + 32 * h), a2 = loadu(p + 192 + 32 * h);
        sc[h][0] = _mm256_and_si256(a0, m6);
        sc[h][1] = _mm256_or_si256(_mm256_and_si256(a2, m4), _mm256_and_si256(_mm256_srli_epi16(a0, 2), m30));
        mn[h][0] = _mm256_and_si256(a1, m6);
        mn[h][1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a2, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(a1, 2), m30));
      }
      __m256i sumi[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, summ[2] = {sumi[0], sumi[0]};
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const __m256i bs = bcast32(xb.bsums + 2 * t);
        for (int h = 0; h < 2; ++h) summ[h] = _mm256_add_epi32(summ[h], _mm256_madd_epi16(pair(mn[h][t / 4], t), bs));
      }
#pragma GCC unroll 1
      for (int j = 0; j < 4; ++j) {  // qs vectors 8j .. 8j + 7: sub-blocks 2j (low nibbles), 2j + 1 (high)
        pf.step();
        __m256i lo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hi[2] = {lo[0], lo[0]};
#pragma GCC unroll 8
        for (int l = 0; l < 8; ++l) {
          const int8_t* y = xb.qs + 64 * j + 4 * l;
          const __m256i xl = bcast32(y), xh = bcast32(y + 32);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256i q = loadu(p + 256 + 64 * (8 * j + l) + 32 * h);
            lo[h] = chain(_mm256_add_epi16(lo[h], _mm256_maddubs_epi16(_mm256_and_si256(q, m4), xl)));
            hi[h] = chain(
                _mm256_add_epi16(hi[h], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), xh)));
          }
        }
        for (int h = 0; h < 2; ++h) {
          sumi[h] = _mm256_add_epi32(sumi[h], _mm256_madd_epi16(lo[h], pair(sc[h][j / 2], 2 * j)));
          sumi[h] = _mm256_add_epi32(sumi[h], _mm256_madd_epi16(hi[h], pair(sc[h][j / 2], 2 * j + 1)));
        }
      }
      const __m256 vxd = _mm256_set1_ps(xb.d);
      for (int h = 0; h < 2; ++h) {
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[h]), _mm256_mul_ps(load_f16x8(p + 16 * h), vxd), acc[h]);
        acc_m[h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ[h]), _mm256_mul_ps(load_f16x8(p + 32 + 16 * h), vxd), acc_m[h]);
      }
    }
    pf.finish();
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(s + g0 + kH * h, _mm256_sub_ps(acc[h], acc_m[h]));
  }
}

void rows_q6k(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_K* x, int64_t nr) {
  const int64_t nb = n / kQK_K;
  const size_t sb = kG * sizeof(BlockQ6_K), group_bytes = kG * w_row_bytes;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), lo16 = _mm256_set1_epi32(0xFFFF);
  for (int64_t g0 = 0; g0 < nr; g0 += kG) {
    const uint8_t* gp = w + static_cast<size_t>(g0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(gp + group_bytes, group_bytes, 4 * nb);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* p = gp + static_cast<size_t>(i) * sb;
      const BlockQ8_K& xb = x[i];
      __m256i sp[2][16], sumi[2];  // sp[half][g]: the rows' (sc_g, sc_g) pairs
      for (int h = 0; h < 2; ++h) {
        __m256i t[16];
        for (int g = 0; g < 16; ++g) {
          t[g] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 32 + 16 * g + 8 * h)));
          sp[h][g] = dup_words(t[g]);
        }
        __m256i corr = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          const __m256i scp = _mm256_or_si256(_mm256_and_si256(t[2 * k], lo16), _mm256_slli_epi32(t[2 * k + 1], 16));
          corr = _mm256_add_epi32(corr, _mm256_madd_epi16(scp, bcast32(xb.bsums + 2 * k)));
        }
        sumi[h] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
      }
#pragma GCC unroll 1
      for (int hh = 0; hh < 2; ++hh) {  // elements 128 hh .. 128 hh + 127
        pf.step();
        pf.step();
#pragma GCC unroll 1
        for (int k = 0; k < 8; k += 2) {
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            // e[d][q]: quants of elements 128 hh + 32 q + 4 (k + d) .. + 3, group 8 hh + 2 q + k / 4.
            const uint8_t* b = p + 32 * static_cast<size_t>(h);
            __m256i e[2][4];
#pragma GCC unroll 2
            for (int d = 0; d < 2; ++d) {
              const __m256i l0 = loadu(b + 288 + 64 * (16 * hh + k + d));
              const __m256i l1 = loadu(b + 288 + 64 * (16 * hh + 8 + k + d));
              const __m256i qh = loadu(b + 2336 + 64 * (8 * hh + k + d));
              e[d][0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
              e[d][1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
              e[d][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
              e[d][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            }
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) {
              const int8_t* y = xb.qs + 128 * hh + 32 * q + 4 * k;
              const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(e[0][q], bcast32(y)),
                                                 _mm256_maddubs_epi16(e[1][q], bcast32(y + 4)));
              sumi[h] = _mm256_add_epi32(sumi[h], _mm256_madd_epi16(a, sp[h][8 * hh + 2 * q + k / 4]));
            }
          }
        }
      }
      const __m256 vxd = _mm256_set1_ps(xb.d);
      for (int h = 0; h < 2; ++h)
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[h]), _mm256_mul_ps(load_f16x8(p + 16 * h), vxd), acc[h]);
    }
    pf.finish();
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(s + g0 + kH * h, acc[h]);
  }
}

}  // namespace

void q4_K_r16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_q4k(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x), nr);
}
void q6_K_r16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_q6k(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x), nr);
}

}  // namespace ember::avx2
