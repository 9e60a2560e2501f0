// AVX-512 kernels for float weights x f32 activations: F32, F16 (vcvtph2ps)
// and BF16 (widen + shift; vdpbf16ps would need bf16 activations and lose
// precision): vec_dot and vec_dot_rows (decode); the tile is float_tile.cpp.
//
// Arithmetic (the contract of vec_dot, vec_dot_rows and the tile at this
// level, hence batch invariance): one 16-lane accumulator per (row, token),
//   acc = 0;  for each 16-element chunk c in order:  acc = fma(w_c, x_c, acc)
// with the last partial chunk loaded masked (zeros), then
//   result = hsum_f32x8(low 8 lanes + high 8 lanes)
// (f512::reduce in kernels/cpu/simd.h).
// A single dot is then one dependent fma chain: latency-bound, but decode
// (memory-bound) is the only hot path that uses it.
#include <immintrin.h>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside
// _mm512_cvtph_ps and the 512->256 extracts (their "undefined" passthrough
// operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

using f512::BF16W;
using f512::F16W;
using f512::F32W;

template <class W>
float dot(int64_t n, const typename W::T* w, const float* x) {
  __m512 acc = _mm512_setzero_ps();
  const int64_t full = n & ~int64_t{15};
  for (int64_t i = 0; i < full; i += 16) acc = _mm512_fmadd_ps(W::load(w + i), _mm512_loadu_ps(x + i), acc);
  if (full < n) {
    const __mmask16 m = f512::tail_mask(n);
    acc = _mm512_fmadd_ps(W::load(w + full, m), _mm512_maskz_loadu_ps(m, x + full), acc);
  }
  return f512::reduce(acc);
}

// Decode: rows one after another, each one fma chain. Sequential rows stream
// from memory at the prefetchers' best; interleaving even two rows' chains
// (more FMA overlap) measured ~2x slower on a DRAM-resident 262144 x 640 F16
// head, and the chain's latency (4 cycles per 16 elements) still allows
// ~28 GB/s of F16 weights per core, above what one core draws from DRAM.
template <class W>
void rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xf = static_cast<const float*>(x);
  for (int64_t r = 0; r < nr; ++r) s[r] = dot<W>(n, reinterpret_cast<const typename W::T*>(wb + r * w_row_bytes), xf);
}

}  // namespace


void f32_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot<F32W>(n, static_cast<const float*>(w), static_cast<const float*>(x));
}
void f16_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot<F16W>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}
void bf16_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot<BF16W>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}

void f32_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<F32W>(n, s, w, w_row_bytes, x, nr);
}
void f16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<F16W>(n, s, w, w_row_bytes, x, nr);
}
void bf16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<BF16W>(n, s, w, w_row_bytes, x, nr);
}

}  // namespace ember::avx512
