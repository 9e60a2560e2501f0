// AVX2/FMA/F16C kernels for float weights: vec_dot of F32/F16/BF16 rows with
// f32 activations, and F16/BF16 -> f32 row conversion. Four independent
// accumulators (32 elements per iteration) hide FMA latency; n need not be
// a multiple of the vector width (scalar tail).
#include <immintrin.h>

#include "core/fp16.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"

namespace ember::avx2 {
namespace {

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// Shared driver: Load(w + i) yields 8 floats of the weight row.
template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
inline float dot_rows(int64_t n, const T* w, const float* x) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Load(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(Load(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(Load(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), a0);
  float sum = simd::hsum_f32x8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum += Scalar(w[i]) * x[i];
  return sum;
}

inline __m256 load_f32x8(const float* p) { return _mm256_loadu_ps(p); }
inline float id_f32(float v) { return v; }
inline float f16_scalar(uint16_t h) { return f16_to_f32(h); }
inline float bf16_scalar(uint16_t h) { return bf16_to_f32(h); }

}  // namespace

void f32_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_rows<float, load_f32x8, id_f32>(n, static_cast<const float*>(w), static_cast<const float*>(x));
}

void f16_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_rows<uint16_t, load_f16x8, f16_scalar>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}

void bf16_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_rows<uint16_t, load_bf16x8, bf16_scalar>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}

void f16_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16x8(x + i));
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

void bf16_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_bf16x8(x + i));
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace ember::avx2
