// AVX-512 (F/BW/VL + VNNI) tile kernels for the k-quant weight types Q2_K
// and Q3_K x Q8_K activations (Q4_K, Q5_K and Q6_K have the row-lane kernels
// of avx512/kquants_lanes.cpp at this level; kernels/registry.h,
// VecDotTileFn): kKquantsTileRows weight rows x up to kKquantsTileCols tokens per call,
// in register blocks of 1 row x 16 tokens (see the driver below).
// (Single tokens go to the row kernels, q2_K_rows / q3_K_rows at the end of
// this file: kernels/matmul.cpp.)
//
// Batch invariance: every output is bit-identical to this level's vec_dot
// (avx512/kquants_dot.cpp; the AVX2 kernels compute the same values). Per
// super-block those kernels form exact 8 x i32 lane sums (lane l covers bytes
// 4l..4l+3 of each 32-byte chunk, weighted by the sub-block scales; integer
// sums are exact, so any grouping gives the same values) and then do the only
// rounding steps, which we replicate in order:
//   Q2_K: acc   = fma(float(sumi), f16(d) * x.d,    acc)
//         acc_m = fma(float(pm),   f16(dmin) * x.d, acc_m),  pm = bsums . mins
//         result = hsum_f32x8(acc) - hsum_f32x8(acc_m)
//         (Q2_K's mins pair with bsums one to one)
//   Q3_K: acc = fma(float(sumi -  4 * bsums . sc), f16(d) * x.d, acc)
//         result = hsum_f32x8(acc)
// Here two 32-byte chunks share one zmm; the integer sums use vpdpbusd and
// one scale multiply per two zmm (dot_row); Q2_K packs
// acc | acc_m in one zmm.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }

// Sum of the two 8 x i32 halves of a zmm.
inline __m256i fold_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// Integer core shared by all five types. u[0..3] hold the row's 256 weights
// (unsigned, < 64) as four 64-byte vectors matching y's 64-byte pieces. Each
// piece's lane sums come from one vpdpbusd (4 products per i32 lane, |sum| <
// 2^15, so the value fits the lane's low i16); two pieces' sums are packed
// into the i16 halves of each lane and one vpmaddwd / vpdpwssd weights both
// with their sub-block scales: 6 multiplies per 256 weights instead of 8.
// sc[p] holds the scales for the pack of u[2p], u[2p + 1] (word 2k: u[2p]'s
// lane k, word 2k + 1: u[2p + 1]'s). The sums are exact integers either way.
inline __m512i pack_lo16(__m512i a, __m512i b) {
  return _mm512_mask_blend_epi16(0xAAAAAAAA, a, _mm512_slli_epi32(b, 16));
}
inline __m512i dot_row(const __m512i u[4], const __m512i sc[2], const int8_t* y) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i a0 = _mm512_dpbusd_epi32(z, u[0], loadu512(y));
  const __m512i a1 = _mm512_dpbusd_epi32(z, u[1], loadu512(y + 64));
  const __m512i a2 = _mm512_dpbusd_epi32(z, u[2], loadu512(y + 128));
  const __m512i a3 = _mm512_dpbusd_epi32(z, u[3], loadu512(y + 192));
  return _mm512_dpwssd_epi32(_mm512_madd_epi16(pack_lo16(a0, a1), sc[0]), pack_lo16(a2, a3), sc[1]);
}

// vpermw index for sc[p]: word 2k + q picks the scale of lane k of
// u[2p + q], sub-block (k / kLanesPerSub) + kSubsPerU * (2p + q).
template <int kLanesPerSub, int kSubsPerU>
inline __m512i scale_index(int p) {
  alignas(64) int16_t idx[32];
  for (int w = 0; w < 32; ++w) idx[w] = static_cast<int16_t>((w / 2) / kLanesPerSub + kSubsPerU * (2 * p + w % 2));
  return _mm512_load_si512(idx);
}

// ---- the Q4_K row layout with mins (Q2_K) ----

// One weight row's super-block, unpacked for the pair loop.
struct RowQ4K {
  __m512i u[4];   // chunk j: [low nibbles | high nibbles] of qs[32j .. 32j+32]
  __m512i sc[2];  // scales for dot_row: lane k of u[j] is sub-block 2j + k / 8
  __m256i mins;   // [m0 m0 m1 m1 ... m7 m7] as i16 (pairs with bsums)
  __m512 dmul;    // [f16(d) x 8 | f16(dmin) x 8]
};

