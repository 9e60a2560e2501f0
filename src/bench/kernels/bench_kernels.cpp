// Single-thread throughput benchmark for the registry's vec_dot kernels:
// rows x n weight matrix (default 4096 x 4096) times one activation row, at
// every ISA level this CPU supports, and the decode rows kernel (vec_dot_rows)
// over all rows in one call. Prints GB/s of weight bytes streamed.
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   cmake -S . -B build-bench -G Ninja -DEMBER_BUILD_BENCH=ON && ninja -C build-bench bench_kernels
//   build-bench/bench_kernels [rows] [n] [type]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/registry.h"

namespace {

using namespace ember;

// Random quant bytes; every 2-byte-aligned f16 field gets a small finite
// value so no NaN/Inf scale slows the FP units (contents do not matter for
// throughput, only that they are valid numbers).
void fill_weights(DType t, std::vector<uint8_t>& buf, std::mt19937& rng) {
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  if (t == DType::kF32) {
    auto* f = reinterpret_cast<float*>(buf.data());
    for (size_t i = 0; i < buf.size() / 4; ++i) f[i] = static_cast<float>(rng() % 1000) * 1e-3f;
    return;
  }
  // Clearing bit 14 of each f16 keeps the exponent < 16: finite and small.
  auto* h = reinterpret_cast<uint16_t*>(buf.data());
  for (size_t i = 0; i < buf.size() / 2; ++i) h[i] &= 0xBFFF;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 4096;
  const char* only = argc > 3 ? argv[3] : nullptr;
  std::printf("cpu: %s [%s]\nrows=%lld n=%lld, single thread\n", cpu_features().brand.c_str(),
              cpu_features_string().c_str(), static_cast<long long>(rows), static_cast<long long>(n));
  const DType types[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_1, DType::kQ5_1, DType::kQ2_K,
                         DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16,
                         DType::kF32};
  std::mt19937 rng(1);
  std::vector<float> xf(static_cast<size_t>(n));
  std::normal_distribution<float> g;
  for (auto& v : xf) v = g(rng);
  std::vector<float> out(static_cast<size_t>(rows));
  for (DType t : types) {
    if (only && std::strcmp(only, dtype_name(t)) != 0) continue;
    const size_t row_bytes = dtype_row_size(t, n);
    std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
    fill_weights(t, w, rng);
    const DType xt = vec_dot_type(t);
    std::vector<uint8_t> x(dtype_row_size(xt, n));
    kernels(xt, Isa::kScalar).quantize_row(xf.data(), x.data(), n);
    std::printf("%-6s", dtype_name(t));
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      const VecDotFn dot = kernels(t, isa).vec_dot;
      double best = 1e30;
      const int reps = isa == Isa::kScalar ? 2 : 12;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < rows; ++i) dot(n, &out[static_cast<size_t>(i)], w.data() + static_cast<size_t>(i) * row_bytes, x.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s < best) best = s;
      }
      std::printf("  %s %7.2f GB/s (%6.3f ms)", isa_name(isa), static_cast<double>(w.size()) / best * 1e-9, best * 1e3);
    }
    // Decode over all rows in one call (the one-token path of the matmul
    // driver): every level's rows kernel.
    for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
      if (isa > cpu_max_isa() || !kernels(t, isa).vec_dot_rows) continue;
      const auto rows_fn = kernels(t, isa).vec_dot_rows;
      double best = 1e30;
      for (int r = 0; r < 12; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        rows_fn(n, out.data(), w.data(), row_bytes, x.data(), rows);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s < best) best = s;
      }
      std::printf("  rows-%s %7.2f GB/s (%6.3f ms)", isa_name(isa), static_cast<double>(w.size()) / best * 1e-9,
                  best * 1e3);
    }
    std::printf("\n");
  }
  return 0;
}
