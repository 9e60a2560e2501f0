// AVX-512 (F/BW/VL + VNNI) tile kernels for the k-quant weight types Q2_K,
// Q3_K, Q4_K, Q5_K and Q6_K x Q8_K activations (kernels/registry.h,
// VecDotTileFn): 4 weight
// rows x up to kWideTileCols tokens per call, in register blocks of 4 x 4.
// nc == 1 (decode) runs vec_dot row by row: with one token there is no reuse
// to gain.
//
// Batch invariance: every output is bit-identical to this level's vec_dot
// (kquants_avx512.cpp; the AVX2 kernels compute the same values). Per
// super-block those kernels form exact 8 x i32 lane sums (lane l covers bytes
// 4l..4l+3 of each 32-byte chunk, weighted by the sub-block scales; integer
// sums are exact, so any grouping gives the same values) and then do the only
// rounding steps, which we replicate in order:
//   Q4_K: acc   = fma(float(sumi), f16(d) * x.d,    acc)
//         acc_m = fma(float(pm),   f16(dmin) * x.d, acc_m),  pm = bsums . mins
//         result = hsum_f32x8(acc) - hsum_f32x8(acc_m)
//   Q5_K, Q2_K: as Q4_K (Q2_K's mins pair with bsums one to one)
//   Q6_K: acc = fma(float(sumi - 32 * bsums . sc), f16(d) * x.d, acc)
//   Q3_K: acc = fma(float(sumi -  4 * bsums . sc), f16(d) * x.d, acc)
//         result = hsum_f32x8(acc)
// Here two 32-byte chunks share one zmm (their scales side by side), one
// maddubs + vpdpwssd per pair of chunks; Q4_K, Q5_K and Q2_K pack
// acc | acc_m in one zmm.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_util.h"
#include "kernels/cpu/tile_avx512.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }

// vpermw index: 16-lane groups g = 0..1 (zmm halves) pick elements a, b.
inline __m512i pick_halves(int a, int b) {
  const __m256i lo = _mm256_set1_epi16(static_cast<short>(a)), hi = _mm256_set1_epi16(static_cast<short>(b));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// vpermw index: 8-lane groups pick elements a, a+1, a+2, a+3.
inline __m512i pick_quarters(int a) {
  const __m128i q0 = _mm_set1_epi16(static_cast<short>(a)), q1 = _mm_set1_epi16(static_cast<short>(a + 1));
  const __m128i q2 = _mm_set1_epi16(static_cast<short>(a + 2)), q3 = _mm_set1_epi16(static_cast<short>(a + 3));
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(q2), q3, 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Sum of the two 8 x i32 halves of a zmm.
inline __m256i fold_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// ---- Q4_K ----

// One weight row's super-block, unpacked for the pair loop.
struct RowQ4K {
  __m512i u[4];   // chunk j: [low nibbles | high nibbles] of qs[32j .. 32j+32]
  __m512i sc[4];  // chunk j: [sc[2j] x 16 | sc[2j+1] x 16] as i16
  __m256i mins;   // [m0 m0 m1 m1 ... m7 m7] as i16 (pairs with bsums)
  __m512 dmul;    // [f16(d) x 8 | f16(dmin) x 8]
};

inline void unpack_row_q4_K(const BlockQ4_K& b, RowQ4K& o) {
  alignas(16) uint8_t sc[8], m[8];
  simd::unpack_k4_scales(b.scales, sc, m);
  const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
  const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  o.mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)), dup));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i q = _mm512_broadcast_i64x4(loadu(b.qs + 32 * j));
    o.u[j] = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), m4);
    o.sc[j] = _mm512_permutexvar_epi16(pick_halves(2 * j, 2 * j + 1), sc16);
  }
  o.dmul = _mm512_insertf32x8(_mm512_set1_ps(simd::load_f16(b.d)), _mm256_set1_ps(simd::load_f16(b.dmin)), 1);
}