struct TraitsMinsK {
  using Row = RowQ4K;
  using Acc = __m512;  // [acc | acc_m]
  static Acc zero() { return _mm512_setzero_ps(); }
  static void pair(const Row& row, const BlockQ8_K& xb, Acc& acc) {
    const __m512i sum = dot_row(row.u, row.sc, xb.qs);
    const __m256i pm = _mm256_madd_epi16(loadu(xb.bsums), row.mins);
    // [sum.hi | pm] + [sum.lo | -]: the halves folded, pm kept.
    const __m512i t = _mm512_shuffle_i64x2(sum, _mm512_castsi256_si512(pm), _MM_SHUFFLE(1, 0, 3, 2));
    const __m512i both = _mm512_mask_add_epi32(t, 0x00FF, t, sum);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(both), _mm512_mul_ps(row.dmul, _mm512_set1_ps(xb.d)), acc);
  }
};

// ---- Q2_K: 2-bit quants, 16 sub-blocks with 4-bit scales and mins ----

// Q2_K fills the Q4_K row layout: its chunks pair like Q6_K's (lane k of
// u[m] is sub-block 4m + k / 4) and its 16 mins pair with bsums one to one.
inline void unpack_row_q2_K(const BlockQ2_K& b, RowQ4K& o) {
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
  }
  o.sc[0] = _mm512_permutexvar_epi16(scale_index<4, 4>(0), sc);
  o.sc[1] = _mm512_permutexvar_epi16(scale_index<4, 4>(1), sc);
  o.dmul = _mm512_insertf32x8(_mm512_set1_ps(simd::load_f16(b.d)), _mm256_set1_ps(simd::load_f16(b.dmin)), 1);
}

struct TraitsQ2K : TraitsMinsK {
  using Block = BlockQ2_K;
  static void unpack(const Block& b, Row& o) { unpack_row_q2_K(b, o); }
};

// ---- the Q6_K row layout (Q3_K) ----

struct RowQ6K {
  __m512i u[4];   // h = 0, 1: [u0 | u1], [u2 | u3] of the 128-element half h
  __m512i sc[2];  // scales for dot_row: lane k of u[m] is sub-block 4m + k / 4
  __m256i sc16;   // the 16 scales as i16 (pair with bsums)
  float d;
};

// Types with a constant offset (Q3_K: 4 = 1 << 2):
// sumi - offset * (bsums . scales).
template <int kOffsetShift>
struct TraitsOffsetK {
  using Row = RowQ6K;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static void pair(const Row& row, const BlockQ8_K& xb, Acc& acc) {
    const __m512i sum = dot_row(row.u, row.sc, xb.qs);
    const __m256i corr = _mm256_madd_epi16(loadu(xb.bsums), row.sc16);
    const __m256i sumi = _mm256_sub_epi32(fold_halves(sum), _mm256_slli_epi32(corr, kOffsetShift));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(row.d * xb.d), acc);
  }
};

// ---- Q3_K: 2 low bits + a high bit (hmask), offset 4, 16 signed 6-bit scales ----

// Q3_K fills the Q6_K row layout (u = lo2 + 4 * hbit; sc16 = scales - 32).
inline void unpack_row_q3_K(const BlockQ3_K& b, RowQ6K& o) {
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
  }
  o.sc[0] = _mm512_permutexvar_epi16(scale_index<4, 4>(0), sc);
  o.sc[1] = _mm512_permutexvar_epi16(scale_index<4, 4>(1), sc);
  o.d = simd::load_f16(b.d);
}

struct TraitsQ3K : TraitsOffsetK<2> {
  using Block = BlockQ3_K;
  static void unpack(const Block& b, Row& o) { unpack_row_q3_K(b, o); }
};

// ---- shared driver ----
//
// Register blocks of 1 row x kGroup tokens: each super-block of the row is
// unpacked into registers once and used for kGroup tokens (16 accumulators +
// the unpacked row fit the 32 zmm registers). Larger groups amortize the
// unpacking better than the earlier 4 rows x 4 tokens blocks (Zen 4: ~+12%).
// Measured slower on Zen 4: unpacking once per call into memory (the extra
// 64-byte loads cost more than the unpacking); sweeping the rows over runs of
// 4 super-blocks to keep the activations in L1 (they are not the bottleneck);
// acc | acc_m interleaved per lane to save the d * x.d multiplies (the extra
// permutes cost more).

constexpr int kGroup = 16;

