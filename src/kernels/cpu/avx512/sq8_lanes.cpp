// Sparse int8 weights (kSQ8 | C, quant/sparse.h) x Q8_0 activations at the
// AVX-512 level, with VBMI2 (the registry installs this row only where the
// CPU has it): per block of 64 inputs, a masked load of the kept values
// (fault-suppressed: never reads past them) and vpexpandb under the
// block's mask, vpdpbusd multiplies them with |x| (the
// values negated where x < 0), giving the 16 int32 lane sums of the
// contract in kernels/ref/dot.h; one fma per block into 16 f32 lanes.
// Bits equal the scalar twin (ref/sq8_dot.cpp) at every batch size.
#include <immintrin.h>

#include <algorithm>
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

// The contract's reduction: i + 8, i + 4, i + 2, then lanes 0 + 1.
inline float reduce(__m512 acc) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm512_castps512_ps256(_mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(3, 2, 3, 2))));
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_castps256_ps128(_mm256_permute2f128_ps(a8, a8, 1)));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

// One group of R rows (R <= 4) over all blocks. Per row and block: the
// mask, the kept values (a plain 64-byte load where the bytes after them
// are known to be inside the call's rows, else a fault-suppressed masked
// load of popcount bytes: kMasked), vpexpandb under the mask (the register
// form: the memory form is microcoded on Zen 4), the values negated where
// x < 0, vpdpbusd with |x|, the scale product and one fma. The weight
// scales of 8 blocks are converted at once (vcvtph2ps) and spread to the
// lanes by vpermps.
template <int R, bool kMasked>
void group(int64_t nb, float* s, const uint8_t* w0, size_t rb, const BlockQ8_0* xb, lanes::GroupPrefetch& pf) {
  const int8_t* v[R];
  const uint8_t* masks[R];
  const uint8_t* scales[R];
  __m512 acc[R];
  for (int i = 0; i < R; ++i) {
    const SparseRow r = sparse_row(w0 + i * rb, nb * kSparseBlock);
    v[i] = r.values, masks[i] = r.masks, scales[i] = r.scales;
    acc[i] = _mm512_setzero_ps();
  }
  const __m512i lane_half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t c = 0; c < nb; c += 8) {
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - c));
    __m512 dw[R];  // dw[i] lane 2j + h: row i, block c + j, half h
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m256i h = cnt == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[i] + c * 4))
                                 : _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << (2 * cnt)) - 1),
                                                            scales[i] + c * 4);
      dw[i] = _mm512_cvtph_ps(h);
    }
    for (int j = 0; j < cnt; ++j) {
      const int64_t b = c + j;
      pf.step();
      const XBlock x = load_x(xb, b);
      const __m512i idx = _mm512_add_epi32(lane_half, _mm512_set1_epi32(2 * j));
      // Unrolled: the row states stay in registers (rolled, GCC kept acc[]
      // and dw[] on the stack, a store-forwarding chain per block).
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        uint64_t m;
        std::memcpy(&m, masks[i] + b * 8, 8);
        const int pc = std::popcount(m);
        const __m512i packed =
            kMasked ? _mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t{0}, static_cast<unsigned>(pc)), v[i])
                    : _mm512_loadu_si512(v[i]);
        v[i] += pc;
        const __m512i w = _mm512_maskz_expand_epi8(m, packed);
        const __m512i ws = _mm512_mask_sub_epi8(w, x.neg, _mm512_setzero_si512(), w);
        const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x.ax, ws);
        const __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(idx, dw[i]), x.dx);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[i]);
      }
    }
  }
  pf.finish();
  for (int i = 0; i < R; ++i) s[i] = reduce(acc[i]);
}

}  // namespace

void sq8_dot(int64_t n, float* s, const void* w, const void* x) {
  lanes::GroupPrefetch none(nullptr, 0, 0);
  group<1, true>(n / kSparseBlock, s, static_cast<const uint8_t*>(w), 0, static_cast<const BlockQ8_0*>(x), none);
}

}  // namespace ember::avx512
