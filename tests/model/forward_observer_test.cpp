// ForwardContext::set_observer: the observer sees every linear's input and
// every block's output, in order, with the right shapes and values, and
// observing changes no bit of the result.
#include <gtest/gtest.h>

#include <cstring>

#include "model/forward_observer.h"
#include "model/model.h"
#include "tiny_layered_model.h"

namespace ember {
namespace {

using test::Vec;

struct Call {
  bool block = false;  // on_block_output (else on_linear_input)
  int layer = 0;
  LinearRole role = LinearRole::kQ;
  const float* ptr = nullptr;
  int64_t ld = 0, n_rows = 0, n_in = 0;
  std::vector<float> rows;  // [n_rows, n_in], packed
};

class Recorder final : public ForwardObserver {
 public:
  std::vector<Call> calls;
  void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                       int64_t n_in) override {
    calls.push_back(record(false, layer, role, x, ld, n_rows, n_in));
  }
  void on_block_output(int layer, const float* x, int64_t n_rows, int64_t n_embd) override {
    calls.push_back(record(true, layer, LinearRole::kQ, x, n_embd, n_rows, n_embd));
  }

 private:
  static Call record(bool block, int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                     int64_t n_in) {
    Call c{block, layer, role, x, ld, n_rows, n_in, {}};
    for (int64_t t = 0; t < n_rows; ++t) c.rows.insert(c.rows.end(), x + t * ld, x + t * ld + n_in);
    return c;
  }
};

Vec row_of(const Call& c, int64_t t) {
  return Vec(c.rows.begin() + t * c.n_in, c.rows.begin() + (t + 1) * c.n_in);
}

TEST(ForwardObserver, SeesEveryLinearInputAndBlockOutput) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto mp = test::load_tiny(s);
    ASSERT_TRUE(mp);
    const Model& m = *mp;
    const ModelConfig& c = m.config();
    const ModelWeights& w = m.weights();
    const int64_t E = c.n_embd, V = c.n_vocab, n = 6;
    const std::vector<int32_t> toks = {1, 5, 9, 2, 63, 0};

    ForwardContext plain(m, pool, 16);
    ContiguousKvCache cache0(c, n);
    std::vector<float> want(n * V);
    ASSERT_TRUE(plain.forward(toks.data(), n, 0, cache0, nullptr, want.data()).is_ok());

