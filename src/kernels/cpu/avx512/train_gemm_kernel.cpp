// The AVX-512 micro-kernel of the training GEMM (kernels/cpu/train_gemm.h):
// a 12 x 32 tile of C in 24 zmm accumulators, one broadcast of A and two
// loads of B per k.
#include <immintrin.h>

#include "kernels/cpu/train_gemm.h"

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

}  // namespace

TrainGemmKernel train_gemm_kernel() { return {kMr, kNr, kernel_12x32}; }

}  // namespace ember::avx512
