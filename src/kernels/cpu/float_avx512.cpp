// AVX-512 kernels for float weights x f32 activations: F32, F16 (vcvtph2ps)
// and BF16 (widen + shift; vdpbf16ps would need bf16 activations and lose
// precision). Four 16-lane accumulators; masked loads handle any n.
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_util.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside
// _mm512_cvtph_ps and the 512->256 extracts (their "undefined" passthrough
// operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

inline __m512 load_f32(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_bf16(const uint16_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

inline __m512 load_f32_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load_f16_tail(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
inline __m512 load_bf16_tail(const uint16_t* p, __mmask16 m) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

template <typename T, __m512 (*Load)(const T*), __m512 (*LoadTail)(const T*, __mmask16)>
inline float dot_rows(int64_t n, const T* w, const float* x) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(Load(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(Load(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    a2 = _mm512_fmadd_ps(Load(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
    a3 = _mm512_fmadd_ps(Load(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(Load(w + i), _mm512_loadu_ps(x + i), a0);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    a1 = _mm512_fmadd_ps(LoadTail(w + i, m), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  const __m512 t = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
  return simd::hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1)));
}

}  // namespace

void vec_dot_f32(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_rows<float, load_f32, load_f32_tail>(n, static_cast<const float*>(w), static_cast<const float*>(x));
}

void vec_dot_f16(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_rows<uint16_t, load_f16, load_f16_tail>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}

void vec_dot_bf16(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_rows<uint16_t, load_bf16, load_bf16_tail>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}

}  // namespace ember::avx512
