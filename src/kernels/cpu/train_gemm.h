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

// bf16 products (AVX512_BF16 vdpbf16ps): panels of bf16 pairs of
// consecutive k (A: [kpairs][MR][2], B: [kpairs][NR][2]), each lane
// accumulating both products of its pair per instruction into f32.
// pack_pairs rounds an f32 panel [kc][w] (to nearest even) into that form,
// kc padded to even with zeros.
struct TrainGemmKernelBf16 {
  int mr = 0, nr = 0;
  void (*fn)(int64_t kpairs, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool add) = nullptr;
  void (*pack_pairs)(const float* src, int64_t kc, int w, uint16_t* dst) = nullptr;
};

namespace avx2 {
TrainGemmKernel train_gemm_kernel();  // 6 x 16 (avx2/train_gemm.cpp)
}
namespace avx512 {
TrainGemmKernel train_gemm_kernel();            // 12 x 32 (avx512/train_gemm.cpp)
TrainGemmKernelBf16 train_gemm_kernel_bf16();   // 12 x 32, bf16 pairs (needs AVX512_BF16)
}

}  // namespace ember
