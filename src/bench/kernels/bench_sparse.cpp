// Single-thread decode benchmark of the sparse int8 weights (kSQ8 | C,
// quant/sparse.h) against the dense Q8_0 matrix they were made from: one
// token (the registry's vec_dot_rows) over a rows x n matrix whose
// weights are a fraction S zero (random positions), at every ISA level.
// Runs alternate dense / sparse; prints the median time of each, the
// weight bytes each streamed, and the ratio. The matrix is larger than the
// last-level cache by default (8192 x 2048 x 3 matrices cycled), so the
// figures are memory-bound like decode.
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   build/bench_sparse [rows] [n] [sparsity...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/interleave.h"
#include "kernels/registry.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace {

using namespace ember;

struct Matrix {
  DType type;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 2048;
  std::vector<double> sparsities;
  for (int i = 3; i < argc; ++i) sparsities.push_back(std::atof(argv[i]));
  if (sparsities.empty()) sparsities = {0.5, 0.7};
  constexpr int kCopies = 3;  // matrices cycled, so no run finds its weights in cache
  std::printf("cpu: %s [%s]\nrows=%lld n=%lld, single thread, %d matrices cycled, median of 15 alternating runs\n",
              cpu_features().brand.c_str(), cpu_features_string().c_str(), static_cast<long long>(rows),
              static_cast<long long>(n), kCopies);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> xf(n);
  for (float& v : xf) v = g(rng);
  std::vector<uint8_t> xq(dtype_row_size(DType::kQ8_0, n));
  quantize_row_q8_0_ref(xf.data(), xq.data(), n);
  std::vector<float> out(rows);
  for (double s : sparsities) {
    Matrix dense[kCopies], sparse[kCopies], r16[kCopies];
    for (int c = 0; c < kCopies; ++c) {
      const size_t qrb = dtype_row_size(DType::kQ8_0, n);
      dense[c] = {DType::kQ8_0, qrb, std::vector<uint8_t>(qrb * rows)};
      std::vector<float> row(n);
      for (int64_t r = 0; r < rows; ++r) {
        for (float& v : row) v = u(rng) < s ? 0.f : g(rng);
        quantize_row_q8_0_ref(row.data(), dense[c].bytes.data() + r * qrb, n);
      }
      r16[c] = {DType::kQ8_0_R16, qrb, std::vector<uint8_t>(qrb * rows)};
      interleave_rows(DType::kQ8_0, dense[c].bytes.data(), rows, n, r16[c].bytes.data());
      const int cap = sparse_capacity_q8_0(dense[c].bytes.data(), rows, n);
      const DType st = dtype_sq8(cap);
      sparse[c] = {st, dtype_row_size(st, n), std::vector<uint8_t>(dtype_row_size(st, n) * rows)};
      for (int64_t r = 0; r < rows; ++r)
        (void)sparse_from_q8_0_row(dense[c].bytes.data() + r * qrb, sparse[c].bytes.data() + r * sparse[c].row_bytes,
                                   n, cap);
    }
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      const VecDotRowsFn dr = kernels(DType::kQ8_0, isa).vec_dot_rows;
      const VecDotRowsFn sr = kernels(sparse[0].type, isa).vec_dot_rows;
      const VecDotRowsFn rr = kernels(DType::kQ8_0_R16, isa).vec_dot_rows;
      std::vector<double> td, ts, tr;
      for (int rep = 0; rep < 15; ++rep) {
        for (int which = 0; which < 3; ++which) {
          const Matrix& m = which == 2 ? r16[rep % kCopies] : which ? sparse[rep % kCopies] : dense[rep % kCopies];
          const VecDotRowsFn f = which == 2 ? rr : which ? sr : dr;
          const auto t0 = std::chrono::steady_clock::now();
          f(n, out.data(), m.bytes.data(), m.row_bytes, xq.data(), rows);
          (which == 2 ? tr : which ? ts : td)
              .push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
      }
      const double md = median(td), ms = median(ts), mr = median(tr);
      std::printf("sparsity %.2f %-7s q8_0 %7.3f ms, q8_0_r16 %7.3f ms (%6.1f MB)  %s %7.3f ms (%6.1f MB, %5.2f GB/s)  "
                  "speedup vs q8_0 %.2fx, vs q8_0_r16 %.2fx; bytes %.2fx\n",
                  s, isa_name(isa), md * 1e3, mr * 1e3, dense[0].bytes.size() / 1e6, dtype_name(sparse[0].type),
                  ms * 1e3, sparse[0].bytes.size() / 1e6, sparse[0].bytes.size() / ms * 1e-9, md / ms, mr / ms,
                  static_cast<double>(dense[0].bytes.size()) / sparse[0].bytes.size());
    }
  }
  return 0;
}
