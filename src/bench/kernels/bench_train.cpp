// Training kernel throughput (kernels/train.h): the GEMM in the three forms
// a linear's training takes (forward y = x W^T, dX = dY W, dW += dY^T X) and
// attention forward / backward, on the shapes of Gemma 3 270M (n_embd 640,
// FFN 2048, 4 query heads and 1 KV head of 256, a 262144-token head taken
// in chunks of 256 rows) for a batch of `tokens` rows, at the active ISA
// level. Prints GFLOP/s per second of process CPU time (on a shared machine
// wall time counts other jobs' slices), the best of `reps` runs, and the
// AVX-512 f32 peak for reference (2 FMA x 16 lanes x 2 per cycle).
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   cmake -S . -B build-bench -G Ninja -DEMBER_BUILD_BENCH=ON && ninja -C build-bench bench_train
//   build-bench/bench_train [tokens=1024] [threads=1] [reps=5] [f32|bf16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/train_gemm.h"
#include "kernels/train.h"

namespace {

using namespace ember;

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <typename F>
double best_seconds(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_seconds();
    f();
    best = std::min(best, cpu_seconds() - t0);
  }
  return best;
}

bool g_bf16 = false;

void gemm_case(const char* what, int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool acc, int reps,
               ThreadPool& pool) {
  const auto A = randn(static_cast<size_t>(M * K), 1), B = randn(static_cast<size_t>(K * N), 2);
  std::vector<float> C(static_cast<size_t>(M * N), 0.f);
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const double s = best_seconds(reps, [&] {
    (g_bf16 ? train_gemm_bf16 : train_gemm)(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, C.data(), N, acc, pool);
  });
  std::printf("%-34s M %6lld N %6lld K %6lld  %8.2f ms  %7.1f GFLOP/s\n", what, static_cast<long long>(M),
              static_cast<long long>(N), static_cast<long long>(K), 1e3 * s, 2.0 * M * N * K / s * 1e-9);
}

// The micro-kernel alone on panels that stay in L1 (kc = 256): the
// practical peak of the core for the training GEMM.
void kernel_peak(int reps) {
  if (cpu_max_isa() < Isa::kAvx512) return;
  const TrainGemmKernel k = avx512::train_gemm_kernel();
  const int64_t kc = 256, iters = 20000;
  const auto a = randn(static_cast<size_t>(kc * k.mr), 7), b = randn(static_cast<size_t>(kc * k.nr), 8);
  std::vector<float> c(static_cast<size_t>(k.mr * k.nr));
  const double s = best_seconds(reps, [&] {
    for (int64_t i = 0; i < iters; ++i) k.fn(kc, a.data(), b.data(), c.data(), k.nr, true);
  });
  std::printf("%-34s 12 x 32 x 256 in L1               %8.2f ms  %7.1f GFLOP/s (f32 practical peak)\n",
              "AVX-512 micro-kernel alone", 1e3 * s, 2.0 * k.mr * k.nr * kc * iters / s * 1e-9);
  if (!cpu_features().avx512bf16) return;
  const TrainGemmKernelBf16 kb = avx512::train_gemm_kernel_bf16();
  std::vector<uint16_t> ap(static_cast<size_t>(kc * kb.mr)), bp(static_cast<size_t>(kc * kb.nr));
  kb.pack_pairs(a.data(), kc, kb.mr, ap.data());
  kb.pack_pairs(b.data(), kc, kb.nr, bp.data());
  const double sb = best_seconds(reps, [&] {
    for (int64_t i = 0; i < iters; ++i) kb.fn(kc / 2, ap.data(), bp.data(), c.data(), kb.nr, true);
  });
  std::printf("%-34s 12 x 32 x 256 in L1               %8.2f ms  %7.1f GFLOP/s (bf16 practical peak)\n",
              "AVX-512 BF16 micro-kernel alone", 1e3 * sb, 2.0 * kb.mr * kb.nr * kc * iters / sb * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  g_bf16 = argc > 4 && std::string(argv[4]) == "bf16";
  if (g_bf16 && !train_bf16_available()) {
    std::fprintf(stderr, "no bf16 products on this CPU / level\n");
    return 1;
  }
  ThreadPool pool(threads);
  std::printf("ISA %s, %s products, %d thread(s), %lld rows; CPU time per run, best of %d\n", isa_name(active_isa()),
              g_bf16 ? "bf16" : "f32", threads, static_cast<long long>(tokens), reps);
  kernel_peak(reps);
  const int64_t E = 640, F = 2048, Q = 1024, V = 262144, R = 256;
  gemm_case("up/gate forward  y = x W^T", tokens, F, E, false, true, false, reps, pool);
  gemm_case("up/gate dX = dY W", tokens, E, F, false, false, false, reps, pool);
  gemm_case("up/gate dW += dY^T X", F, E, tokens, true, false, true, reps, pool);
  gemm_case("down forward", tokens, E, F, false, true, false, reps, pool);
  gemm_case("down dW", E, F, tokens, true, false, true, reps, pool);
  gemm_case("q forward", tokens, Q, E, false, true, false, reps, pool);
  gemm_case("head forward (one chunk)", R, V, E, false, true, false, std::max(1, reps / 2), pool);
  gemm_case("head dX (one chunk)", R, E, V, false, false, false, std::max(1, reps / 2), pool);
  gemm_case("head dW (one chunk)", V, E, R, true, false, true, std::max(1, reps / 2), pool);

  TrainAttentionShape s;
  s.seq_len = 256;
  s.n_seq = std::max<int64_t>(1, tokens / s.seq_len);
  s.n_head = 4;
  s.n_head_kv = 1;
  s.head_dim = s.head_dim_v = 256;
  s.scale = 1.0f / 16;
  s.window = 512;
  const int64_t N = s.n_seq * s.seq_len;
  const auto q = randn(static_cast<size_t>(N * 4 * 256), 3), k = randn(static_cast<size_t>(N * 256), 4),
             v = randn(static_cast<size_t>(N * 256), 5), dout = randn(static_cast<size_t>(N * 4 * 256), 6);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(N * 4)), dq(q.size()), dk(k.size()), dv(v.size());
  // Causal: L (L + 1) / 2 (query, key) pairs per sequence and head; 2 x
  // head_dim x 2 FLOP per pair forward (QK^T, PV).
  const double pairs = static_cast<double>(s.n_seq) * 4 * s.seq_len * (s.seq_len + 1) / 2;
  const double tf = best_seconds(reps, [&] { train_attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), pool); });
  std::printf("%-34s %lld x %lld, 4 heads of 256      %8.2f ms  %7.1f GFLOP/s (4 FLOP x head_dim per pair)\n",
              "attention forward", static_cast<long long>(s.n_seq), static_cast<long long>(s.seq_len), 1e3 * tf,
              pairs * 4 * 256 / tf * 1e-9);
  const double tb = best_seconds(reps, [&] {
    train_attention_backward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                             dv.data(), pool);
  });
  std::printf("%-34s %lld x %lld                      %8.2f ms  %7.1f GFLOP/s (10 FLOP x head_dim per pair: "
              "recompute, dP, dQ, dK, dV)\n",
              "attention backward", static_cast<long long>(s.n_seq), static_cast<long long>(s.seq_len), 1e3 * tb,
              pairs * 10 * 256 / tb * 1e-9);
  return 0;
}
