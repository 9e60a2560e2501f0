// The AVX-512 micro-kernels of the training GEMM (kernels/cpu/train_gemm.h):
// a 12 x 32 tile of C in 24 zmm accumulators, one broadcast of A and two
// loads of B per k (f32), or per pair of k (bf16 pairs, vdpbf16ps), and the
// bf16 pair packing.
#include <immintrin.h>

#include "kernels/cpu/train_gemm.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside their
// intrinsics (the "undefined" passthrough operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kMr = 12, kNr = 32;

void kernel_12x32(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool add) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(bp + k * kNr), b1 = _mm512_loadu_ps(bp + k * kNr + 16);
    const float* a = ap + k * kMr;
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) {
    float* ci = c + i * ldc;
    if (add) {
      acc[i][0] = _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][0]);
      acc[i][1] = _mm512_add_ps(_mm512_loadu_ps(ci + 16), acc[i][1]);
    }
    _mm512_storeu_ps(ci, acc[i][0]);
    _mm512_storeu_ps(ci + 16, acc[i][1]);
  }
}

// The same tile from bf16 pairs: vdpbf16ps adds both products of a pair to
// an f32 lane.
void kernel_12x32_bf16(int64_t kpairs, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool add) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kpairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + p * 2 * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + p * 2 * kNr + kNr);
    const uint16_t* a = ap + p * 2 * kMr;
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      int32_t pair;
      __builtin_memcpy(&pair, a + 2 * i, 4);
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(pair);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) {
    float* ci = c + i * ldc;
    if (add) {
      acc[i][0] = _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][0]);
      acc[i][1] = _mm512_add_ps(_mm512_loadu_ps(ci + 16), acc[i][1]);
    }
    _mm512_storeu_ps(ci, acc[i][0]);
    _mm512_storeu_ps(ci + 16, acc[i][1]);
  }
}

// f32 panel [kc][w] -> bf16 pairs [ceil(kc / 2)][w][2], rounded to nearest
// even, an odd kc padded with a zero.
void pack_pairs(const float* src, int64_t kc, int w, uint16_t* dst) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t p = 0; 2 * p < kc; ++p) {
    const float* r0 = src + 2 * p * w;
    const float* r1 = 2 * p + 1 < kc ? r0 + w : nullptr;
    uint16_t* d = dst + p * 2 * w;
    for (int i = 0; i < w; i += 16) {
      const __mmask16 m = static_cast<__mmask16>(w - i >= 16 ? 0xffff : (1u << (w - i)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(m, r0 + i);
      const __m512 b = r1 ? _mm512_maskz_loadu_ps(m, r1 + i) : zero;
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a));
      const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(b));
      _mm512_mask_storeu_epi32(d + 2 * i, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

}  // namespace

TrainGemmKernel train_gemm_kernel() { return {kMr, kNr, kernel_12x32}; }
TrainGemmKernelBf16 train_gemm_kernel_bf16() { return {kMr, kNr, kernel_12x32_bf16, pack_pairs}; }

}  // namespace ember::avx512