    Recorder rec;
    ForwardContext ctx(m, pool, 16);
    ctx.set_observer(&rec);
    ContiguousKvCache cache(c, n);
    std::vector<float> got(n * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, got.data()).is_ok());
    // Observing changes nothing.
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float)));

    // Order, roles and shapes: per layer Q K V O gate up down, block output;
    // then the output head.
    ASSERT_EQ(rec.calls.size(), static_cast<size_t>(8 * c.n_layer + 1));
    const LinearRole order[] = {LinearRole::kQ,    LinearRole::kK,  LinearRole::kV,   LinearRole::kO,
                                LinearRole::kGate, LinearRole::kUp, LinearRole::kDown};
    for (int il = 0; il < c.n_layer; ++il) {
      const LayerConfig& lc = c.layers[il];
      const int64_t n_in[] = {E, E, E, static_cast<int64_t>(lc.n_head) * c.head_dim_v, E, E, lc.n_ff};
      for (int r = 0; r < 7; ++r) {
        const Call& k = rec.calls[8 * il + r];
        EXPECT_FALSE(k.block);
        EXPECT_EQ(k.layer, il);
        EXPECT_EQ(k.role, order[r]) << linear_role_name(k.role);
        EXPECT_EQ(k.n_rows, n);
        EXPECT_EQ(k.n_in, n_in[r]) << "layer " << il << " " << linear_role_name(k.role);
        EXPECT_EQ(k.ld, n_in[r]);
      }
      const Call& b = rec.calls[8 * il + 7];
      EXPECT_TRUE(b.block);
      EXPECT_EQ(b.layer, il);
      EXPECT_EQ(b.n_rows, n);
      EXPECT_EQ(b.n_in, E);
      // Q/K/V read the same rows (the same buffer), as do gate and up.
      const Call* q = &rec.calls[8 * il];
      for (int r : {1, 2}) {
        EXPECT_EQ(q[r].ptr, q[0].ptr);
        EXPECT_EQ(q[r].rows, q[0].rows);
      }
      EXPECT_EQ(q[5].ptr, q[4].ptr);
      EXPECT_EQ(q[5].rows, q[4].rows);
      // attn_q's input is rms_norm(previous block output) * attn_norm.
      for (int64_t t = 0; t < n; ++t) {
        const Vec prev = il == 0 ? test::ref_embed(m, toks[t]) : row_of(rec.calls[8 * il - 1], t);
        const Vec expect = test::ref_rms_norm(prev, w.layers[il].attn_norm, c.norm_eps);
        EXPECT_LT(test::rel_l2(q[0].rows.data() + t * E, expect), 1e-6) << "layer " << il << " token " << t;
      }
    }
    // The head reads rms_norm(last block output) * output_norm, and that
    // times the output matrix (then the final softcap) is the logits.
    const Call& head = rec.calls.back();
    EXPECT_FALSE(head.block);
    EXPECT_EQ(head.layer, -1);
    EXPECT_EQ(head.role, LinearRole::kOutput);
    EXPECT_EQ(head.n_rows, n);
    EXPECT_EQ(head.n_in, E);
    const Call& last = rec.calls[8 * c.n_layer - 1];
    for (int64_t t = 0; t < n; ++t) {
      const Vec xn = test::ref_rms_norm(row_of(last, t), w.output_norm, c.norm_eps);
      EXPECT_LT(test::rel_l2(head.rows.data() + t * E, xn), 1e-6);
      Vec z = test::ref_linear(w.output, xn);
      if (c.final_logit_softcap > 0)
        for (double& v : z) v = c.final_logit_softcap * std::tanh(v / c.final_logit_softcap);
      EXPECT_LT(test::rel_l2(got.data() + t * V, z), 1e-6) << "token " << t;
    }

    // Off again: no more calls.
    ctx.set_observer(nullptr);
    ContiguousKvCache cache2(c, n);
    rec.calls.clear();
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache2, got.data()).is_ok());
    EXPECT_TRUE(rec.calls.empty());
  }
}

TEST(ForwardObserver, HeadSeesOnlyTheRequestedRowsOfARaggedBatch) {
  ThreadPool pool(2);
  auto m = test::load_tiny(test::TinySpec{});
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  const std::vector<int32_t> a = {3, 4, 5}, b = {7, 8};
  ContiguousKvCache ca(c, 8), cb(c, 8);
  Recorder rec;
  ForwardContext ctx(*m, pool, 8);
  ctx.set_observer(&rec);
  const SeqBatch batch[] = {{a.data(), 3, 0, &ca, true, false}, {b.data(), 2, 0, &cb, true, false}};
  std::vector<float> logits(2 * c.n_vocab);
  ASSERT_TRUE(ctx.forward_ragged(batch, 2, logits.data()).is_ok());
  ASSERT_EQ(rec.calls.size(), static_cast<size_t>(8 * c.n_layer + 1));
  EXPECT_EQ(rec.calls[0].n_rows, 5);  // the layers see all 5 tokens
  const Call& head = rec.calls.back();
  ASSERT_EQ(head.n_rows, 2);  // the head only the last token of each sequence
  const Call& last = rec.calls[8 * c.n_layer - 1];
  for (int r = 0; r < 2; ++r) {
    const int64_t t = r == 0 ? 2 : 4;
    const Vec xn = test::ref_rms_norm(row_of(last, t), m->weights().output_norm, c.norm_eps);
    EXPECT_LT(test::rel_l2(head.rows.data() + r * c.n_embd, xn), 1e-6);
  }
}

}  // namespace
}  // namespace ember
