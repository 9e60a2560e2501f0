// The Hadamard transform (kernels/hadamard.h): the sizes it accepts, the
// matrix it applies against independent constructions (Sylvester's
// (-1)^popcount(i & j) for powers of two, the Kronecker product with an
// integer-checked Paley matrix otherwise, times the sign diagonal),
// orthonormality and the
// transpose as inverse, and Backend::hadamard at every level of every
// backend bit for bit against the scalar twin, in any batch and on any
// thread count.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "kernels/backend_under_test.h"
#include "kernels/hadamard.h"
#include "kernels/ref/hadamard.h"

namespace ember {
namespace {

using testing_backend::BackendTest;
using testing_backend::gaussian;
using testing_backend::same_all;

const int64_t kSizes[] = {2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 4096};

TEST(Hadamard, AcceptedSizes) {
  for (int64_t n : kSizes) EXPECT_TRUE(hadamard_check(n).is_ok()) << n;
  for (int64_t n : {-4, 0, 1, 3, 5, 6, 10, 28, 56, 112, 72, 36, 8192})
    EXPECT_FALSE(hadamard_check(n).is_ok()) << n;
  EXPECT_NE(hadamard_check(112).message().find("112"), std::string::npos);
}

TEST(Hadamard, PaleyMatricesAreHadamard) {
  for (int m : {12, 20}) {
    const int8_t* h = ref::hadamard_paley(m);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        ASSERT_TRUE(h[i * m + j] == 1 || h[i * m + j] == -1);
        int dot = 0;
        for (int k = 0; k < m; ++k) dot += h[i * m + k] * h[j * m + k];
        ASSERT_EQ(dot, i == j ? m : 0) << "m " << m << " rows " << i << ", " << j;
      }
  }
}

// Column j of the applied matrix: the transform of unit vector e_j.
std::vector<double> applied_matrix(int64_t n, bool transpose) {
  std::vector<double> a(static_cast<size_t>(n * n));
  std::vector<float> e(n);
  for (int64_t j = 0; j < n; ++j) {
    std::fill(e.begin(), e.end(), 0.f);
    e[j] = 1.f;
    ref::hadamard_row(e.data(), n, transpose);
    for (int64_t i = 0; i < n; ++i) a[i * n + j] = e[i];
  }
  return a;
}

TEST(Hadamard, MatrixIsTheKroneckerProductScaled) {
  for (int64_t n : kSizes) {
    if (n > 512) continue;
    SCOPED_TRACE(n);
    const int m = ref::hadamard_odd_factor(n);
    const int8_t* hm = m > 1 ? ref::hadamard_paley(m) : nullptr;
    const double s = 1.0 / std::sqrt(static_cast<double>(n));
    for (bool tr : {false, true}) {
      const std::vector<double> a = applied_matrix(n, tr);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t ai = i / m, bi = i % m, aj = j / m, bj = j % m;
          const int sylvester = std::popcount(static_cast<uint64_t>(ai & aj)) % 2 ? -1 : 1;
          const int small = hm ? (tr ? hm[bj * m + bi] : hm[bi * m + bj]) : 1;
          const int sign = ref::hadamard_sign(tr ? i : j);  // H D, or D H^T
          ASSERT_NEAR(a[i * n + j], sylvester * small * sign * s, 1e-7) << i << ", " << j << (tr ? " transposed" : "");
        }
    }
  }
}

TEST(Hadamard, OrthonormalWithTransposeAsInverse) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const std::vector<float> x = gaussian(n, 2.f, 7 + static_cast<uint32_t>(n));
    std::vector<float> y = x;
    ref::hadamard_row(y.data(), n, false);
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < n; ++i) nx += double(x[i]) * x[i], ny += double(y[i]) * y[i];
    EXPECT_NEAR(ny, nx, 1e-5 * nx);  // norm preserved
    ref::hadamard_row(y.data(), n, true);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << i;
  }
}

TEST(Hadamard, SignsAreMixed) {
  // D is not the identity (nor its negation) on any size, and the all-ones
  // vector (channels alike) is not mapped onto one spike as the plain Walsh
  // matrix would map it.
  for (int64_t n : kSizes) {
    if (n < 8) continue;
    int neg = 0;
    for (int64_t i = 0; i < n; ++i) neg += ref::hadamard_sign(i) < 0;
    EXPECT_GT(neg, n / 8) << n;
    EXPECT_LT(neg, n - n / 8) << n;
    std::vector<float> ones(n, 1.f);
    ref::hadamard_row(ones.data(), n, false);
    float mx = 0;
    for (float v : ones) mx = std::max(mx, std::fabs(v));
    EXPECT_LE(mx, 0.5 * std::sqrt(static_cast<double>(n)) + 1e-5) << n;  // a spike would be sqrt(n)
  }
}

TEST(Hadamard, SpreadsAnOutlier) {
  // The point of the rotation: one large coordinate becomes n coordinates
  // of magnitude |x| / sqrt(n), so a 4-bit group scale is no longer set by it.
  std::vector<float> x(256, 0.f);
  x[17] = 64.f;
  ref::hadamard_row(x.data(), 256, false);
  for (float v : x) EXPECT_FLOAT_EQ(std::fabs(v), 4.f);
}

// BackendTest is instantiated over every backend in backend_ops_test.cpp.
TEST_P(BackendTest, HadamardHeadsBitIdenticalToTheTwin) {
  // Bit-identical at every level (the contract fixes each element's adds
  // and its multiply), in any batch, on 1 or 2 threads.
  for (int head_dim : {8, 16, 64, 80, 96, 128, 256}) {
    for (bool tr : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << (tr ? " transposed" : ""));
      const int n_heads = 3;
      const int64_t n = 9, ld = n_heads * head_dim + 5;
      const std::vector<float> x = gaussian(n * ld, 3.f, 11 + head_dim);
      std::vector<float> want = x, got = x, got1 = x;
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < n_heads; ++h) ref::hadamard_row(want.data() + t * ld + h * head_dim, head_dim, tr);
      backend_->hadamard(got.data(), ld, n, n_heads, head_dim, tr);
      EXPECT_TRUE(same_all(got, want));  // the row padding keeps its bits too
      backend1_->hadamard(got1.data(), ld, n, n_heads, head_dim, tr);
      EXPECT_TRUE(same_all(got1, want));
      std::vector<float> one(x.begin() + 4 * ld, x.begin() + 5 * ld);
      backend_->hadamard(one.data(), ld, 1, n_heads, head_dim, tr);
      EXPECT_TRUE(same_all(one.data(), want.data() + 4 * ld, ld));
    }
  }
}

TEST_P(BackendTest, HadamardRowAtTheActiveLevelMatchesTheTwin) {
  for (int64_t n : kSizes) {
    for (bool tr : {false, true}) {
      const std::vector<float> x = gaussian(n, 1.f, 3 + static_cast<uint32_t>(n));
      std::vector<float> want = x, got = x;
      ref::hadamard_row(want.data(), n, tr);
      hadamard_row(got.data(), n, tr);
      EXPECT_TRUE(same_all(got, want)) << n << (tr ? " transposed" : "");
    }
  }
}

}  // namespace
}  // namespace ember
