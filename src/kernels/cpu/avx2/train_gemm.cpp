// The AVX2 micro-kernel of the training GEMM (kernels/cpu/train_gemm.h): a
// 6 x 16 tile of C in 12 ymm accumulators, one broadcast of A and two loads
// of B per k.
#include <immintrin.h>

#include "kernels/cpu/train_gemm.h"

namespace ember::avx2 {
namespace {

constexpr int kMr = 6, kNr = 16;

void kernel_6x16(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool add) {
  __m256 acc[kMr][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(bp + k * kNr), b1 = _mm256_loadu_ps(bp + k * kNr + 8);
    const float* a = ap + k * kMr;
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    float* ci = c + i * ldc;
    if (add) {
      acc[i][0] = _mm256_add_ps(_mm256_loadu_ps(ci), acc[i][0]);
      acc[i][1] = _mm256_add_ps(_mm256_loadu_ps(ci + 8), acc[i][1]);
    }
    _mm256_storeu_ps(ci, acc[i][0]);
    _mm256_storeu_ps(ci + 8, acc[i][1]);
  }
}

}  // namespace

TrainGemmKernel train_gemm_kernel() { return {kMr, kNr, kernel_6x16}; }

}  // namespace ember::avx2
