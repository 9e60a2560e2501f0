// AVX2 Hadamard transform (the op table's entry at the AVX2 and AVX-512
// levels; contract in kernels/hadamard.h): the sign flips of D as xors of
// the sign bit (the same bits as a negation); stage 1 (the 12 / 20 blocks) is
// the scalar code of kernels/ref/hadamard.cpp; the butterflies of
// stage 2 run 8 lanes at a time (in-register shuffles for the three
// smallest strides of a power-of-two size, whole vectors above), and the
// scale of stage 3 is one multiply per lane. Every element gets the same
// float adds, subtracts and multiply as in the scalar twin, so the result
// is bit-identical to it.
#include <immintrin.h>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/ref/hadamard.h"

namespace ember::avx2 {
namespace {

// Butterflies of stride h (elements) over x[0..n): contiguous runs of h
// paired with the next h.
void butterflies(float* x, int64_t n, int64_t h) {
  for (int64_t g = 0; g < n; g += 2 * h) {
    float* u = x + g;
    float* v = x + g + h;
    int64_t i = 0;
    for (; i + 8 <= h; i += 8) {
      const __m256 a = _mm256_loadu_ps(u + i), b = _mm256_loadu_ps(v + i);
      _mm256_storeu_ps(u + i, _mm256_add_ps(a, b));
      _mm256_storeu_ps(v + i, _mm256_sub_ps(a, b));
    }
    for (; i < h; ++i) {
      const float a = u[i], b = v[i];
      u[i] = a + b;
      v[i] = a - b;
    }
  }
}

// Strides 1, 2, 4 inside each 8-lane vector: lane l of a stage gets
// x[l] + x[l ^ h] where l & h == 0 and x[l ^ h] - x[l] where it is set,
// i.e. (u + v, u - v) of the pair (u, v) = (x[l & ~h], x[l | h]).
void butterflies_8(float* x, int64_t n) {
  const __m256 odd1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
  const __m256 odd2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1));
  const __m256 odd4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
  for (int64_t i = 0; i < n; i += 8) {
    __m256 a = _mm256_loadu_ps(x + i);
    __m256 b = _mm256_permute_ps(a, 0xB1);  // swap neighbours
    a = _mm256_blendv_ps(_mm256_add_ps(a, b), _mm256_sub_ps(b, a), odd1);
    b = _mm256_permute_ps(a, 0x4E);  // swap pairs
    a = _mm256_blendv_ps(_mm256_add_ps(a, b), _mm256_sub_ps(b, a), odd2);
    b = _mm256_permute2f128_ps(a, a, 0x01);  // swap halves
    a = _mm256_blendv_ps(_mm256_add_ps(a, b), _mm256_sub_ps(b, a), odd4);
    _mm256_storeu_ps(x + i, a);
  }
}

// Stages 0 / 4: the sign bits of D xor-ed in (n % 8 == 0 here).
void signs(float* x, int64_t n) {
  const uint32_t* masks = ref::hadamard_sign_masks();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 m = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(masks + i)));
    _mm256_storeu_ps(x + i, _mm256_xor_ps(_mm256_loadu_ps(x + i), m));
  }
}

}  // namespace

void hadamard_row(float* x, int64_t n, bool transpose) {
  const int m = ref::hadamard_odd_factor(n);
  if (n % 8 != 0) {  // 2, 4, 12, 20: the scalar code
    ref::hadamard_row(x, n, transpose);
    return;
  }
  if (!transpose) signs(x, n);
  int64_t h = m;
  if (m > 1) {
    ref::hadamard_blocks(x, n, m, transpose);
  } else {
    butterflies_8(x, n);
    h = 8;
  }
  for (; h < n; h *= 2) butterflies(x, n, h);
  const float s = ref::hadamard_scale(n);
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
  if (transpose) signs(x, n);
}

}  // namespace ember::avx2