struct TraitsQ4K {
  using Block = BlockQ4_K;
  using Row = RowQ4K;
  using Acc = __m512;  // [acc | acc_m]
  static Acc zero() { return _mm512_setzero_ps(); }
  static void unpack(const Block& b, Row& o) { unpack_row_q4_K(b, o); }
  static void pair(const Row& row, const BlockQ8_K& xb, Acc& acc) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(row.u[j], loadu512(xb.qs + 64 * j)), row.sc[j]);
    const __m256i pm = _mm256_madd_epi16(loadu(xb.bsums), row.mins);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(fold_halves(sum)), pm, 1);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(both), _mm512_mul_ps(row.dmul, _mm512_set1_ps(xb.d)), acc);
  }
  // s = hsum_f32x8(acc) - hsum_f32x8(acc_m) for the 4 x 4 tile, reduced together.
  static void store(const Acc acc[kTileRows][4], float* s, int64_t lds, int nr, int nc) {
    __m512 va[8], vm[8];
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) {
      const int r = m / 2, c = 2 * (m % 2);
      va[m] = tile512::lo_halves(acc[r][c], acc[r][c + 1]);
      vm[m] = tile512::hi_halves(acc[r][c], acc[r][c + 1]);
    }
    tile512::store_tile4x4(_mm512_sub_ps(tile512::hsum16(va), tile512::hsum16(vm)), s, lds, nr, nc);
  }
};

// ---- Q5_K: Q4_K plus a fifth bit per element ----

// Bit 4 of element 32k + l is bit k of qh[l]; chunk j's halves are
// sub-blocks 2j and 2j + 1.
inline void unpack_row_q5_K(const BlockQ5_K& b, RowQ4K& o) {
  alignas(16) uint8_t sc[8], m[8];
  simd::unpack_k4_scales(b.scales, sc, m);
  const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
  const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  o.mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)), dup));
  const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  const __m512i qh = _mm512_broadcast_i64x4(loadu(b.qh));
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i q = _mm512_broadcast_i64x4(loadu(b.qs + 32 * j));
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), m4);
    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * j))),
                                           _mm256_set1_epi8(static_cast<char>(2 << (2 * j))), 1);
    o.u[j] = _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(qh, sel), nib, b4);
    o.sc[j] = _mm512_permutexvar_epi16(pick_halves(2 * j, 2 * j + 1), sc16);
  }
  o.dmul = _mm512_insertf32x8(_mm512_set1_ps(simd::load_f16(b.d)), _mm256_set1_ps(simd::load_f16(b.dmin)), 1);
}

struct TraitsQ5K : TraitsQ4K {
  using Block = BlockQ5_K;
  static void unpack(const Block& b, Row& o) { unpack_row_q5_K(b, o); }
};

// ---- Q2_K: 2-bit quants, 16 sub-blocks with 4-bit scales and mins ----

struct RowQ2K {
  __m512i u[4];    // pairs of 32-element chunks, as Q6_K
  __m512i sc[4];   // matching scales: [sc[b] sc[b+1] sc[b+2] sc[b+3]] x 8 each
  __m256i mins;    // the 16 mins as i16 (pair with bsums)
  __m512 dmul;     // [f16(d) x 8 | f16(dmin) x 8]
};

inline void unpack_row_q2_K(const BlockQ2_K& b, RowQ2K& o) {
  const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F))));
  o.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
  const __m512i m2 = _mm512_set1_epi8(3);
  // Chunk k of the 32-byte group h is bits 2k..2k+1 of each byte.
  const __m512i s01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i s23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(6), 1);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_broadcast_i64x4(loadu(b.qs + 32 * h));
    o.u[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(q, s01), m2);
    o.u[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, s23), m2);
    o.sc[2 * h] = _mm512_permutexvar_epi16(pick_quarters(8 * h), sc);
    o.sc[2 * h + 1] = _mm512_permutexvar_epi16(pick_quarters(8 * h + 4), sc);
  }
  o.dmul = _mm512_insertf32x8(_mm512_set1_ps(simd::load_f16(b.d)), _mm256_set1_ps(simd::load_f16(b.dmin)), 1);
}

