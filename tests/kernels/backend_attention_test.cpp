// Backend::attention at every level of every backend (backend_under_test.h)
// against the reference (kernels/ref/attention.h: plain softmax per row
// in double): GQA groups of 1 to 16 heads (more than one head group of 8),
// head dims with and without the 16-float fast path, a V head dim unlike
// the K one, sliding windows, softcap, and a ragged batch of four sequences
// (a prefill crossing the 256-key chunk boundary, decode at 520 keys, a fresh
// prompt in a contiguous cache, a short decode burst) through block tables
// in shuffled order whose blocks before every query's window are released
// (null pages) and whose rows after the last query are NaN (a read past
// the causal edge shows); attention sinks (gpt-oss: one extra logit per
// head in the denominator), from a sink that dominates every score to one
// that adds nothing.
//
// Tolerance: the project's attention criterion (docs/correctness.md), 2e-5
// (1 + |ref|) for the float online softmax against the double reference;
// exact at the reference level. Batch invariance at every level: a token
// alone, a sequence alone, a prefill in chunks and a single thread give the
// batch's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backend_under_test.h"
#include "kernels/ref/attention.h"

namespace ember {
namespace {

using testing_backend::BackendTest;
using testing_backend::gaussian;
using testing_backend::near_all;
using testing_backend::same_all;

// One sequence's paged K/V: n_pos positions in blocks of block_size laid out
// in a shuffled order over one buffer; blocks wholly before `first_visible`
// are released (null); rows at positions >= end_visible hold NaN.
struct PagedSeq {
  PagedSeq(int64_t n_pos, int bs, int64_t k_dim, int64_t v_dim, int64_t first_visible, int64_t end_visible,
           uint32_t seed)
      : block_size(bs), kd(k_dim), vd(v_dim) {
    const int64_t n_blocks = (n_pos + bs - 1) / bs;
    k = gaussian(n_blocks * bs * kd, 1.f, seed);
    v = gaussian(n_blocks * bs * vd, 1.f, seed + 1);
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t phys = (b * 7 + 3) % n_blocks;  // a permutation unless n_blocks is a multiple of 7
      const bool released = (b + 1) * bs <= first_visible;
      kb.push_back(released ? nullptr : k.data() + phys * bs * kd);
      vb.push_back(released ? nullptr : v.data() + phys * bs * vd);
    }
    for (int64_t p = end_visible; p < n_blocks * bs; ++p) {
      if (!kb[p / bs]) continue;
      std::fill_n(const_cast<float*>(kb[p / bs]) + (p % bs) * kd, kd, std::nanf(""));
      std::fill_n(const_cast<float*>(vb[p / bs]) + (p % bs) * vd, vd, std::nanf(""));
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
    r.block_size = block_size;
    r.k_row_bytes = int64_t{kd} * 4;
    r.v_row_bytes = int64_t{vd} * 4;
    return r;
  }

