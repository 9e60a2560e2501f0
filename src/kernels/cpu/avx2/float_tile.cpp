// AVX2 tile kernels (VecDotTileFn, kernels/registry.h) for the float weight
// types F32, F16 and BF16 x f32 activations: up to kFloatTileRows weight
// rows x kFloatTileCols tokens per call, in register blocks of one row x 3
// tokens. (Single tokens go to the row kernels: kernels/matmul.cpp.)
//
// Batch invariance: every output is bit-identical to this level's vec_dot
// (avx2/float_dot.cpp), whose arithmetic we replicate step by step: four
// accumulators a0..a3, a_k = fma(w[i + 8k .. +8], x[i + 8k .. +8], a_k) for
// each 32-element step i in order, then the remaining whole 8-element groups
// into a0, then sum = hsum_f32x8((a0 + a1) + (a2 + a3)), then the last n % 8
// elements one at a time as sum += w * x (written as the same expression, so
// it is contracted to the same scalar FMA). A register block holds the 12
// accumulators of one row x 3 tokens; each converted weight vector serves
// the 3 tokens.
#include <immintrin.h>

#include <algorithm>

#include "core/fp16.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/registry.h"

namespace ember::avx2 {
namespace {

constexpr int kGroup = 3;  // tokens per register block

struct F32W {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static float scalar(T v) { return v; }
};
struct F16W {
  using T = uint16_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float scalar(T v) { return f16_to_f32(v); }
};
struct BF16W {
  using T = uint16_t;
  static __m256 load(const T* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float scalar(T v) { return bf16_to_f32(v); }
};

// One weight row x NT tokens (x rows xc[c]): s[c * lds] = dot.
template <class W, int NT>
inline void row_group(int64_t n, const typename W::T* w, const float* const xc[kGroup], float* s, int64_t lds) {
  __m256 a0[NT], a1[NT], a2[NT], a3[NT];
#pragma GCC unroll 3
  for (int c = 0; c < NT; ++c) a0[c] = a1[c] = a2[c] = a3[c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 w0 = W::load(w + i), w1 = W::load(w + i + 8);
    const __m256 w2 = W::load(w + i + 16), w3 = W::load(w + i + 24);
#pragma GCC unroll 3
    for (int c = 0; c < NT; ++c) {
      a0[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xc[c] + i), a0[c]);
      a1[c] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xc[c] + i + 8), a1[c]);
      a2[c] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xc[c] + i + 16), a2[c]);
      a3[c] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xc[c] + i + 24), a3[c]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 w0 = W::load(w + i);
#pragma GCC unroll 3
    for (int c = 0; c < NT; ++c) a0[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xc[c] + i), a0[c]);
  }
#pragma GCC unroll 3
  for (int c = 0; c < NT; ++c) {
    float sum = simd::hsum_f32x8(_mm256_add_ps(_mm256_add_ps(a0[c], a1[c]), _mm256_add_ps(a2[c], a3[c])));
    for (int64_t k = i; k < n; ++k) sum += W::scalar(w[k]) * xc[c][k];
    s[c * lds] = sum;
  }
}

template <class W>
void float_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                const void* x, size_t x_row_bytes, int nr, int nc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int g = 0; g < nc; g += kGroup) {
    const int nt = std::min(kGroup, nc - g);
    const float* xc[kGroup];
    for (int c = 0; c < nt; ++c) xc[c] = reinterpret_cast<const float*>(xb + static_cast<size_t>(g + c) * x_row_bytes);
    for (int r = 0; r < nr; ++r) {
      const auto* wr = reinterpret_cast<const typename W::T*>(wb + static_cast<size_t>(r) * w_row_bytes);
      float* sr = s + g * lds + r;
      switch (nt) {
        case 3: row_group<W, 3>(n, wr, xc, sr, lds); break;
        case 2: row_group<W, 2>(n, wr, xc, sr, lds); break;
        default: row_group<W, 1>(n, wr, xc, sr, lds); break;
      }
    }
  }
}

}  // namespace

void f32_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int nr, int nc) {
  float_tile<F32W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void f16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int nr, int nc) {
  float_tile<F16W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void bf16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  float_tile<BF16W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx2