struct TraitsQ2K {
  using Block = BlockQ2_K;
  using Row = RowQ2K;
  using Acc = __m512;  // [acc | acc_m]
  static Acc zero() { return _mm512_setzero_ps(); }
  static void unpack(const Block& b, Row& o) { unpack_row_q2_K(b, o); }
  static void pair(const Row& row, const BlockQ8_K& xb, Acc& acc) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
      sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(row.u[k], loadu512(xb.qs + 64 * k)), row.sc[k]);
    const __m256i pm = _mm256_madd_epi16(loadu(xb.bsums), row.mins);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(fold_halves(sum)), pm, 1);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(both), _mm512_mul_ps(row.dmul, _mm512_set1_ps(xb.d)), acc);
  }
  static void store(const Acc acc[kTileRows][4], float* s, int64_t lds, int nr, int nc) {
    TraitsQ4K::store(acc, s, lds, nr, nc);
  }
};

// ---- Q6_K ----

struct RowQ6K {
  __m512i u[4];   // h = 0, 1: [u0 | u1], [u2 | u3] of the 128-element half h
  __m512i sc[4];  // matching scales: [sc[b] sc[b+1] sc[b+2] sc[b+3]] x 8 each
  __m256i sc16;   // the 16 scales as i16 (pair with bsums)
  float d;
};

inline void unpack_row_q6_K(const BlockQ6_K& b, RowQ6K& o) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  o.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  const __m512i sc = _mm512_castsi256_si512(o.sc16);
  // qh shifts: [<< 4 | << 2] for u0/u1, [>> 0 | >> 2] for u2/u3.
  const __m512i sl = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
  const __m512i sr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = loadu512(b.ql + 64 * h);  // [ql0 | ql1]
    const __m512i qh = _mm512_broadcast_i64x4(loadu(b.qh + 32 * h));
    o.u[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, m4), _mm512_sllv_epi16(qh, sl), m2, 0xf8);
    o.u[2 * h + 1] =
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_srlv_epi16(qh, sr), m2, 0xf8);
    o.sc[2 * h] = _mm512_permutexvar_epi16(pick_quarters(8 * h), sc);
    o.sc[2 * h + 1] = _mm512_permutexvar_epi16(pick_quarters(8 * h + 4), sc);
  }
  o.d = simd::load_f16(b.d);
}

struct TraitsQ6K {
  using Block = BlockQ6_K;
  using Row = RowQ6K;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static void unpack(const Block& b, Row& o) { unpack_row_q6_K(b, o); }
  static void pair(const Row& row, const BlockQ8_K& xb, Acc& acc) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
      sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(row.u[k], loadu512(xb.qs + 64 * k)), row.sc[k]);
    const __m256i corr = _mm256_madd_epi16(loadu(xb.bsums), row.sc16);
    const __m256i sumi = _mm256_sub_epi32(fold_halves(sum), _mm256_slli_epi32(corr, 5));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(row.d * xb.d), acc);
  }
  static void store(const Acc acc[kTileRows][4], float* s, int64_t lds, int nr, int nc) {
    __m512 v[8];
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) {
      const int r = m / 2, c = 2 * (m % 2);
      v[m] = _mm512_insertf32x8(_mm512_castps256_ps512(acc[r][c]), acc[r][c + 1], 1);
    }
    tile512::store_tile4x4(tile512::hsum16(v), s, lds, nr, nc);
  }
};

// ---- Q3_K: 2 low bits + a high bit (hmask), offset 4, 16 signed 6-bit scales ----

struct RowQ3K {
  __m512i u[4];   // pairs of 32-element chunks (lo2 + 4 * hbit), as Q6_K
  __m512i sc[4];  // matching scales
  __m256i sc16;   // the 16 scales - 32 as i16 (pair with bsums)
  float d;
};

