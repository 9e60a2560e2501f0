// Prefill / decode matmul throughput: the matmul driver on a rows x n weight
// matrix of each type times `tokens` activation rows, with the tile kernel
// (when the type has one) and with the plain vec_dot loop, at the active ISA
// level. Prints GMAC/s (multiply-accumulates of the weight matrix per second
// of process CPU time, so divide by the thread count for per-core figures).
// Then the multi-target case of Backend::matmul: the Q/K/V and gate/up
// matrices of Gemma 3 270M Q4_K_M (Q5_0, Q5_0, Q8_0; Q5_0 x 2) with n inputs
// and, when n is a multiple of 256, of Qwen3-0.6B Q4_K_M (Q4_K, Q4_K, Q6_K;
// Q4_K x 2; n = 1024 is its shape), one call per matrix against one shared
// call (activations converted once, one parallel section), timed
// alternately.
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   cmake -S . -B build-bench -G Ninja -DEMBER_BUILD_BENCH=ON && ninja -C build-bench bench_gemm
//   build-bench/bench_gemm [rows] [n] [tokens] [threads] [type | multi]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/interleave.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"
#include "quant/quantize.h"

namespace {

using namespace ember;

// Process CPU time: on a shared machine wall time counts other jobs' slices.
// With several threads this sums their CPU time (spinning included).
double seconds_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Median of `reps` timings of f().
template <typename F>
double time_median(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = seconds_now();
    f();
    t.push_back(seconds_now() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A rows x n matrix of type t quantized from gaussian rows (its bytes in buf).
TensorView random_matrix(DType t, int64_t rows, int64_t n, std::vector<uint8_t>& buf, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const size_t rb = dtype_row_size(t, n);
  buf.resize(rb * static_cast<size_t>(rows));
  std::vector<float> wf(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : wf) v = gauss(rng);
    if (t == DType::kF32) {
      std::memcpy(buf.data() + rb * r, wf.data(), rb);
    } else {
      quantize_row_ref(t, wf.data(), buf.data() + rb * r, n);
    }
  }
  TensorView tv;
  tv.type = t;
  tv.n_dims = 2;
  tv.ne[0] = n;
  tv.ne[1] = rows;
  tv.data = buf.data();
  tv.nbytes = buf.size();
  return tv;
}

// One call per matrix against one multi-target Backend::matmul, alternating.
void bench_multi(const char* name, const std::vector<std::pair<DType, int64_t>>& mats, int64_t n, int64_t tokens,
                 ThreadPool& pool, std::mt19937& rng) {
  std::vector<std::vector<uint8_t>> bufs(mats.size());
  std::vector<TensorView> views;
  std::vector<std::vector<float>> ys(mats.size());
  std::vector<MatmulTarget> targets;
  double macs = 0;
  for (size_t i = 0; i < mats.size(); ++i) views.push_back(random_matrix(mats[i].first, mats[i].second, n, bufs[i], rng));
  for (size_t i = 0; i < mats.size(); ++i) {
    ys[i].resize(static_cast<size_t>(tokens * mats[i].second));
    targets.push_back({&views[i], ys[i].data(), mats[i].second});
    macs += static_cast<double>(mats[i].second) * n * tokens;
  }
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (auto& v : x) v = gauss(rng);
  std::unique_ptr<Backend> backend = make_cpu_backend(pool);
  auto separate = [&]() {
    for (const MatmulTarget& t : targets) backend->matmul(*t.w, x.data(), n, t.y, t.ldy, tokens);
  };
  auto shared = [&]() { backend->matmul(x.data(), n, tokens, targets.data(), static_cast<int>(targets.size())); };
  separate();
  shared();
  const int reps = std::max(5, static_cast<int>(2e9 / (macs * 20)));
  std::vector<double> ts, tm;
  for (int r = 0; r < reps; ++r) {
    double t0 = seconds_now();
    separate();
    ts.push_back(seconds_now() - t0);
    t0 = seconds_now();
    shared();
    tm.push_back(seconds_now() - t0);
  }
  const double s = median(ts), m = median(tm);
  std::printf("%-13s separate %8.2f GMAC/s %8.3f ms   shared %8.2f GMAC/s %8.3f ms   (%+.1f%%)\n", name,
              macs / s * 1e-9, s * 1e3, macs / m * 1e-9, m * 1e3, (s / m - 1) * 100);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 640;
  const int64_t tokens = argc > 3 ? std::atoll(argv[3]) : 512;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  const char* only = argc > 5 ? argv[5] : nullptr;
  std::printf("cpu: %s [%s], level %s\nrows=%lld n=%lld tokens=%lld threads=%d\n", cpu_features().brand.c_str(),
              cpu_features_string().c_str(), isa_name(active_isa()), static_cast<long long>(rows),
              static_cast<long long>(n), static_cast<long long>(tokens), threads);
  const DType types[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_1, DType::kQ5_1, DType::kQ2_K,
                         DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16,  DType::kF32};
  ThreadPool pool(threads);
  MatmulScratch scratch;
  std::mt19937 rng(1);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (auto& v : x) v = gauss(rng);
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  const bool multi_only = only && std::strcmp(only, "multi") == 0;
  for (DType t : types) {
    if (multi_only || (only && std::strcmp(only, dtype_name(t)) != 0)) continue;
    if (n % dtype_block_size(t) != 0) continue;
    std::vector<uint8_t> w;
    const TensorView tv = random_matrix(t, rows, n, w, rng);
    const size_t rb = tv.row_bytes();
    const double macs = static_cast<double>(rows) * n * tokens;
    const int reps = std::max(3, static_cast<int>(2e9 / (macs * 20)));
    auto run = [&]() { matmul(tv, x.data(), n, y.data(), rows, tokens, pool, scratch); };
    run();
    const double sec = time_median(reps, run);
    // Reference point: the plain per-pair vec_dot loop (single thread,
    // activations quantized outside the timing).
    const KernelSet& k = kernels(t);
    const DType xt = vec_dot_type(t);
    const size_t xrb = xt == DType::kF32 ? n * sizeof(float) : dtype_row_size(xt, n);
    std::vector<uint8_t> xq(xrb * tokens);
    for (int64_t i = 0; i < tokens; ++i) {
      if (xt == DType::kF32) {
        std::memcpy(xq.data() + xrb * i, x.data() + n * i, xrb);
      } else {
        kernels(xt).quantize_row(x.data() + n * i, xq.data() + xrb * i, n);
      }
    }
    auto loop = [&]() {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < tokens; ++i) k.vec_dot(n, &y[i * rows + r], w.data() + rb * r, xq.data() + xrb * i);
    };
    const double sec_loop = time_median(reps, loop);
    std::printf("%-5s tile=%s  matmul %8.2f GMAC/s %8.3f ms   vec_dot loop %8.2f GMAC/s\n", dtype_name(t),
                k.vec_dot_tile ? "yes" : "no ", macs / sec * 1e-9, sec * 1e3, macs / sec_loop * 1e-9);
    // The interleaved layout of the type (kernels/interleave.h) against the
    // plain rows through the whole driver, alternating.
    if (interleaved_type(t) != t && rows % 16 == 0) {
      std::vector<uint8_t> wi(w.size());
      interleave_rows(t, w.data(), rows, n, wi.data());
      TensorView ti = tv;
      ti.type = interleaved_type(t);
      ti.data = wi.data();
      auto run_i = [&]() { matmul(ti, x.data(), n, y.data(), rows, tokens, pool, scratch); };
      run_i();
      std::vector<double> tp, tq;
      for (int i = 0; i < std::max(reps, 10); ++i) {
        double t0 = seconds_now();
        run();
        tp.push_back(seconds_now() - t0);
        t0 = seconds_now();
        run_i();
        tq.push_back(seconds_now() - t0);
      }
      const double bytes = static_cast<double>(w.size());
      std::printf("      interleaved %-9s %8.2f GMAC/s (%5.1f GB/s)   plain %8.2f GMAC/s (%5.1f GB/s)   (x%.2f)\n",
                  dtype_name(ti.type), macs / median(tq) * 1e-9, bytes / median(tq) * 1e-9, macs / median(tp) * 1e-9,
                  bytes / median(tp) * 1e-9, median(tp) / median(tq));
    }
    // A few tokens: the few-token decode kernel and the token-lane kernel
    // (activations packed once) each against the tile over the same rows,
    // one thread, alternating.
    if (k.vec_dot_tile && tokens >= 2 && tokens <= k.tile_cols) {
      const int nc = static_cast<int>(tokens);
      auto tiles = [&]() {
        for (int64_t r = 0; r < rows; r += k.tile_rows)
          k.vec_dot_tile(n, y.data() + r, rows, w.data() + rb * r, rb, xq.data(), xrb,
                         static_cast<int>(std::min<int64_t>(k.tile_rows, rows - r)), nc);
      };
      auto against_tile = [&](const char* name, auto&& f) {
        std::vector<double> tf, tt;
        for (int i = 0; i < std::max(reps, 40); ++i) {
          double t0 = seconds_now();
          f();
          tf.push_back(seconds_now() - t0);
          t0 = seconds_now();
          tiles();
          tt.push_back(seconds_now() - t0);
        }
        std::printf("      1 thread: %s %8.2f GMAC/s   tile %8.2f GMAC/s   (x%.2f)\n", name,
                    macs / median(tf) * 1e-9, macs / median(tt) * 1e-9, median(tt) / median(tf));
      };
      if (k.vec_dot_few && nc <= k.few_max)
        against_tile("few-token rows", [&]() { k.vec_dot_few(n, y.data(), rows, w.data(), rb, xq.data(), xrb, rows, nc); });
      if (k.vec_dot_tokens && nc <= k.tokens_max) {
        std::vector<uint8_t> pk(k.tokens_pack_bytes(n, nc) + 64);
        uint8_t* packed = pk.data() + (64 - reinterpret_cast<uintptr_t>(pk.data()) % 64) % 64;
        against_tile("token lanes", [&]() {
          k.pack_tokens(n, xq.data(), xrb, nc, packed, 0, n / dtype_block_size(xt));
          k.vec_dot_tokens(n, y.data(), rows, w.data(), rb, packed, rows, nc);
        });
      }
    }
  }
  if ((!only || multi_only) && n % 32 == 0) {
    bench_multi("q/k/v", {{DType::kQ5_0, 1024}, {DType::kQ5_0, 256}, {DType::kQ8_0, 256}}, n, tokens, pool, rng);
    bench_multi("gate/up", {{DType::kQ5_0, 2048}, {DType::kQ5_0, 2048}}, n, tokens, pool, rng);
  }
  if ((!only || multi_only) && n % 256 == 0) {  // Qwen3-0.6B Q4_K_M shapes (n = 1024)
    bench_multi("qwen3 q/k/v", {{DType::kQ4_K, 2048}, {DType::kQ4_K, 1024}, {DType::kQ6_K, 1024}}, n, tokens, pool,
                rng);
    bench_multi("qwen3 gate/up", {{DType::kQ4_K, 3072}, {DType::kQ4_K, 3072}}, n, tokens, pool, rng);
  }
  return 0;
}
