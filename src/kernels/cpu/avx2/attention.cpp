// AVX2 tiled online-softmax attention (the op table's entry at the AVX2
// level): the 16-float vector of kernels/cpu/attention_tiles.h as two 8-lane
// halves, K/V rows of every format of kernels/kv_types.h decoded in
// registers, 8 elements at a time; plus the chunk merge and final division
// that the AVX-512 level calls too (one compiled copy: the same bits at both
// levels).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/simd.h"

namespace ember::avx2 {

namespace {

// 8 consecutive elements (from element i, i % 8 == 0) of a K/V head row of
// type T, decoded to exactly the floats kv_load_row gives (F32: a plain load).
template <KvType T>
__m256 load8(const uint8_t* row, int i) {
  if constexpr (T == KvType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (T == KvType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  } else if constexpr (T == KvType::kBF16) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (T == KvType::kQ8) {
    const uint8_t* b = row + (i / kKvGroup) * (2 + kKvGroup);
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % kKvGroup));
    return _mm256_mul_ps(_mm256_set1_ps(attn_tiles::group_scale(b)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  } else {
    const uint8_t* b = row + (i / kKvGroup) * (2 + kKvGroup / 2);
    const int o = i % kKvGroup;
    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + (o & 15))));
    q = o < kKvGroup / 2 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_set1_ps(attn_tiles::group_scale(b)), _mm256_cvtepi32_ps(q));
  }
}

// q4c: elements i..i+7 (i % 8 == 0) of position r of a head's group region
// (kernels/kv_types.h), fma(d, q, m) as kv_q4c_load_row computes it.
__m256 load8_q4c(const uint8_t* region, int r, int hd, int i) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(region + 2 * i)));
  const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(region + 2 * hd + 2 * i)));
  const uint8_t* nib = region + 4 * hd + r * (hd / 2) + (i / kKvGroup) * (kKvGroup / 2);
  const int o = i % kKvGroup;
  __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nib + (o & 15))));
  q = o < kKvGroup / 2 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
  return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q), m);
}

// 16 floats as two 8-lane halves: lo = elements 0-7, hi = 8-15.
struct Avx2Vec16 {
  struct Vec {
    __m256 lo, hi;
  };
  static constexpr int kDotRows = 4;  // rows per K load in q·k
  static constexpr int kPvRows = 4;   // rows per V load in p·V
  static constexpr int kPvPairRows = 2;  // rows whose two halves of a q8 / q4 group fit the registers
  static Vec zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static void store(float* p, Vec v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static Vec set1(float x) {
    const __m256 b = _mm256_set1_ps(x);
    return {b, b};
  }
  static Vec fmadd(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static float hsum(Vec v) { return simd::hsum_f32x8(_mm256_add_ps(v.lo, v.hi)); }
  static constexpr bool kHsum16 = false;  // 16 accumulators would not fit 16 registers
  static void hsum16_scaled(const Vec*, float, float*) {}
  template <KvType T>
  static Vec load_kv(const uint8_t* row, int i) {
    return {load8<T>(row, i), load8<T>(row, i + 8)};
  }
  static Vec load_q4c(const uint8_t* region, int r, int hd, int i) {
    return {load8_q4c(region, r, hd, i), load8_q4c(region, r, hd, i + 8)};
  }
};

}  // namespace

void attn_merge_state(AttnRowState* into, const AttnRowState& part, int dv) {
  const float mn = std::max(into->m, part.m);
  const float a = std::exp(into->m - mn);
  const float b = std::exp(part.m - mn);
  for (int i = 0; i < dv; ++i) into->acc[i] = into->acc[i] * a + part.acc[i] * b;
  into->l = into->l * a + part.l * b;
  into->m = mn;
}

void attn_finish_row(const AttnRowState& st, float sink, float* out, int dv) {
  float l = st.l, a = 1.f;
  if (sink > -INFINITY) {
    const float m = std::max(st.m, sink);
    a = std::exp(st.m - m);
    l = st.l * a + std::exp(sink - m);
  }
  const float inv = l > 0.f ? a / l : 0.f;
  for (int i = 0; i < dv; ++i) out[i] = st.acc[i] * inv;
}

int64_t attention_scratch_floats(const AttentionShape& s, int64_t n_tokens, int n_threads, int64_t max_pos) {
  return attn_tiles::scratch_floats(s, n_tokens, n_threads, max_pos);
}

void attention_ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                      const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                      ThreadPool& pool) {
  attn_tiles::ragged<Avx2Vec16>(s, q, pos, n_tokens, views, view_of_token, out, scratch, pool);
}

}  // namespace ember::avx2