// out[c] = result for token c of the group, c < kGroup: the 16 accumulators
// reduced together (same additions as hsum_f32x8 on each).
inline __m512 reduce_group(const __m512 acc[kGroup]) {
  __m512 va[8], vm[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    va[m] = tile512::lo_halves(acc[2 * m], acc[2 * m + 1]);
    vm[m] = tile512::hi_halves(acc[2 * m], acc[2 * m + 1]);
  }
  return _mm512_sub_ps(tile512::hsum16(va), tile512::hsum16(vm));
}
inline __m512 reduce_group(const __m256 acc[kGroup]) {
  __m512 v[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) v[m] = _mm512_insertf32x8(_mm512_castps256_ps512(acc[2 * m]), acc[2 * m + 1], 1);
  return tile512::hsum16(v);
}

template <class T>
void kquant_tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                 size_t x_row_bytes, int nr, int nc) {
  using Block = typename T::Block;
  using Acc = typename T::Acc;
  const int64_t nb = n / kQK_K;
  for (int g = 0; g < nc; g += kGroup) {
    const int gc = std::min(kGroup, nc - g);
    const BlockQ8_K* xc[kGroup];
    for (int c = 0; c < kGroup; ++c)
      xc[c] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(g + std::min(c, gc - 1)) * x_row_bytes);
    for (int r = 0; r < nr; ++r) {
      const Block* wr = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_row_bytes);
      Acc acc[kGroup];
      for (auto& a : acc) a = T::zero();
      for (int64_t i = 0; i < nb; ++i) {
        typename T::Row row;
        T::unpack(wr[i], row);
#pragma GCC unroll 16
        for (int c = 0; c < kGroup; ++c) T::pair(row, xc[c][i], acc[c]);
      }
      // Lane 4L + e of the reduction is token 4e + L: put the tokens in order.
      const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      alignas(64) float t[16];
      _mm512_store_ps(t, _mm512_permutexvar_ps(order, reduce_group(acc)));
      float* sr = s + g * lds + r;
      if (gc == kGroup) {
#pragma GCC unroll 16
        for (int c = 0; c < kGroup; ++c) sr[c * lds] = t[c];
      } else {
        for (int c = 0; c < gc; ++c) sr[c * lds] = t[c];
      }
    }
  }
}

// ---- decode: one token over many rows ----
//
// Rows one after another (the matrix streams from memory in address order),
// each with the tile's 1 row x 1 token arithmetic, the next bytes
// software-prefetched kPrefetchBytes ahead of the block being read; groups of
// kGroup rows share one reduce_group (so every output is the same value the
// tile and vec_dot give, with 1/16 of the horizontal sums' cost).
constexpr size_t kPrefetchBytes = 1024;

template <class T>
void kquant_rows(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_K* x, int64_t nr) {
  using Block = typename T::Block;
  using Acc = typename T::Acc;
  const int64_t nb = n / kQK_K;
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int64_t r0 = 0; r0 < nr; r0 += kGroup) {
    const int gr = static_cast<int>(std::min<int64_t>(kGroup, nr - r0));
    Acc acc[kGroup];
    for (int r = 0; r < gr; ++r) {
      const uint8_t* wr = w + static_cast<size_t>(r0 + r) * w_row_bytes;
      Acc a = T::zero();
      for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* p = wr + static_cast<size_t>(i) * sizeof(Block);
#pragma GCC unroll 4
        for (size_t l = 0; l < sizeof(Block); l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + l), _MM_HINT_T0);
        typename T::Row row;
        T::unpack(*reinterpret_cast<const Block*>(p), row);
        T::pair(row, x[i], a);
      }
      acc[r] = a;
    }
    for (int r = gr; r < kGroup; ++r) acc[r] = T::zero();
    alignas(64) float t[16];
    _mm512_store_ps(t, _mm512_permutexvar_ps(order, reduce_group(acc)));
    for (int r = 0; r < gr; ++r) s[r0 + r] = t[r];
  }
}

}  // namespace

#define EMBER_KQUANT_ROWS(name, traits)                                                                                \
  void name##_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x,                              \
                   int64_t nr) {                                                                                       \
    kquant_rows<traits>(n, s, static_cast<const uint8_t*>(w), w_row_bytes,                                             \
                        static_cast<const BlockQ8_K*>(x), nr);                                                         \
  }
EMBER_KQUANT_ROWS(q2_K, TraitsQ2K)
EMBER_KQUANT_ROWS(q3_K, TraitsQ3K)
#undef EMBER_KQUANT_ROWS

void q2_K_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  kquant_tile<TraitsQ2K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                         x_row_bytes, nr, nc);
}
void q3_K_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  kquant_tile<TraitsQ3K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                         x_row_bytes, nr, nc);
}
}  // namespace ember::avx512
