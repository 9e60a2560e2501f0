// Attention-only timing (kernels/attention.h at the active ISA level, 2
// threads): N_TOK query tokens at positions CTX-N_TOK .. CTX-1 over one
// contiguous K/V cache of CTX positions stored as KVTYPE; prints the median
// of REPS calls after one warm-up and a checksum of the output (equal
// checksums across builds = the same bits).
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   cmake -S . -B build-bench -G Ninja -DEMBER_BUILD_BENCH=ON && ninja -C build-bench bench_attention
//   build-bench/bench_attention N_HEAD N_KV HEAD_DIM N_TOK CTX f32|f16|bf16|q8|q4 REPS [BLOCK]
// BLOCK: positions per page of a paged cache whose pages lie in shuffled
// order in one pool (as the engine's KV pool hands them out); default: one
// contiguous cache.
// e.g. the Llama-3.2-1B shape, a 512-token prefill slice at 1k context:
//   build-bench/bench_attention 32 8 64 512 1024 f32 2
// EMBER_BENCH_SEQS=S: batched decode instead, N_TOK tokens (token t of
// sequence t % S, at position CTX - 1) over S caches through
// attention_ragged, as a decode step of S sequences runs (with
// EMBER_BENCH_LAYERS=N: N sets of S caches, call r on set r % N), e.g. 32
// chats, their caches in DRAM as in a 16-layer model:
//   EMBER_BENCH_SEQS=32 EMBER_BENCH_LAYERS=16 build-bench/bench_attention 32 8 64 32 256 f16 48 16
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <span>
#include <sys/mman.h>
#include <algorithm>
#include <cmath>
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kv_types.h"
using namespace ember;
int main(int argc, char** argv) {
  if (argc != 8 && argc != 9) {
    std::fprintf(stderr, "usage: bench_attention N_HEAD N_KV HEAD_DIM N_TOK CTX KVTYPE REPS [BLOCK]\n");
    return 2;
  }
  int nh = atoi(argv[1]), nkv = atoi(argv[2]), hd = atoi(argv[3]), nt = atoi(argv[4]), ctx = atoi(argv[5]);
  Result<KvType> kt = parse_kv_type(argv[6]);
  const int reps = atoi(argv[7]);
  const int block = argc == 9 ? atoi(argv[8]) : ctx;
  if (block < 1 || !kt || nh < 1 || nkv < 1 || nh % nkv != 0 || hd < 1 || nt < 1 || ctx < nt || reps < 1 ||
      !kv_type_check(*kt, hd).is_ok() || kv_token_grouped(*kt)) {  // q4c: a key format with tails
    std::fprintf(stderr, "bench_attention: bad arguments\n");
    return 2;
  }
  const KvType ty = *kt;
  AttentionShape s; s.n_head = nh; s.n_head_kv = nkv; s.head_dim = hd; s.head_dim_v = hd; s.scale = 1.f / std::sqrt((float)hd);
  const int64_t rowf = (int64_t)nkv * hd; const int64_t rb = kv_row_bytes(ty, rowf);
  std::mt19937 rng(1); std::normal_distribution<float> nd;
  std::vector<float> x(rowf); std::vector<uint8_t> k((int64_t)ctx * rb), v((int64_t)ctx * rb);
  for (int p = 0; p < ctx; ++p) {
    for (auto& f : x) f = nd(rng);
    kv_store_row(ty, x.data(), rowf, k.data() + p * rb);
    for (auto& f : x) f = nd(rng);
    kv_store_row(ty, x.data(), rowf, v.data() + p * rb);
  }
  // Pages of `block` positions, placed in a shuffled order in the pool.
  const int n_blocks = (ctx + block - 1) / block;
  std::vector<int> slot(n_blocks);
  for (int i = 0; i < n_blocks; ++i) slot[i] = i;
  std::mt19937 shuffle_rng(2);
  std::shuffle(slot.begin(), slot.end(), shuffle_rng);
  // EMBER_BENCH_LAYERS=N: N copies of the cache (one per "layer"), call r
  // on copy r % N, so that with N x the cache's bytes beyond the last-level
  // cache every call reads its K/V from DRAM, as a decode step's layers do.
  const char* nl = std::getenv("EMBER_BENCH_LAYERS");
  const char* ns = std::getenv("EMBER_BENCH_SEQS");
  const int n_seqs = ns ? std::max(1, std::atoi(ns)) : 0;
  const int n_copies = nl ? std::max(1, std::atoi(nl)) : 1;
  const int n_layers = n_copies * std::max(1, n_seqs);  // caches: n_copies x sequences
  const int64_t pool_bytes = (int64_t)n_blocks * block * rb;
  // EMBER_BENCH_HUGE=1: each pool on transparent huge pages (as the engine's KV pool).
  const bool huge = std::getenv("EMBER_BENCH_HUGE") != nullptr;
  auto new_pool = [&]() {
    const size_t bytes = (pool_bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    uint8_t* p = static_cast<uint8_t*>(std::aligned_alloc(2 << 20, bytes));
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    return std::span<uint8_t>(p, bytes);
  };
  std::vector<std::span<uint8_t>> kpools(n_layers), vpools(n_layers);
  std::vector<std::vector<const uint8_t*>> kbs(n_layers), vbs(n_layers);
  std::vector<KvView> kvs(n_layers);
  for (int l = 0; l < n_layers; ++l) {
    kpools[l] = new_pool();
    vpools[l] = new_pool();
    kbs[l].resize(n_blocks);
    vbs[l].resize(n_blocks);
    for (int i = 0; i < n_blocks; ++i) {
      const int64_t off = (int64_t)slot[i] * block * rb;
      const int64_t n = std::min<int64_t>(block, ctx - (int64_t)i * block) * rb;
      std::copy(k.begin() + (int64_t)i * block * rb, k.begin() + (int64_t)i * block * rb + n, kpools[l].begin() + off);
      std::copy(v.begin() + (int64_t)i * block * rb, v.begin() + (int64_t)i * block * rb + n, vpools[l].begin() + off);
      kbs[l][i] = kpools[l].data() + off;
      vbs[l][i] = vpools[l].data() + off;
    }
    KvView& kv = kvs[l];
    kv.k_blocks = kbs[l].data(); kv.v_blocks = vbs[l].data(); kv.block_size = block; kv.k_row_bytes = rb; kv.v_row_bytes = rb; kv.k_type = ty; kv.v_type = ty;
  }
  std::vector<float> q((int64_t)nt * nh * hd); for (auto& f : q) f = nd(rng);
  std::vector<int32_t> pos(nt), view_of(nt);
  for (int t = 0; t < nt; ++t) {
    pos[t] = n_seqs ? ctx - 1 : ctx - nt + t;
    view_of[t] = n_seqs ? t % n_seqs : 0;
  }
  std::vector<float> out((int64_t)nt * nh * hd);
  ThreadPool pool(2);
  std::vector<float> scratch(attention_scratch_floats(s, nt, 2, ctx));
  std::vector<double> ts;
  for (int r = 0; r <= reps; ++r) {
    const KvView& kv = kvs[r % n_layers];
    auto t0 = std::chrono::steady_clock::now();
    if (n_seqs)
      attention_ragged(s, q.data(), pos.data(), nt, kvs.data() + (r % n_copies) * n_seqs, view_of.data(), out.data(),
                       scratch.data(), pool);
    else
      attention(s, q.data(), pos.data(), nt, kv, out.data(), scratch.data(), pool);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  double cs = 0; for (float f : out) cs += f;
  printf("%.3f ms median (checksum %.6f)\n", ts[ts.size() / 2], cs);
}
