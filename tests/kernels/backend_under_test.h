// Test harness of the table-driven backend op tests (backend_ops_test.cpp,
// backend_attention_test.cpp), in the manner of ggml's test-backend-ops:
// every Backend op (kernels/backend.h) of every backend, at every level that
// backend runs at, against the scalar references of kernels/ref/.
//
// A backend plugs in with one entry in backends_under_test(): a name, the
// ISA level to set while it runs (the CPU backend reads the active level at
// each call), whether that level *is* the reference (then every result must
// equal the reference bit for bit, not just within the op's tolerance), and
// a factory. The tests hand the ops host memory; a device backend (a future
// kernels/cuda/) enters through a factory whose Backend stages host buffers
// to the device and back, and is held to the same references and
// tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"

namespace ember::testing_backend {

struct BackendUnderTest {
  std::string name;
  Isa level = Isa::kScalar;
  bool reference_level = false;  // results must equal the references bit for bit
  std::function<std::unique_ptr<Backend>(ThreadPool&)> make;
};

inline std::vector<BackendUnderTest> backends_under_test() {
  std::vector<BackendUnderTest> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa <= cpu_max_isa())
      v.push_back({std::string("cpu_") + isa_name(isa), isa, isa == Isa::kScalar, make_cpu_backend});
  // A second backend adds its entry here, e.g. {"cuda", Isa::kScalar, false, make_cuda_backend}.
  return v;
}

inline void PrintTo(const BackendUnderTest& b, std::ostream* os) { *os << b.name; }

inline std::string backend_test_name(const ::testing::TestParamInfo<BackendUnderTest>& info) {
  return info.param.name;
}

// Runs each test with the backend's level active, on a 2-thread and a
// 1-thread pool (results must not depend on the thread count).
class BackendTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_active_isa(GetParam().level);
    backend_ = GetParam().make(pool_);
    backend1_ = GetParam().make(pool1_);
  }
  void TearDown() override { set_active_isa(saved_); }
  bool exact() const { return GetParam().reference_level; }

  ThreadPool pool_{2};
  ThreadPool pool1_{1};
  std::unique_ptr<Backend> backend_;   // 2 threads
  std::unique_ptr<Backend> backend1_;  // 1 thread

 private:
  Isa saved_ = Isa::kScalar;
};

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

constexpr double kUlp = 1.0 / (1 << 24);  // 2^-24: a float's relative rounding

// got[i] against want[i] for i < n: bit-identical when `exact`, else within
// tol(i) (NaNs never pass a tolerance).
template <class Tol>
::testing::AssertionResult near_all(const float* got, const float* want, int64_t n, bool exact, Tol tol) {
  for (int64_t i = 0; i < n; ++i) {
    if (exact ? same_bits(got[i], want[i]) : std::fabs(static_cast<double>(got[i]) - want[i]) <= tol(i)) continue;
    return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", reference " << want[i]
                                         << (exact ? " (must be bit-identical)" : "") << ", tolerance "
                                         << (exact ? 0.0 : tol(i));
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult same_all(const float* got, const float* want, int64_t n) {
  return near_all(got, want, n, true, [](int64_t) { return 0.0; });
}
inline ::testing::AssertionResult same_all(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  return same_all(got.data(), want.data(), static_cast<int64_t>(got.size()));
}

inline std::vector<float> gaussian(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

}  // namespace ember::testing_backend

namespace ember {
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }
}  // namespace ember
