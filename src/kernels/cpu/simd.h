// SIMD helpers shared by the x86 kernel files (kernels/cpu/avx2/*.cpp and
// kernels/cpu/avx512/*.cpp): AVX2/FMA/F16C helpers (namespace simd) for
// every file, and, only where the translation unit is compiled with AVX-512
// (the avx512/ folder, see CMakeLists.txt), the AVX-512 helpers of the tile
// and float kernels (namespace tile512 / f512).
//
// Everything here has internal linkage (static inline): the same header is
// compiled with different ISA flags in different translation units, so
// external inline functions would let the linker pick an AVX-512 copy for
// AVX2 code (an ODR trap).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember::simd {

static inline float hsum_f32x8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline int hsum_i32x8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

static inline float hmax_f32x8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static inline float load_f16(uint16_t h) { return _cvtsh_ss(h); }

static inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 32 bits -> 32 bytes: byte j is 0xFF if bit j of `bits` is set, else 0.
static inline __m256i bits_to_bytes_mask(uint32_t bits) {
  const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                           0x0101010101010101LL, 0x0000000000000000LL);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

// 16 packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high in 16..31.
static inline __m256i unpack_nibbles_16(const uint8_t* q) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// Sum of u8 x s8 products in groups of 4 adjacent bytes -> 8 x i32 (AVX2: two
// instructions; the u8 operand must keep pairwise sums within i16, which
// holds for every caller: |u| <= 128 with |s| <= 127).
static inline __m256i dot_u8s8_avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Unpacks the 12-byte k-quant scale field into 8 six-bit scales (sc) and 8
// six-bit mins (m), as bytes.
static inline void unpack_k4_scales(const uint8_t* s, uint8_t sc[8], uint8_t m[8]) {
  const uint32_t a0 = load_u32(s), a1 = load_u32(s + 4), a2 = load_u32(s + 8);
  const uint32_t s_lo = a0 & 0x3f3f3f3fu;
  const uint32_t m_lo = a1 & 0x3f3f3f3fu;
  const uint32_t s_hi = (a2 & 0x0f0f0f0fu) | ((a0 >> 2) & 0x30303030u);
  const uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 2) & 0x30303030u);
  std::memcpy(sc, &s_lo, 4);
  std::memcpy(sc + 4, &s_hi, 4);
  std::memcpy(m, &m_lo, 4);
  std::memcpy(m + 4, &m_hi, 4);
}

// Q3_K's 16 six-bit scales (stored biased by 32) as 16 bytes, still biased.
static inline __m128i unpack_q3_K_scales(const uint8_t* s) {
  const uint32_t a0 = load_u32(s), a1 = load_u32(s + 4), a2 = load_u32(s + 8);
  const uint32_t v0 = (a0 & 0x0f0f0f0fu) | ((a2 & 0x03030303u) << 4);
  const uint32_t v1 = (a1 & 0x0f0f0f0fu) | (((a2 >> 2) & 0x03030303u) << 4);
  const uint32_t v2 = ((a0 >> 4) & 0x0f0f0f0fu) | (((a2 >> 4) & 0x03030303u) << 4);
  const uint32_t v3 = ((a1 >> 4) & 0x0f0f0f0fu) | (((a2 >> 6) & 0x03030303u) << 4);
  return _mm_setr_epi32(static_cast<int>(v0), static_cast<int>(v1), static_cast<int>(v2), static_cast<int>(v3));
}

// Round half away from zero (C roundf) for each lane, as int32; exact for
// |v| < 2^31. v - trunc(v) is exact in binary floating point.
static inline __m256i round_away_epi32(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 adj = _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0f)));
  return _mm256_cvttps_epi32(_mm256_add_ps(t, adj));
}

// Packs 4 x 8 int32 (values within int8) into 32 int8 in order.
static inline __m256i pack_i32x32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // a0-3 b0-3 | a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i x = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Packs the f16 fields of 4 consecutive blocks (`stride` bytes apart) into
// one 64-bit value (general registers: cheap loads and shifts).
static inline uint64_t pack_f16x4(const uint8_t* p, size_t stride) {
  uint64_t a = 0;
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    uint16_t u;
    std::memcpy(&u, p + k * stride, 2);
    a |= static_cast<uint64_t>(u) << (16 * k);
  }
  return a;
}

// f16 scales of 4 / 8 consecutive blocks -> floats with one vcvtph2ps,
// instead of one convert and broadcast per block.
static inline __m128 load_f16_scales4(const uint8_t* p, size_t stride) {
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(pack_f16x4(p, stride))));
}
static inline __m256 load_f16_scales8(const uint8_t* p, size_t stride) {
  const __m128i h = _mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<long long>(pack_f16x4(p, stride))),
                                       _mm_cvtsi64_si128(static_cast<long long>(pack_f16x4(p + 4 * stride, stride))));
  return _mm256_cvtph_ps(h);
}

