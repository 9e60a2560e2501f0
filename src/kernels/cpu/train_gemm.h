// Micro-kernels of the training GEMM (kernels/train.h train_gemm; driver in
// train_gemm.cpp): one MR x NR tile of C from packed panels, the
// accumulators started at 0 and summed over k in order, then stored (add:
// C += acc, else C = acc). A panel holds MR values per k (Ap[k * MR + i]), a
// B panel NR per k (Bp[k * NR + j]). Internal to the CPU backend.
#pragma once

#include <cstdint>

namespace ember {

struct TrainGemmKernel {
  int mr = 0, nr = 0;
  void (*fn)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool add) = nullptr;
};

namespace avx2 {
TrainGemmKernel train_gemm_kernel();  // 6 x 16 (avx2/train_gemm_kernel.cpp)
}
namespace avx512 {
TrainGemmKernel train_gemm_kernel();  // 12 x 32 (avx512/train_gemm_kernel.cpp)
}

}  // namespace ember
