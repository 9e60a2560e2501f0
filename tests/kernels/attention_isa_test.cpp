// The SIMD attention levels (kernels/cpu/attention_tiles.h) among themselves:
// the AVX-512 kernel gives the AVX2 kernel's bits for every K/V format pair
// and shape (skipped on a CPU without AVX-512), and a long prefill, whose
// token tiles share the diagonal chunk (rows of different key ends in one
// reduce), gives every row the bits it gets alone and in other splits, at
// every SIMD level the CPU has, and stays within the f32 tolerance of the
// reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/backend_under_test.h"
#include "kernels/kv_types.h"
#include "kernels/ref/attention.h"

namespace ember {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) { return testing_backend::gaussian(n, 1.f, seed); }

// One sequence's K/V pages of the given types: n_pos positions, blocks of
// 16 positions in reversed order.
struct Pages {
  Pages(KvTypes ty, const AttentionShape& s, int64_t n_pos, uint32_t seed) {
    constexpr int kBlock = 16;
    const int64_t kd = int64_t{s.n_head_kv} * s.head_dim, vd = int64_t{s.n_head_kv} * s.head_dim_v;
    const int64_t n_blocks = (n_pos + kBlock - 1) / kBlock;
    view.k_row_bytes = static_cast<int64_t>(kv_row_bytes(ty.k, kd));
    view.v_row_bytes = static_cast<int64_t>(kv_row_bytes(ty.v, vd));
    const std::vector<float> kf = gaussian(n_blocks * kBlock * kd, seed), vf = gaussian(n_blocks * kBlock * vd, seed + 1);
    k.resize(n_blocks * kBlock * view.k_row_bytes);
    v.resize(n_blocks * kBlock * view.v_row_bytes);
    for (int64_t p = 0; p < n_blocks * kBlock; ++p) {
      const int64_t phys = (n_blocks - 1 - p / kBlock) * kBlock + p % kBlock;
      kv_store_row(ty.k, kf.data() + p * kd, kd, k.data() + phys * view.k_row_bytes);
      kv_store_row(ty.v, vf.data() + p * vd, vd, v.data() + phys * view.v_row_bytes);
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
      kb.push_back(k.data() + (n_blocks - 1 - b) * kBlock * view.k_row_bytes);
      vb.push_back(v.data() + (n_blocks - 1 - b) * kBlock * view.v_row_bytes);
    }
    view.k_blocks = kb.data();
    view.v_blocks = vb.data();
    view.block_size = kBlock;
    view.k_type = ty.k;
    view.v_type = ty.v;
  }
  std::vector<uint8_t> k, v;
  std::vector<const uint8_t*> kb, vb;
  KvView view;
};

AttentionShape shape(int n_head, int n_head_kv, int hd, int hdv, float softcap, int window) {
  return AttentionShape{n_head, n_head_kv, hd, hdv, 1.f / std::sqrt(static_cast<float>(hd)), softcap, window};
}

// GQA groups of 4 and 16 (two kMaxGroup groups), a window with softcap, an
// odd head dim (f32 / f16 / bf16 only), V narrower than K, and 72 query
// heads on one kv head (nine kMaxGroup groups: more than one decode item
// reduces at once, so decode takes them in two passes).
struct NamedShape {
  const char* name;
  AttentionShape s;
};
const NamedShape kShapes[] = {
    {"gqa4_hd64", shape(8, 2, 64, 64, 0.f, 0)},
    {"gqa16_hd128_softcap_window100", shape(16, 1, 128, 128, 30.f, 100)},
    {"mha_hd40", shape(3, 3, 40, 40, 0.f, 0)},
    {"gqa3_hd64_dv32", shape(6, 2, 64, 32, 0.f, 0)},
    {"mqa72_hd32", shape(72, 1, 32, 32, 0.f, 0)},
};

// q4c (a group format with f16 tails) has its own pages and ISA check in
// backend_kv_q4c_test.cpp.
bool fits(KvTypes ty, const AttentionShape& s) {
  if (kv_token_grouped(ty.k) || kv_token_grouped(ty.v)) return false;
  return kv_type_check(ty.k, s.head_dim).is_ok() && kv_type_check(ty.v, s.head_dim_v).is_ok();
}

