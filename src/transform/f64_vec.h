// Double-precision vector loops for the calibration transforms (GPTQ's and
// SparseGPT's inverse Hessian and error feedback), written with the GCC /
// Clang vector extension so they vectorize at -O2 on every ISA the compiler
// targets (the generic code's baseline: 4 doubles per AVX2 register).
// Arithmetic contract:
//   f64_sub_scaled / f64_add_scaled: y[k] -/+= a * x[k], each element by
//     the same expression in the vector body and the scalar tail, which the
//     compiler contracts alike (with the build's default -ffp-contract=fast
//     and FMA in the baseline: one fused multiply-add each), so the results
//     are bit-identical to the plain scalar loop compiled the same way,
//     whatever the vector width;
//   f64_dot: sum of a[k] * b[k] in a fixed order (16 partial sums over k mod
//     16, combined pairwise, then the tail k >= 16 * floor(n / 16) in
//     order): deterministic, but not the scalar left-to-right sum.
#pragma once

#include <cstdint>
#include <cstring>

namespace ember {

using F64x4 = double __attribute__((vector_size(32)));

inline F64x4 f64x4_load(const double* p) {
  F64x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void f64x4_store(double* p, F64x4 v) { std::memcpy(p, &v, sizeof(v)); }

// y[0..n) -= a * x[0..n)
inline void f64_sub_scaled(double* y, double a, const double* x, int64_t n) {
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) f64x4_store(y + k, f64x4_load(y + k) - a * f64x4_load(x + k));
  for (; k < n; ++k) y[k] -= a * x[k];
}

// y[0..n) += a * x[0..n)
inline void f64_add_scaled(double* y, double a, const double* x, int64_t n) {
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) f64x4_store(y + k, f64x4_load(y + k) + a * f64x4_load(x + k));
  for (; k < n; ++k) y[k] += a * x[k];
}

// sum over k < n of a[k] * b[k] (the order in the contract above).
inline double f64_dot(const double* a, const double* b, int64_t n) {
  F64x4 s0{}, s1{}, s2{}, s3{};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    s0 += f64x4_load(a + k) * f64x4_load(b + k);
    s1 += f64x4_load(a + k + 4) * f64x4_load(b + k + 4);
    s2 += f64x4_load(a + k + 8) * f64x4_load(b + k + 8);
    s3 += f64x4_load(a + k + 12) * f64x4_load(b + k + 12);
  }
  const F64x4 s = (s0 + s1) + (s2 + s3);
  double r = (s[0] + s[1]) + (s[2] + s[3]);
  for (; k < n; ++k) r += a[k] * b[k];
  return r;
}

}  // namespace ember
