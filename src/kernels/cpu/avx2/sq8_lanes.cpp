// Sparse int8 weights (kSQ8 | C, quant/sparse.h) x Q8_0 activations at the
// AVX2 level. AVX2 has no expand: each 8 bits of a block's mask index a
// table of pshufb controls that put the next popcount packed values in
// their places (0 elsewhere), 8 inputs at a time. Then pmaddubsw(|x|,
// sign(w, x)) + pmaddwd give the 16 int32 lane sums of the contract in
// kernels/ref/dot.h (two ymm: half 0 and half 1), one fma per half. Bits
// equal the scalar twin (ref/sq8_dot.cpp) at every batch size.
//
// The 8-byte loads read up to 8 bytes past a group's values; the last
// block of a row is expanded from a stack copy, so no read leaves the row.
#include <immintrin.h>

#include <array>
#include <bit>
#include <cstring>

#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"
#include "quant/sparse.h"

namespace ember::avx2 {
namespace {

constexpr int kGroup = 4;  // rows sharing one pass over the activations

// kExpand[m]: pshufb control placing value k at the k-th set bit of m.
constexpr std::array<uint64_t, 256> make_expand() {
  std::array<uint64_t, 256> t{};
  for (int m = 0; m < 256; ++m) {
    uint64_t c = 0;
    int k = 0;
    for (int i = 0; i < 8; ++i) c |= static_cast<uint64_t>((m >> i) & 1 ? k++ : 0x80) << (8 * i);
    t[static_cast<size_t>(m)] = c;
  }
  return t;
}
constexpr std::array<uint64_t, 256> kExpand = make_expand();

// Expands 32 inputs (4 mask bytes) from v; advances v.
inline __m256i expand32(uint32_t m, const int8_t*& v) {
  __m128i g[4];
  for (int i = 0; i < 4; ++i) {
    const uint32_t mb = (m >> (8 * i)) & 0xff;
    const __m128i src = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v));
    g[i] = _mm_shuffle_epi8(src, _mm_cvtsi64_si128(static_cast<int64_t>(kExpand[mb])));
    v += std::popcount(mb);
  }
  return _mm256_set_m128i(_mm_unpacklo_epi64(g[2], g[3]), _mm_unpacklo_epi64(g[0], g[1]));
}

struct RowState {
  const uint8_t* masks;
  const uint8_t* scales;
  const int8_t* values;
  __m256 acc0, acc1;  // lanes 0-7 (half 0), 8-15 (half 1)
};

inline RowState row_state(const void* w, int64_t n) {
  const SparseRow r = sparse_row(w, n);
  return {r.masks, r.scales, r.values, _mm256_setzero_ps(), _mm256_setzero_ps()};
}

inline __m256i lane_sums(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w, x));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

inline void step(RowState& s, const BlockQ8_0* xb, int64_t b, bool last) {
  uint64_t m;
  std::memcpy(&m, s.masks + b * 8, 8);
  const int8_t* v = s.values;
  alignas(16) int8_t tail[kSparseBlock + 8];
  if (last) {  // the row's last kept values: no 8-byte load past them
    std::memcpy(tail, v, static_cast<size_t>(std::popcount(m)));
    v = tail;
  }
  const __m256i w0 = expand32(static_cast<uint32_t>(m), v);
  const __m256i w1 = expand32(static_cast<uint32_t>(m >> 32), v);
  s.values += std::popcount(m);
  const BlockQ8_0& x0 = xb[2 * b];
  const BlockQ8_0& x1 = xb[2 * b + 1];
  const __m256i i0 = lane_sums(w0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qs)));
  const __m256i i1 = lane_sums(w1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qs)));
  f16_t dw[2];
  std::memcpy(dw, s.scales + b * 4, 4);
  const __m256 sc0 = _mm256_set1_ps(f16_to_f32(dw[0]) * f16_to_f32(x0.d));
  const __m256 sc1 = _mm256_set1_ps(f16_to_f32(dw[1]) * f16_to_f32(x1.d));
  s.acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), sc0, s.acc0);
  s.acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), sc1, s.acc1);
}

// The contract's reduction: i + 8, i + 4, i + 2, then lanes 0 + 1.
inline float reduce(const RowState& s) {
  const __m256 a8 = _mm256_add_ps(s.acc0, s.acc1);
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

}  // namespace

void sq8_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const int64_t nb = n / kSparseBlock;
  RowState r = row_state(w, n);
  for (int64_t b = 0; b < nb; ++b) step(r, xb, b, b == nb - 1);
  *s = reduce(r);
}

void sq8_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* wp = static_cast<const uint8_t*>(w);
  const int64_t nb = n / kSparseBlock;
  int64_t r0 = 0;
  for (; r0 + kGroup <= nr; r0 += kGroup) {
    RowState g[kGroup];
    for (int i = 0; i < kGroup; ++i) g[i] = row_state(wp + (r0 + i) * w_row_bytes, n);
    // The next group's rows, one sequential prefetch stream (as avx512/).
    auto pf = lanes::next_group_prefetch<kGroup>(wp, w_row_bytes, r0, nr, nb);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      // Unrolled: the row states stay in registers.
#pragma GCC unroll 4
      for (int i = 0; i < kGroup; ++i) step(g[i], xb, b, b == nb - 1);
    }
    pf.finish();
    for (int i = 0; i < kGroup; ++i) s[r0 + i] = reduce(g[i]);
  }
  for (; r0 < nr; ++r0) sq8_dot(n, s + r0, wp + r0 * w_row_bytes, x);
}

}  // namespace ember::avx2
