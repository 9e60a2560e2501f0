// Attention-only timing (kernels/attention.h at the active ISA level, 2
// threads): N_TOK query tokens at positions CTX-N_TOK .. CTX-1 over one
// contiguous K/V cache of CTX positions stored as KVTYPE; prints the median
// of REPS calls after one warm-up and a checksum of the output (equal
// checksums across builds = the same bits).
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   cmake -S . -B build-bench -G Ninja -DEMBER_BUILD_BENCH=ON && ninja -C build-bench bench_attention
//   build-bench/bench_attention N_HEAD N_KV HEAD_DIM N_TOK CTX f32|f16|bf16|q8|q4 REPS
// e.g. the Llama-3.2-1B shape, a 512-token prefill slice at 1k context:
//   build-bench/bench_attention 32 8 64 512 1024 f32 2
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <algorithm>
#include <cmath>
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kv_types.h"
using namespace ember;
int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: bench_attention N_HEAD N_KV HEAD_DIM N_TOK CTX KVTYPE REPS\n");
    return 2;
  }
  int nh = atoi(argv[1]), nkv = atoi(argv[2]), hd = atoi(argv[3]), nt = atoi(argv[4]), ctx = atoi(argv[5]);
  Result<KvType> kt = parse_kv_type(argv[6]);
  const int reps = atoi(argv[7]);
  if (!kt || nh < 1 || nkv < 1 || nh % nkv != 0 || hd < 1 || nt < 1 || ctx < nt || reps < 1 ||
      !kv_type_check(*kt, hd).is_ok() || kv_token_grouped(*kt)) {  // q4c: a key format with tails
    std::fprintf(stderr, "bench_attention: bad arguments\n");
    return 2;
  }
  const KvType ty = *kt;
  AttentionShape s; s.n_head = nh; s.n_head_kv = nkv; s.head_dim = hd; s.head_dim_v = hd; s.scale = 1.f / std::sqrt((float)hd);
  const int64_t rowf = (int64_t)nkv * hd; const int64_t rb = kv_row_bytes(ty, rowf);
  std::mt19937 rng(1); std::normal_distribution<float> nd;
  std::vector<float> x(rowf); std::vector<uint8_t> k((int64_t)ctx * rb), v((int64_t)ctx * rb);
  for (int p = 0; p < ctx; ++p) { for (auto& f : x) f = nd(rng); kv_store_row(ty, x.data(), rowf, k.data() + p * rb);
    for (auto& f : x) f = nd(rng); kv_store_row(ty, x.data(), rowf, v.data() + p * rb); }
  const uint8_t* kb[1] = {k.data()}; const uint8_t* vb[1] = {v.data()};
  KvView kv; kv.k_blocks = kb; kv.v_blocks = vb; kv.block_size = ctx; kv.k_row_bytes = rb; kv.v_row_bytes = rb; kv.k_type = ty; kv.v_type = ty;
  std::vector<float> q((int64_t)nt * nh * hd); for (auto& f : q) f = nd(rng);
  std::vector<int32_t> pos(nt); for (int t = 0; t < nt; ++t) pos[t] = ctx - nt + t;
  std::vector<float> out((int64_t)nt * nh * hd);
  ThreadPool pool(2);
  std::vector<float> scratch(attention_scratch_floats(s, nt, 2, ctx));
  std::vector<double> ts;
  for (int r = 0; r <= reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    attention(s, q.data(), pos.data(), nt, kv, out.data(), scratch.data(), pool);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  double cs = 0; for (float f : out) cs += f;
  printf("%.3f ms median (checksum %.6f)\n", ts[ts.size() / 2], cs);
}