// Shared driver for the legacy block types (f16 d at offset 0 of both the
// weight and activation blocks): sum over blocks of d_w * d_x * dot(i),
// where dot(i) returns block i's 8 x i32 partial sums. Eight blocks per step:
// their scales are converted together and each block's scale is picked with
// one vpermps; two accumulators hide FMA latency.
template <typename DotFn>
static inline float legacy_blocks_dot(int64_t nb, const void* w, size_t w_stride, const void* x, size_t x_stride,
                                      DotFn dot) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    const __m256 sc = _mm256_mul_ps(load_f16_scales8(wb + i * w_stride, w_stride),
                                    load_f16_scales8(xb + i * x_stride, x_stride));
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
      const __m256i p0 = dot(i + k), p1 = dot(i + k + 1);
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(k)), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(k + 1)), acc1);
    }
  }
  if (i + 4 <= nb) {  // 4 more blocks (e.g. rows of 640 = 2 x 8 + 4 blocks)
    const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(load_f16_scales4(wb + i * w_stride, w_stride),
                                                        load_f16_scales4(xb + i * x_stride, x_stride)));
#pragma GCC unroll 2
    for (int k = 0; k < 4; k += 2) {
      const __m256i p0 = dot(i + k), p1 = dot(i + k + 1);
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(k)), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(k + 1)), acc1);
    }
    i += 4;
  }
  for (; i < nb; ++i) {
    uint16_t dw, dx;
    std::memcpy(&dw, wb + i * w_stride, 2);
    std::memcpy(&dx, xb + i * x_stride, 2);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(i)), _mm256_set1_ps(_cvtsh_ss(dw) * _cvtsh_ss(dx)), acc0);
  }
  return hsum_f32x8(_mm256_add_ps(acc0, acc1));
}

// sum over blocks of f16 field a (at offset `off` of the weight blocks) times
// f16 field b (same offset in the activation blocks): the Q4_1/Q5_1 m * s term.
static inline float legacy_blocks_min_term(int64_t nb, const void* w, size_t w_stride, const void* x,
                                           size_t x_stride, size_t off) {
  const auto* wb = static_cast<const uint8_t*>(w) + off;
  const auto* xb = static_cast<const uint8_t*>(x) + off;
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8)
    acc = _mm256_fmadd_ps(load_f16_scales8(wb + i * w_stride, w_stride), load_f16_scales8(xb + i * x_stride, x_stride),
                          acc);
  float sum = hsum_f32x8(acc);
  for (; i < nb; ++i) {
    uint16_t a, b;
    std::memcpy(&a, wb + i * w_stride, 2);
    std::memcpy(&b, xb + i * x_stride, 2);
    sum += _cvtsh_ss(a) * _cvtsh_ss(b);
  }
  return sum;
}

}  // namespace ember::simd

#if defined(__AVX512F__)

// The tile helpers reduce 16 eight-lane f32 vectors at once with exactly the
// additions simd::hsum_f32x8 performs on each, in the same operand order:
//   s4 = v[0:4] + v[4:8];  s2 = {s4[0] + s4[2], s4[1] + s4[3]};  h = s2[0] + s2[1]
// so every sum is bit-identical to hsum_f32x8 of its vector, at ~1/4 of the
// instructions of 16 separate reductions.
namespace ember::tile512 {

// in[m] = [v(2m) | v(2m+1)] (two 8-lane vectors per zmm, m = 0..7) ->
// out[4 * L + e] = hsum_f32x8(v(4 * e + L)).
static inline __m512 hsum16(const __m512 in[8]) {
  __m512 s[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 lo = _mm512_shuffle_f32x4(in[2 * j], in[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(in[2 * j], in[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1));
    s[j] = _mm512_add_ps(lo, hi);  // 128-bit lane L: v(4j + L)[0:4] + v(4j + L)[4:8]
  }
  __m512 t[2];
#pragma GCC unroll 2
  for (int a = 0; a < 2; ++a) {
    const __m512 x = _mm512_shuffle_ps(s[2 * a], s[2 * a + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 y = _mm512_shuffle_ps(s[2 * a], s[2 * a + 1], _MM_SHUFFLE(3, 2, 3, 2));
    t[a] = _mm512_add_ps(x, y);  // lane L: [s2 of s[2a] lane L (2 values), s2 of s[2a+1] lane L]
  }
  const __m512 x = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 y = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_add_ps(x, y);
}

// [a.lo | b.lo] and [a.hi | b.hi] (256-bit halves).
static inline __m512 lo_halves(__m512 a, __m512 b) { return _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)); }
static inline __m512 hi_halves(__m512 a, __m512 b) { return _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)); }

// Writes a 4 x 4 tile of sums: r[4 * c + row] -> s[c * lds + row] for
// row < nr, c < nc.
static inline void store_tile4x4(__m512 r, float* s, int64_t lds, int nr, int nc) {
  alignas(64) float t[16];
  _mm512_store_ps(t, r);
  for (int c = 0; c < nc; ++c)
    for (int row = 0; row < nr; ++row) s[c * lds + row] = t[4 * c + row];
}

}  // namespace ember::tile512

// Float weight formats of the AVX-512 float kernels (avx512/float_*.cpp): 16
// elements (full or masked) as f32 lanes; the reduction of one 16-lane
// accumulator; the mask of the last partial chunk of n. In an anonymous
// namespace: internal linkage, like everything in this header.
namespace ember::f512 {
namespace {

struct F32W {
  using T = float;
  static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16W {
  using T = uint16_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct BF16W {
  using T = uint16_t;
  static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  static __m512 load(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

static inline float reduce(__m512 acc) {
  return simd::hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
}

static inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << (n & 15)) - 1); }

}  // namespace
}  // namespace ember::f512

#endif  // __AVX512F__