// Ragged batch: a 70-token prefill from position 200 (crosses the 256-key
// chunk; token tiles straddle it), one decode token at 700, three at 300.
struct Batch {
  Batch(KvTypes ty, const AttentionShape& s) {
    pages.emplace_back(ty, s, 270, 11);
    pages.emplace_back(ty, s, 701, 13);
    pages.emplace_back(ty, s, 303, 17);
    for (const Pages& p : pages) views.push_back(p.view);
    auto add = [&](int view, int32_t p0, int n) {
      for (int i = 0; i < n; ++i) {
        pos.push_back(p0 + i);
        view_of_token.push_back(view);
      }
    };
    add(2, 300, 3);
    add(0, 200, 70);
    add(1, 700, 1);
    q = gaussian(pos.size() * s.n_head * s.head_dim, 5);
  }
  std::vector<Pages> pages;
  std::vector<KvView> views;
  std::vector<int32_t> pos, view_of_token;
  std::vector<float> q;
};

// attention_ragged over tokens [t0, t1) of the batch at the given level.
std::vector<float> run(Isa isa, const AttentionShape& s, const Batch& b, int64_t t0, int64_t t1, ThreadPool& pool) {
  const Isa saved = set_active_isa(isa);
  const int64_t n = t1 - t0;
  int32_t max_pos = 0;
  for (int64_t t = t0; t < t1; ++t) max_pos = std::max(max_pos, b.pos[t]);
  std::vector<float> out(n * s.n_head * s.head_dim_v, std::nanf(""));
  std::vector<float> scratch(attention_scratch_floats(s, n, pool.size(), max_pos));
  attention_ragged(s, b.q.data() + t0 * s.n_head * s.head_dim, b.pos.data() + t0, n, b.views.data(),
                   b.view_of_token.data() + t0, out.data(), scratch.data(), pool);
  set_active_isa(saved);
  return out;
}

bool same_bits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

TEST(AttentionIsa, Avx512MatchesAvx2BitForBit) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "CPU without AVX-512";
  ThreadPool pool(2);
  for (const NamedShape& ns : kShapes)
    for (int k = 0; k < kKvTypeCount; ++k)
      for (int v = 0; v < kKvTypeCount; ++v) {
        const KvTypes ty{static_cast<KvType>(k), static_cast<KvType>(v)};
        if (!fits(ty, ns.s)) continue;
        SCOPED_TRACE(std::string(ns.name) + " k=" + kv_type_name(ty.k) + " v=" + kv_type_name(ty.v));
        const Batch b(ty, ns.s);
        const int64_t n = static_cast<int64_t>(b.pos.size());
        const std::vector<float> want = run(Isa::kAvx2, ns.s, b, 0, n, pool);
        EXPECT_TRUE(same_bits(run(Isa::kAvx512, ns.s, b, 0, n, pool), want.data())) << "whole batch";
        // The decode path (<= 4 tokens): the last token, the three at 300.
        const int64_t o_row = int64_t{ns.s.n_head} * ns.s.head_dim_v;
        EXPECT_TRUE(same_bits(run(Isa::kAvx512, ns.s, b, n - 1, n, pool), want.data() + (n - 1) * o_row));
        EXPECT_TRUE(same_bits(run(Isa::kAvx512, ns.s, b, 0, 3, pool), want.data()));
      }
}

TEST(AttentionIsa, LongPrefillRowsGetTheirBitsAlone) {
  ThreadPool pool(2), one(1);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa > cpu_max_isa()) continue;
    for (const NamedShape& ns : kShapes)
      for (int t = 0; t < kKvTypeCount; ++t) {
        const KvTypes ty{static_cast<KvType>(t), static_cast<KvType>(t)};
        if (!fits(ty, ns.s)) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + ns.name + " " + kv_type_name(ty.k));
        const AttentionShape& s = ns.s;
        const Batch b(ty, s);
        const int64_t n = static_cast<int64_t>(b.pos.size());
        const int64_t o_row = int64_t{s.n_head} * s.head_dim_v;
        const std::vector<float> whole = run(isa, s, b, 0, n, pool);
        ASSERT_TRUE(same_bits(run(isa, s, b, 0, n, one), whole.data())) << "one thread";
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_bits(run(isa, s, b, i, i + 1, pool), whole.data() + i * o_row)) << "token " << i;
        for (int64_t c = 0; c < n; c += 11) {  // splits misaligned with the token tiles
          const int64_t e = std::min(n, c + 11);
          ASSERT_TRUE(same_bits(run(isa, s, b, c, e, pool), whole.data() + c * o_row)) << "tokens from " << c;
        }
        std::vector<float> want(n * o_row);
        ref::attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), want.data());
        for (int64_t i = 0; i < n * o_row; ++i)
          ASSERT_NEAR(whole[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << "element " << i;
      }
  }
}

}  // namespace
}  // namespace ember
