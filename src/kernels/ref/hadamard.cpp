// Scalar Hadamard transform and its shared pieces; see hadamard.h and
// kernels/hadamard.h for the contract.
#include "kernels/ref/hadamard.h"

#include <array>
#include <cstdint>
#include <cmath>

#include "core/check.h"
#include "kernels/hadamard.h"

namespace ember {
namespace ref {
namespace {

// Paley-I Hadamard matrix of order q + 1 for a prime q = 3 mod 4.
template <int M>
std::array<int8_t, M * M> paley() {
  constexpr int q = M - 1;
  std::array<int, q> chi{};  // quadratic character mod q
  for (int a = 0; a < q; ++a) chi[a] = -1;
  chi[0] = 0;
  for (int a = 1; a < q; ++a) chi[(a * a) % q] = 1;
  std::array<int8_t, M * M> h{};
  for (int j = 0; j < M; ++j) h[j] = 1;  // row 0: all ones
  for (int i = 1; i < M; ++i) {
    h[i * M] = -1;
    for (int j = 1; j < M; ++j) {
      const int jac = chi[((j - 1) - (i - 1) + q) % q];  // Q[i-1][j-1] = chi(j - i)
      h[i * M + j] = static_cast<int8_t>(i == j ? 1 : jac);
    }
  }
  return h;
}

}  // namespace

int hadamard_odd_factor(int64_t n) {
  int64_t m = n;
  while (m % 2 == 0 && m > 1) m /= 2;
  if (m == 3) return 12;   // 2^k * 3 with k >= 2: 12 * 2^(k-2)
  if (m == 5) return 20;   // 2^k * 5 with k >= 2: 20 * 2^(k-2)
  return static_cast<int>(m);
}

const int8_t* hadamard_paley(int m) {
  static const std::array<int8_t, 12 * 12> h12 = paley<12>();
  static const std::array<int8_t, 20 * 20> h20 = paley<20>();
  EMBER_CHECK(m == 12 || m == 20);
  return m == 12 ? h12.data() : h20.data();
}

void hadamard_blocks(float* x, int64_t n, int m, bool transpose) {
  const int8_t* h = hadamard_paley(m);
  float y[20];
  for (int64_t a = 0; a < n; a += m) {
    float* xa = x + a;
    for (int b = 0; b < m; ++b) {
      float acc = 0.f;
      for (int j = 0; j < m; ++j) {
        const int8_t s = transpose ? h[j * m + b] : h[b * m + j];
        acc = j == 0 ? (s > 0 ? xa[0] : -xa[0]) : (s > 0 ? acc + xa[j] : acc - xa[j]);
      }
      y[b] = acc;
    }
    for (int b = 0; b < m; ++b) xa[b] = y[b];
  }
}

float hadamard_scale(int64_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); }

const uint32_t* hadamard_sign_masks() {
  static const std::array<uint32_t, kHadamardMaxSize> masks = [] {
    std::array<uint32_t, kHadamardMaxSize> m{};
    for (int64_t i = 0; i < kHadamardMaxSize; ++i) m[i] = hadamard_sign(i) < 0 ? 0x80000000u : 0u;
    return m;
  }();
  return masks.data();
}

void hadamard_signs(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (hadamard_sign(i) < 0) x[i] = -x[i];
}

void hadamard_row(float* x, int64_t n, bool transpose) {
  if (!transpose) hadamard_signs(x, n);
  const int m = hadamard_odd_factor(n);
  if (m > 1) hadamard_blocks(x, n, m, transpose);
  for (int64_t h = m; h < n; h *= 2)  // h in elements: 2^j blocks of m
    for (int64_t g = 0; g < n; g += 2 * h)
      for (int64_t i = g; i < g + h; ++i) {
        const float u = x[i], v = x[i + h];
        x[i] = u + v;
        x[i + h] = u - v;
      }
  const float s = hadamard_scale(n);
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
  if (transpose) hadamard_signs(x, n);
}

}  // namespace ref

Status hadamard_check(int64_t n) {
  if (n < 2 || n > kHadamardMaxSize)
    return Status::errorf("Hadamard rotation of size {}: need 2 to {}", n, kHadamardMaxSize);
  const int m = ref::hadamard_odd_factor(n);
  if ((m != 1 && m != 12 && m != 20) || n % m != 0)
    return Status::errorf("Hadamard rotation of size {}: not 2^k, 12 * 2^k or 20 * 2^k", n);
  return Status::ok();
}

}  // namespace ember
