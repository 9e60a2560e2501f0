// Tiled online-softmax attention against the plain-softmax reference, and
// its batch invariance (same bits whatever the batch split or thread count).
#include "kernels/attention.h"
#include "kernels/attention_batch_check.h"
#include "kernels/ref/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ember {
namespace {

struct PagedKv {
  // Block table over one backing buffer; blocks deliberately out of order.
  PagedKv(int n_pos, int block_size, int k_dim, int v_dim, std::mt19937& rng)
      : bs(block_size), kd(k_dim), vd(v_dim) {
    const int n_blocks = (n_pos + bs - 1) / bs;
    k.resize(static_cast<size_t>(n_blocks) * bs * kd);
    v.resize(static_cast<size_t>(n_blocks) * bs * vd);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (int b = 0; b < n_blocks; ++b) {
      const int phys = (b * 7) % n_blocks;  // permutation when n_blocks is not a multiple of 7
      kb.push_back(k.data() + static_cast<size_t>(phys) * bs * kd);
      vb.push_back(v.data() + static_cast<size_t>(phys) * bs * vd);
    }
  }
  KvView view() const {
    kbp.clear();
    vbp.clear();
    for (const float* p : kb) kbp.push_back(reinterpret_cast<const uint8_t*>(p));
    for (const float* p : vb) vbp.push_back(reinterpret_cast<const uint8_t*>(p));
    KvView r;
    r.k_blocks = kbp.data();
    r.v_blocks = vbp.data();
    r.block_size = bs;
    r.k_row_bytes = int64_t{kd} * 4;
    r.v_row_bytes = int64_t{vd} * 4;
    return r;
  }
  int bs, kd, vd;
  std::vector<float> k, v;
  std::vector<const float*> kb, vb;
  mutable std::vector<const uint8_t*> kbp, vbp;  // the byte block tables of view()
};

AttentionShape shape(int n_head, int n_head_kv, int hd, int window) {
  return testing_backend::attention_shape(n_head, n_head_kv, hd, hd, 0.f, window);
}

std::vector<float> run(const AttentionShape& s, const std::vector<float>& q, const std::vector<int32_t>& pos,
                       const KvView& kv, ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(pos.size());
  std::vector<float> out(n * s.n_head * s.head_dim_v);
  int32_t max_pos = 0;
  for (int32_t p : pos) max_pos = std::max(max_pos, p);
  std::vector<float> scratch(attention_scratch_floats(s, n, pool.size(), max_pos));
  attention(s, q.data(), pos.data(), n, kv, out.data(), scratch.data(), pool);
  return out;
}

TEST(Attention, MatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  ThreadPool pool(2);
  struct Heads {
    int n_head, n_head_kv;
  };
  // GQA groups of 2, 3 and 16 (more than one head group of 8).
  for (Heads hs : {Heads{4, 2}, Heads{6, 2}, Heads{16, 1}})
  for (int window : {0, 5, 300}) {
    for (int hd : {16, 64}) {
      const int n_ctx = 700;
      PagedKv kv(n_ctx, 16, hs.n_head_kv * hd, hs.n_head_kv * hd, rng);
      AttentionShape s = shape(hs.n_head, hs.n_head_kv, hd, window);
      for (int64_t n : {1, 3, 37}) {
        std::vector<int32_t> pos(n);
        for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(n_ctx - n + t);
        std::vector<float> q(n * s.n_head * hd);
        for (float& x : q) x = nd(rng) * 2.f;
        std::vector<float> got = run(s, q, pos, kv.view(), pool);
        std::vector<float> want(got.size());
        const KvView view = kv.view();
        ref::attention(s, q.data(), pos.data(), n, &view, nullptr, want.data());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-5f * (1.f + std::fabs(want[i])))
              << "window " << window << " hd " << hd << " n " << n << " i " << i;
      }
    }
  }
}

TEST(Attention, BatchInvariantBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int hd = 32, n_ctx = 600;
  PagedKv kv(n_ctx, 16, hd, hd, rng);
  AttentionShape s = shape(4, 1, hd, 0);
  const int64_t n = 40;
  std::vector<int32_t> pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(n_ctx - n + t);
  std::vector<float> q(n * 4 * hd);
  for (float& x : q) x = nd(rng);
  ThreadPool one(1), two(2);
  const std::vector<float> whole = run(s, q, pos, kv.view(), two);
  EXPECT_EQ(whole, run(s, q, pos, kv.view(), one));
  // Each token alone (decode path) and in uneven chunks (prefill path).
  const size_t row = 4 * hd;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> qt(q.begin() + t * row, q.begin() + (t + 1) * row);
    std::vector<float> alone = run(s, qt, {pos[t]}, kv.view(), two);
    ASSERT_TRUE(std::equal(alone.begin(), alone.end(), whole.begin() + t * row)) << "token " << t;
  }
  for (int64_t b = 0; b < n; b += 13) {
    const int64_t e = std::min(n, b + 13);
    std::vector<float> qc(q.begin() + b * row, q.begin() + e * row);
    std::vector<int32_t> pc(pos.begin() + b, pos.begin() + e);
    std::vector<float> part = run(s, qc, pc, kv.view(), two);
    ASSERT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + b * row)) << "chunk at " << b;
  }
}

// A learned sink by hand: two keys, out = (e^s0 v0 + e^s1 v1) / (e^s0 + e^s1
// + e^z) with s_j = q.k_j * scale, for the tiled kernel and the reference.
TEST(Attention, SinkByHand) {
  std::mt19937 rng(5);
  const int hd = 16;
  PagedKv kv(2, 16, hd, hd, rng);
  AttentionShape s = shape(1, 1, hd, 0);
  const float sink[1] = {0.7f};
  s.sinks = sink;
  std::vector<float> q(hd);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& x : q) x = nd(rng);
  double sc[2], den = std::exp(0.7);
  for (int j = 0; j < 2; ++j) {
    double d = 0;
    for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * kv.k[j * hd + i];
    sc[j] = std::exp(d * s.scale);
    den += sc[j];
  }
  ThreadPool pool(2);
  const std::vector<int32_t> pos = {1};
  const std::vector<float> got = run(s, q, pos, kv.view(), pool);
  std::vector<float> want(hd);
  const KvView v = kv.view();
  ref::attention(s, q.data(), pos.data(), 1, &v, nullptr, want.data());
  for (int i = 0; i < hd; ++i) {
    const double e = (sc[0] * kv.v[i] + sc[1] * kv.v[hd + i]) / den;
    EXPECT_NEAR(got[i], e, 1e-5 * (1 + std::fabs(e))) << i;
    EXPECT_NEAR(want[i], e, 1e-6 * (1 + std::fabs(e))) << i;
  }
}

}  // namespace
}  // namespace ember
