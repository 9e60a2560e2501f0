// Decode-attention timing of q4c keys (kernels/kv_types.h) against q4 and
// f16: one query token at position CTX-1 over a contiguous cache of the
// Gemma 3 270M head shape (4 heads, 1 KV head, head dim 256), K/V as
// f16/f16, q4/q4 and q4c/q4 (the groups before the last encoded, every f16
// row kept as the tails), the three run alternately REPS times on 2 threads
// at the active ISA level (EMBER_ISA=avx2|avx512); prints median and
// quartiles per format.
//
// Built with -DEMBER_BUILD_BENCH=ON:
//   cmake -S . -B build-bench -G Ninja -DEMBER_BUILD_BENCH=ON && ninja -C build-bench bench_kv_q4c
//   EMBER_ISA=avx2 build-bench/bench_kv_q4c 4096 300
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kv_types.h"
using namespace ember;
int main(int argc, char** argv) {
  const int nh = 4, nkv = 1, hd = 256, ctx = argc > 1 ? atoi(argv[1]) : 4096, reps = argc > 2 ? atoi(argv[2]) : 100;
  AttentionShape s; s.n_head = nh; s.n_head_kv = nkv; s.head_dim = hd; s.head_dim_v = hd; s.scale = 1.f / 16;
  const int64_t rowf = nkv * hd;
  std::mt19937 rng(1); std::normal_distribution<float> nd;
  std::vector<float> kf(ctx * rowf), vf(ctx * rowf), q(nh * hd);
  for (auto* x : {&kf, &vf, &q})
    for (float& f : *x) f = nd(rng);
  ThreadPool pool(2);
  std::vector<float> scratch(attention_scratch_floats(s, 1, 2, ctx)), out(nh * hd);
  int32_t pos = ctx - 1;
  struct Cfg { const char* name; KvType k, v; };
  const Cfg cfgs[] = {{"f16/f16", KvType::kF16, KvType::kF16}, {"q4/q4", KvType::kQ4, KvType::kQ4}, {"q4c/q4", KvType::kQ4C, KvType::kQ4}};
  std::vector<std::vector<uint8_t>> K(3), Vb(3), F16(3);
  std::vector<std::vector<const uint8_t*>> tails(3);
  std::vector<KvView> views(3);
  const uint8_t* kb[3][1]; const uint8_t* vb[3][1];
  const int ctx16 = (ctx + 15) / 16 * 16;
  for (int c = 0; c < 3; ++c) {
    const int64_t krb = kv_row_bytes(cfgs[c].k, rowf), vrb = kv_row_bytes(cfgs[c].v, rowf);
    K[c].resize(ctx16 * krb); Vb[c].resize(ctx16 * vrb);
    for (int p = 0; p < ctx; ++p) kv_store_row(cfgs[c].v, vf.data() + p * rowf, rowf, Vb[c].data() + p * vrb);
    if (cfgs[c].k == KvType::kQ4C) {
      F16[c].resize(ctx16 * rowf * 2);
      for (int p = 0; p < ctx; ++p) kv_store_row(KvType::kF16, kf.data() + p * rowf, rowf, F16[c].data() + p * rowf * 2);
      for (int g = 0; g < ctx16 / 16; ++g) {
        if ((g + 1) * 16 <= ctx) kv_q4c_encode_group(F16[c].data() + g * 16 * rowf * 2, rowf * 2, nkv, hd, K[c].data() + g * 16 * krb);
        tails[c].push_back(F16[c].data() + g * 16 * rowf * 2);
      }
    } else {
      for (int p = 0; p < ctx; ++p) kv_store_row(cfgs[c].k, kf.data() + p * rowf, rowf, K[c].data() + p * krb);
    }
    kb[c][0] = K[c].data(); vb[c][0] = Vb[c].data();
    KvView& v = views[c];
    v.k_blocks = kb[c]; v.v_blocks = vb[c]; v.block_size = ctx16; v.k_row_bytes = krb; v.v_row_bytes = vrb;
    v.k_type = cfgs[c].k; v.v_type = cfgs[c].v;
    if (!tails[c].empty()) { v.k_tails = tails[c].data(); v.k_tail_row_bytes = rowf * 2; }
  }
  std::vector<std::vector<double>> ts(3);
  for (int r = 0; r <= reps; ++r)
    for (int c = 0; c < 3; ++c) {  // alternating
      auto t0 = std::chrono::steady_clock::now();
      attention(s, q.data(), &pos, 1, views[c], out.data(), scratch.data(), pool);
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (r) ts[c].push_back(us);
    }
  for (int c = 0; c < 3; ++c) {
    std::sort(ts[c].begin(), ts[c].end());
    printf("%s: median %.1f us, p25 %.1f, p75 %.1f (ctx %d, %s)\n", cfgs[c].name, ts[c][ts[c].size() / 2], ts[c][ts[c].size() / 4], ts[c][ts[c].size() * 3 / 4], ctx, isa_name(active_isa()));
  }
}