  int block_size;
  int64_t kd, vd;
  std::vector<float> k, v;
  std::vector<const float*> kb, vb;
  mutable std::vector<const uint8_t*> kbp, vbp;  // the byte block tables of view()
};

struct Shape {
  const char* name;
  int n_head, n_head_kv, head_dim, head_dim_v;
  float softcap;
  int window;
  bool sinks = false;
};

// Per-head sink logits (16 heads at most): small, large (dominating the
// scores of the gaussian q and K) and very negative (no effect).
const float kSinks[16] = {0.5f, -1.f, 3.f, 25.f, -80.f, 0.f, 1.5f, -3.f, 7.f, 2.f, -0.5f, 12.f, -1e30f, 4.f, 0.25f, -6.f};

const Shape kShapes[] = {
    {"gqa4_hd64", 8, 2, 64, 64, 0.f, 0},
    {"gqa3_hd16_window5", 6, 2, 16, 16, 0.f, 5},
    {"gqa16_hd64_window300_softcap", 16, 1, 64, 64, 50.f, 300},
    {"mha_hd40", 2, 2, 40, 40, 0.f, 0},  // head dim not a multiple of 16
    {"hd64_dv32_softcap_window100", 4, 2, 64, 32, 30.f, 100},
    {"gqa4_hd64_window128_sinks", 8, 2, 64, 64, 0.f, 128, true},  // gpt-oss's sliding layers
    {"gqa16_hd64_sinks", 16, 1, 64, 64, 0.f, 0, true},
    {"mha_hd40_sinks", 2, 2, 40, 40, 0.f, 0, true},
};

// The ragged batch: per sequence its first query position, token count,
// block size (0: one contiguous block) and context length.
struct SeqSpec {
  int32_t pos0;
  int n;
  int block_size;
  int64_t n_pos;
};
const SeqSpec kSeqs[] = {{250, 21, 16, 300}, {520, 1, 16, 530}, {0, 5, 0, 8}, {515, 4, 32, 530}};
const int kTokenOrder[] = {2, 0, 3, 1};  // sequences' tokens in the batch in this order

struct Batch {
  std::vector<PagedSeq> seqs;
  std::vector<KvView> views;
  std::vector<int32_t> pos, view_of_token;
  std::vector<int64_t> first_token;  // of each sequence in the batch
  std::vector<float> q;
};

Batch make_batch(const AttentionShape& s) {
  Batch b;
  for (size_t i = 0; i < std::size(kSeqs); ++i) {
    const SeqSpec& sp = kSeqs[i];
    const int64_t first = s.sliding_window > 0 ? std::max<int64_t>(0, sp.pos0 - s.sliding_window + 1) : 0;
    const int bs = sp.block_size ? sp.block_size : static_cast<int>(sp.n_pos);
    b.seqs.emplace_back(sp.n_pos, bs, int64_t{s.n_head_kv} * s.head_dim, int64_t{s.n_head_kv} * s.head_dim_v, first,
                        sp.pos0 + sp.n, 70 + static_cast<uint32_t>(i));
  }
  for (const PagedSeq& ps : b.seqs) b.views.push_back(ps.view());
  b.first_token.resize(std::size(kSeqs));
  for (int i : kTokenOrder) {
    b.first_token[i] = static_cast<int64_t>(b.pos.size());
    for (int j = 0; j < kSeqs[i].n; ++j) {
      b.pos.push_back(kSeqs[i].pos0 + j);
      b.view_of_token.push_back(i);
    }
  }
  b.q = gaussian(b.pos.size() * s.n_head * s.head_dim, 2.f, 99);
  return b;
}

AttentionShape attention_shape(const Shape& sh) {
  AttentionShape s;
  s.n_head = sh.n_head;
  s.n_head_kv = sh.n_head_kv;
  s.head_dim = sh.head_dim;
  s.head_dim_v = sh.head_dim_v;
  s.scale = 1.f / std::sqrt(static_cast<float>(sh.head_dim));
  s.softcap = sh.softcap;
  s.sliding_window = sh.window;
  if (sh.sinks) s.sinks = kSinks;
  return s;
}

TEST_P(BackendTest, AttentionRaggedPagedAgainstReference) {
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(sh.name);
    const AttentionShape s = attention_shape(sh);
    const Batch b = make_batch(s);
    const int64_t n = static_cast<int64_t>(b.pos.size());
    const int64_t q_row = int64_t{s.n_head} * s.head_dim, o_row = int64_t{s.n_head} * s.head_dim_v;
    std::vector<float> want(n * o_row), got(n * o_row, std::nanf("")), one_thread(n * o_row);
    ref::attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), want.data());
    backend_->attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), got.data());
    EXPECT_TRUE(near_all(got.data(), want.data(), n * o_row, exact(),
                         [&](int64_t i) { return 2e-5 * (1 + std::fabs(want[i])); }));
    backend1_->attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), one_thread.data());
    EXPECT_TRUE(same_all(one_thread, got)) << "one thread";

    // Each token alone (the decode path), through its own view only.
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> out(o_row);
      const KvView& kv = b.views[b.view_of_token[t]];
      backend_->attention(s, b.q.data() + t * q_row, &b.pos[t], 1, &kv, nullptr, out.data());
      ASSERT_TRUE(same_all(out.data(), got.data() + t * o_row, o_row)) << "token " << t << " alone";
    }
    // Each sequence alone, and the long prefill in chunks of 13 tokens.
    for (size_t i = 0; i < std::size(kSeqs); ++i) {
      const int64_t t0 = b.first_token[i];
      for (int64_t c0 = 0; c0 < kSeqs[i].n; c0 += i == 0 ? 13 : kSeqs[i].n) {
        const int64_t c1 = std::min<int64_t>(kSeqs[i].n, c0 + (i == 0 ? 13 : kSeqs[i].n));
        std::vector<float> out((c1 - c0) * o_row);
        backend_->attention(s, b.q.data() + (t0 + c0) * q_row, &b.pos[t0 + c0], c1 - c0, &b.views[i], nullptr,
                            out.data());
        ASSERT_TRUE(same_all(out.data(), got.data() + (t0 + c0) * o_row, (c1 - c0) * o_row))
            << "sequence " << i << " tokens [" << c0 << ", " << c1 << ")";
      }
    }
  }
}

// Sinks far below every score change nothing, bit for bit; a sink scales
// each head's output by sum_j e^s_j / (sum_j e^s_j + e^sink), the same
// factor for every element of the head (checked against the outputs
// without a sink, whose ratio gives it).
TEST_P(BackendTest, AttentionSinksJoinTheDenominator) {
  const Shape sh{"gqa4_hd64", 8, 2, 64, 64, 0.f, 0};
  AttentionShape s = attention_shape(sh);
  const Batch b = make_batch(s);
  const int64_t n = static_cast<int64_t>(b.pos.size());
  const int64_t o_row = int64_t{s.n_head} * s.head_dim_v;
  std::vector<float> plain(n * o_row), none(n * o_row), sunk(n * o_row);
  backend_->attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), plain.data());
  const std::vector<float> low(16, -1e30f);
  s.sinks = low.data();
  backend_->attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), none.data());
  EXPECT_TRUE(same_all(none, plain));
  s.sinks = kSinks;
  backend_->attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), sunk.data());
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < s.n_head; ++h) {
      const float* p = plain.data() + t * o_row + h * s.head_dim_v;
      const float* q = sunk.data() + t * o_row + h * s.head_dim_v;
      int big = 0;
      for (int i = 1; i < s.head_dim_v; ++i)
        if (std::fabs(p[i]) > std::fabs(p[big])) big = i;
      const double f = static_cast<double>(q[big]) / p[big];
      EXPECT_TRUE(f > 0 && f <= 1.0 + 1e-6) << "token " << t << " head " << h << " factor " << f;
      if (kSinks[h] >= 25.f) {
        EXPECT_LT(f, 1e-3) << "a dominating sink";
      }
      for (int i = 0; i < s.head_dim_v; ++i)
        ASSERT_NEAR(q[i], f * p[i], 1e-5 * (1 + std::fabs(p[i]))) << "token " << t << " head " << h;
    }
}

}  // namespace
}  // namespace ember
