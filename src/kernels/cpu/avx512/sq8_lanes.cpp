// Sparse int8 weights (kSQ8 | C, quant/sparse.h) x Q8_0 activations at the
// AVX-512 level, with VBMI2 (the registry installs this row only where the
// CPU has it): per block of 64 inputs, a masked load of the kept values
// (fault-suppressed: never reads past them) and vpexpandb under the
// block's mask, vpdpbusd multiplies them with |x| (the
// values negated where x < 0), giving the 16 int32 lane sums of the
// contract in kernels/ref/dot.h; one fma per block into 16 f32 lanes.
// Bits equal the scalar twin (ref/sq8_dot.cpp) at every batch size.
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"
#include "quant/sparse.h"

namespace ember::avx512 {
namespace {

constexpr int kGroup = 4;  // rows sharing one pass over the activations

// The activation block pair 2b, 2b+1 (Q8_0): |x| as u8, the lanes where
// x < 0, and the scales spread over the 16 f32 lanes [dx0 x 8, dx1 x 8].
struct XBlock {
  __m512i ax;
  __mmask64 neg;
  __m512 dx;
};

inline XBlock load_x(const BlockQ8_0* xb, int64_t b) {
  const BlockQ8_0& x0 = xb[2 * b];
  const BlockQ8_0& x1 = xb[2 * b + 1];
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qs));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qs));
  const __m512i x = _mm512_mask_broadcast_i64x4(_mm512_broadcast_i64x4(lo), 0xF0, hi);
  const __m512 dx = _mm512_mask_mov_ps(_mm512_set1_ps(f16_to_f32(x0.d)), 0xFF00, _mm512_set1_ps(f16_to_f32(x1.d)));
  return {_mm512_abs_epi8(x), _mm512_movepi8_mask(x), dx};
}

// One row's running state.
struct RowState {
  const uint8_t* masks;
  const uint8_t* scales;
  const int8_t* values;
  __m512 acc;
};

inline RowState row_state(const void* w, int64_t n) {
  const SparseRow r = sparse_row(w, n);
  return {r.masks, r.scales, r.values, _mm512_setzero_ps()};
}

// Lane l of the result holds dw[l / 8] (the block's two f16 scales,
// converted by vcvtph2ps: exact, like f16_to_f32).
inline __m512 weight_scales(const uint8_t* p) {
  uint32_t two;
  std::memcpy(&two, p, 4);
  const __m512 d = _mm512_broadcast_f32x2(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(two))));  // d0 d1 d0 d1 ..
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), d);
}

inline void step(RowState& s, const XBlock& x, int64_t b) {
  uint64_t m;
  std::memcpy(&m, s.masks + b * 8, 8);
  // Masked load of the popcount values (fault-suppressed), then the
  // register form of vpexpandb: the memory form is microcoded on Zen 4.
  const int pc = std::popcount(m);
  const __m512i packed = _mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t{0}, static_cast<unsigned>(pc)), s.values);
  const __m512i w = _mm512_maskz_expand_epi8(m, packed);
  s.values += pc;
  const __m512i ws = _mm512_mask_sub_epi8(w, x.neg, _mm512_setzero_si512(), w);
  const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x.ax, ws);
  const __m512 sc = _mm512_mul_ps(weight_scales(s.scales + b * 4), x.dx);
  s.acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, s.acc);
}

// The contract's reduction: i + 8, i + 4, i + 2, then lanes 0 + 1.
inline float reduce(__m512 acc) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm512_castps512_ps256(_mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(3, 2, 3, 2))));
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_castps256_ps128(_mm256_permute2f128_ps(a8, a8, 1)));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

}  // namespace

void sq8_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  RowState r = row_state(w, n);
  for (int64_t b = 0; b < n / kSparseBlock; ++b) step(r, load_x(xb, b), b);
  *s = reduce(r.acc);
}

void sq8_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* wp = static_cast<const uint8_t*>(w);
  const int64_t nb = n / kSparseBlock;
  int64_t r0 = 0;
  for (; r0 + kGroup <= nr; r0 += kGroup) {
    RowState g[kGroup];
    for (int i = 0; i < kGroup; ++i) g[i] = row_state(wp + (r0 + i) * w_row_bytes, n);
    // The next group's rows, one sequential prefetch stream (the hardware
    // prefetchers do not follow 4 rows x 3 regions: without it one thread
    // drew under 1 GB/s from DRAM).
    auto pf = lanes::next_group_prefetch<kGroup>(wp, w_row_bytes, r0, nr, nb);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      const XBlock xv = load_x(xb, b);
      for (int i = 0; i < kGroup; ++i) step(g[i], xv, b);
    }
    pf.finish();
    for (int i = 0; i < kGroup; ++i) s[r0 + i] = reduce(g[i].acc);
  }
  for (; r0 < nr; ++r0) sq8_dot(n, s + r0, wp + r0 * w_row_bytes, x);
}

}  // namespace ember::avx512