inline void unpack_row_q3_K(const BlockQ3_K& b, RowQ3K& o) {
  o.sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(simd::unpack_q3_K_scales(b.scales)), _mm256_set1_epi16(32));
  const __m512i sc = _mm512_castsi256_si512(o.sc16);
  const __m512i m2 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
  const __m512i hm = _mm512_broadcast_i64x4(loadu(b.hmask));
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_broadcast_i64x4(loadu(b.qs + 32 * h));
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {  // chunks j = 2p, 2p + 1 of group h
      const int j = 2 * p;
      const __m512i shifts = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(2 * j))),
                                                _mm256_set1_epi16(static_cast<short>(2 * j + 2)), 1);
      const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (4 * h + j))),
                                             _mm256_set1_epi8(static_cast<char>(1 << (4 * h + j + 1))), 1);
      const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), m2);
      o.u[2 * h + p] = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hm, sel), lo, b2);
    }
    o.sc[2 * h] = _mm512_permutexvar_epi16(pick_quarters(8 * h), sc);
    o.sc[2 * h + 1] = _mm512_permutexvar_epi16(pick_quarters(8 * h + 4), sc);
  }
  o.d = simd::load_f16(b.d);
}

struct TraitsQ3K {
  using Block = BlockQ3_K;
  using Row = RowQ3K;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static void unpack(const Block& b, Row& o) { unpack_row_q3_K(b, o); }
  static void pair(const Row& row, const BlockQ8_K& xb, Acc& acc) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
      sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(row.u[k], loadu512(xb.qs + 64 * k)), row.sc[k]);
    const __m256i corr = _mm256_madd_epi16(loadu(xb.bsums), row.sc16);
    const __m256i sumi = _mm256_sub_epi32(fold_halves(sum), _mm256_slli_epi32(corr, 2));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(row.d * xb.d), acc);
  }
  static void store(const Acc acc[kTileRows][4], float* s, int64_t lds, int nr, int nc) {
    TraitsQ6K::store(acc, s, lds, nr, nc);
  }
};

// ---- shared driver ----
//
// Groups of 4 tokens; within a group each super-block of the 4 rows is
// unpacked into registers once and used for the 4 tokens. (Unpacking once per
// call into memory for all groups measured slower on Zen 4: the extra 64-byte
// loads cost more than the unpacking.)

template <class T>
void kquant_tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                 size_t x_row_bytes, int nr, int nc) {
  using Block = typename T::Block;
  using Acc = typename T::Acc;
  const Block* wr[kTileRows];
  for (int r = 0; r < kTileRows; ++r)
    wr[r] = reinterpret_cast<const Block*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes);
  const int64_t nb = n / kQK_K;
  for (int g = 0; g < (nc + 3) / 4; ++g) {
    const int gc = std::min(4, nc - 4 * g);
    const BlockQ8_K* xc[4];
    for (int c = 0; c < 4; ++c)
      xc[c] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(4 * g + std::min(c, gc - 1)) * x_row_bytes);
    Acc acc[kTileRows][4];
    for (auto& row : acc)
      for (auto& a : row) a = T::zero();
    for (int64_t i = 0; i < nb; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < kTileRows; ++r) {
        typename T::Row row;
        T::unpack(wr[r][i], row);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) T::pair(row, xc[c][i], acc[r][c]);
      }
    }
    T::store(acc, s + 4 * g * lds, lds, nr, gc);
  }
}

// One token: nothing to share between rows; the streaming vec_dot is faster.
template <class T>
void tile_or_rows(void (*vec_dot)(int64_t, float*, const void*, const void*), int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                  const void* x, size_t x_row_bytes, int nr, int nc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (nc == 1) {
    for (int r = 0; r < nr; ++r) vec_dot(n, s + r, wb + static_cast<size_t>(r) * w_row_bytes, xb);
    return;
  }
  kquant_tile<T>(n, s, lds, wb, w_row_bytes, xb, x_row_bytes, nr, nc);
}

}  // namespace

void vec_dot_tile_q2_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  tile_or_rows<TraitsQ2K>(vec_dot_q2_K_q8_K, n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void vec_dot_tile_q3_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  tile_or_rows<TraitsQ3K>(vec_dot_q3_K_q8_K, n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void vec_dot_tile_q4_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  tile_or_rows<TraitsQ4K>(vec_dot_q4_K_q8_K, n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void vec_dot_tile_q5_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  tile_or_rows<TraitsQ5K>(vec_dot_q5_K_q8_K, n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void vec_dot_tile_q6_K_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  tile_or_rows<TraitsQ6K>(vec_dot_q6_K_q8_K, n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
