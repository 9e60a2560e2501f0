// Single-thread benchmark of the sparse weights (kSQ8 | C from Q8_0, kSQ4 |
// C from Q4_0; quant/sparse.h) against the dense matrices they were made
// from, over a rows x n matrix whose weights are a fraction S zero (random
// positions), at every ISA level:
//   decode   one token, the registry's vec_dot_rows (memory-bound: three
//            matrices cycled, larger than the last-level cache by default);
//            for Q8_0 also against its interleaved form Q8_0_R16, the layout
//            a dense Q8_0 model decodes from (kernels/interleave.h);
//   prefill  T tokens (default 64; 0: skipped) through the matmul driver on
//            one thread (the dense types' token-lane / tile kernels against
//            the sparse tile, which expands each row block once for all its
//            tokens).
// Runs alternate dense / sparse; times are the thread's CPU time (a shared
// machine's other processes do not count); prints the median of each, the
// bytes each streamed, and the ratios.
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   build/bench_sparse [rows] [n] [tokens] [sparsity...]
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/interleave.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace {

using namespace ember;

struct Matrix {
  DType type;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  TensorView view(int64_t rows, int64_t n) const {
    TensorView w;
    w.type = type;
    w.n_dims = 2;
    w.ne[0] = n;
    w.ne[1] = rows;
    w.data = bytes.data();
    w.nbytes = bytes.size();
    return w;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

template <typename F>
double seconds(F&& f) {
  const double t0 = thread_seconds();
  f();
  return thread_seconds() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int64_t tokens = argc > 3 ? std::atoll(argv[3]) : 64;
  std::vector<double> sparsities;
  for (int i = 4; i < argc; ++i) sparsities.push_back(std::atof(argv[i]));
  if (sparsities.empty()) sparsities = {0.5, 0.7};
  constexpr int kCopies = 3;  // matrices cycled, so no decode run finds its weights in cache
  constexpr int kReps = 15;
  std::printf("cpu: %s [%s]\nrows=%lld n=%lld, prefill %lld tokens, single thread, %d matrices cycled, median of %d "
              "alternating runs\n",
              cpu_features().brand.c_str(), cpu_features_string().c_str(), static_cast<long long>(rows),
              static_cast<long long>(n), static_cast<long long>(tokens), kCopies, kReps);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> xf(std::max<int64_t>(1, tokens) * n);
  for (float& v : xf) v = g(rng);
  std::vector<uint8_t> xq(dtype_row_size(DType::kQ8_0, n));
  quantize_row_q8_0_ref(xf.data(), xq.data(), n);
  std::vector<float> out(rows * std::max<int64_t>(1, tokens));
  ThreadPool pool(1);
  MatmulScratch scratch;
  const Isa saved = active_isa();
  for (double s : sparsities)
    for (DType dt : {DType::kQ8_0, DType::kQ4_0}) {
      Matrix dense[kCopies], sparse[kCopies], r16[kCopies];
      const bool interleaved = dt == DType::kQ8_0 && rows % 16 == 0;
      const size_t qrb = dtype_row_size(dt, n);
      for (int c = 0; c < kCopies; ++c) {
        dense[c] = {dt, qrb, std::vector<uint8_t>(qrb * rows)};
        std::vector<float> row(n);
        for (int64_t r = 0; r < rows; ++r) {
          for (float& v : row) v = u(rng) < s ? 0.f : g(rng);
          quantize_row_ref(dt, row.data(), dense[c].bytes.data() + r * qrb, n);
        }
        auto st = sparse_type_for(dt, dense[c].bytes.data(), rows, n);
        if (!st) return std::fprintf(stderr, "%s\n", st.status().message().c_str()), 1;
        const size_t rb = dtype_row_size(*st, n);
        sparse[c] = {*st, rb, std::vector<uint8_t>(rb * rows)};
        for (int64_t r = 0; r < rows; ++r)
          (void)sparse_from_dense_row(*st, dense[c].bytes.data() + r * qrb, sparse[c].bytes.data() + r * rb, n);
        if (interleaved) {
          r16[c] = {interleaved_type(dt), qrb, std::vector<uint8_t>(qrb * rows)};
          interleave_rows(dt, dense[c].bytes.data(), rows, n, r16[c].bytes.data());
        }
      }
      const double bytes_ratio = static_cast<double>(dense[0].bytes.size()) / sparse[0].bytes.size();
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        if (isa > cpu_max_isa()) continue;
        const VecDotRowsFn dr = kernels(dt, isa).vec_dot_rows;
        const VecDotRowsFn sr = kernels(sparse[0].type, isa).vec_dot_rows;
        const VecDotRowsFn ir = interleaved ? kernels(r16[0].type, isa).vec_dot_rows : nullptr;
        std::vector<double> td, ts, ti, pd, ps;
        for (int rep = 0; rep < kReps; ++rep) {
          const Matrix& d = dense[rep % kCopies];
          const Matrix& sp = sparse[rep % kCopies];
          td.push_back(seconds([&] { dr(n, out.data(), d.bytes.data(), d.row_bytes, xq.data(), rows); }));
          ts.push_back(seconds([&] { sr(n, out.data(), sp.bytes.data(), sp.row_bytes, xq.data(), rows); }));
          if (ir) {
            const Matrix& i16 = r16[rep % kCopies];
            ti.push_back(seconds([&] { ir(n, out.data(), i16.bytes.data(), i16.row_bytes, xq.data(), rows); }));
          }
        }
        set_active_isa(isa);
        const TensorView dv = dense[0].view(rows, n), sv = sparse[0].view(rows, n);
        for (int rep = 0; rep < (tokens > 0 ? 5 : 0); ++rep) {
          pd.push_back(seconds([&] { matmul(dv, xf.data(), n, out.data(), rows, tokens, pool, scratch); }));
          ps.push_back(seconds([&] { matmul(sv, xf.data(), n, out.data(), rows, tokens, pool, scratch); }));
        }
        set_active_isa(saved);
        const double md = median(td), ms = median(ts);
        if (ir)
          std::printf("sparsity %.2f %-7s decode %s_r16 %7.3f ms  %s %7.3f ms  %.2fx\n", s, isa_name(isa),
                      dtype_name(dt), median(ti) * 1e3, dtype_name(sparse[0].type), ms * 1e3, median(ti) / ms);
        if (tokens == 0) {
          std::printf("sparsity %.2f %-7s decode %s %7.3f ms  %s %7.3f ms (%6.1f MB, %5.2f GB/s) %.2fx | bytes %.2fx\n",
                      s, isa_name(isa), dtype_name(dt), md * 1e3, dtype_name(sparse[0].type), ms * 1e3,
                      sparse[0].bytes.size() / 1e6, sparse[0].bytes.size() / ms * 1e-9, md / ms, bytes_ratio);
          continue;
        }
        const double mpd = median(pd), mps = median(ps);
        std::printf("sparsity %.2f %-7s decode %s %7.3f ms  %s %7.3f ms (%6.1f MB, %5.2f GB/s) %.2fx | prefill %s "
                    "%8.2f ms  sparse %8.2f ms %.2fx (%.1f / %.1f GMAC/s) | bytes %.2fx\n",
                    s, isa_name(isa), dtype_name(dt), md * 1e3, dtype_name(sparse[0].type), ms * 1e3,
                    sparse[0].bytes.size() / 1e6, sparse[0].bytes.size() / ms * 1e-9, md / ms, dtype_name(dt),
                    mpd * 1e3, mps * 1e3, mpd / mps, rows * n * tokens / mpd * 1e-9, rows * n * tokens / mps * 1e-9,
                    bytes_ratio);
      }
    }
  return 0;
}
