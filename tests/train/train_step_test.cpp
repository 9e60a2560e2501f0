// TrainStep's options and invariants on the tiny models of every
// architecture (tests/model/tiny_layered_model.h): gradient checkpointing
// and the thread count change no bit of the gradients; LoRA adapters give
// the merged model's logits and the gradients the merged weight's gradient
// implies (dB = s dW A^T, dA = s B^T dW), and the GGUF writer merges them;
// a hidden-state hook's gradient reaches the parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model/model.h"
#include "model/tiny_layered_model.h"
#include "train/rng.h"
#include "train/step.h"
#include "train/train_model.h"

namespace ember {
namespace {

constexpr int64_t kSeq = 2, kLen = 7;

struct Batch {
  std::vector<int32_t> tokens, targets;
  TrainBatch b;
  explicit Batch(int vocab) {
    for (int64_t i = 0; i < kSeq * (kLen + 1); ++i) tokens.push_back(static_cast<int32_t>((i * 29 + 3) % vocab));
    targets.assign(tokens.size(), -1);
    std::vector<int32_t> in;
    for (int64_t s = 0; s < kSeq; ++s)
      for (int64_t t = 0; t < kLen; ++t) {
        in.push_back(tokens[s * (kLen + 1) + t]);
        targets[s * kLen + t] = tokens[s * (kLen + 1) + t + 1];
      }
    tokens = in;
    targets.resize(tokens.size());
    b.tokens = tokens.data();
    b.targets = targets.data();
    b.n_seq = kSeq;
    b.seq_len = kLen;
  }
};

// Gradient of the mean cross-entropy over the batch.
std::vector<float> gradient(TrainModel& m, const TrainBatch& b, ThreadPool& pool, bool ckpt,
                            const TrainStep::BlockGradHook& hook = nullptr, bool bf16 = false) {
  TrainStep::Options o;
  o.max_rows = b.n_rows();
  o.checkpointing = ckpt;
  o.bf16 = bf16;
  o.head_chunk_rows = 5;
  TrainStep step(m, o, pool);
  std::vector<float> g(static_cast<size_t>(m.n_trainable()), 0.f);
  EXPECT_TRUE(step.forward(b).is_ok());
  LossWeights w;
  w.w_ce = 1.f;
  step.head_loss(nullptr, w, 1.0f / static_cast<float>(b.n_rows()), g.data());
  step.backward(g.data(), hook);
  return g;
}

TEST(TrainStep, CheckpointingAndThreadsGiveTheSameBits) {
  ThreadPool one(1), two(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    auto tm = TrainModel::from_model(*m);
    ASSERT_TRUE(tm);
    (*tm)->set_trainable([](const TrainTensor&) { return true; });
    Batch b(m->config().n_vocab);
    const auto g = gradient(**tm, b.b, two, false);
    const auto g_ckpt = gradient(**tm, b.b, two, true);
    const auto g_one = gradient(**tm, b.b, one, false);
    EXPECT_EQ(0, std::memcmp(g.data(), g_ckpt.data(), g.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(g.data(), g_one.data(), g.size() * sizeof(float)));
    double ss = 0;
    for (float x : g) ss += static_cast<double>(x) * x;
    EXPECT_GT(ss, 0.0);
  }
}

TEST(TrainStep, Bf16ProductsGiveCloseGradients) {
  if (!train_bf16_available()) GTEST_SKIP() << "no bf16 products on this CPU";
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    auto tm = TrainModel::from_model(*m);
    ASSERT_TRUE(tm);
    (*tm)->set_trainable([](const TrainTensor&) { return true; });
    Batch b(m->config().n_vocab);
    const auto g = gradient(**tm, b.b, pool, false), gb = gradient(**tm, b.b, pool, false, nullptr, true);
    // bf16 operands (8-bit mantissas) through a few layers: the same
    // direction to within a few percent, not the same bits.
    double num = 0, den = 0, dot = 0, nb = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      num += (static_cast<double>(gb[i]) - g[i]) * (static_cast<double>(gb[i]) - g[i]);
      den += static_cast<double>(g[i]) * g[i];
      dot += static_cast<double>(gb[i]) * g[i];
      nb += static_cast<double>(gb[i]) * gb[i];
    }
    EXPECT_GT(dot / std::sqrt(den * nb), 0.998);
    EXPECT_LT(std::sqrt(num / den), 0.08);
    EXPECT_GT(num, 0.0);
  }
}

TEST(TrainStep, LoraMatchesTheMergedModel) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    auto lora_r = TrainModel::from_model(*m);
    ASSERT_TRUE(lora_r);
    TrainModel& lora = **lora_r;
    ASSERT_TRUE(lora.add_lora(3, 6.f, 11).is_ok());
    // B random (it starts at 0) so both adapter gradients are non-trivial.
    Rng rng(5);
    for (const TrainTensor& t : lora.tensors())
      if (t.kind == ParamKind::kLoraB)
        for (int64_t i = 0; i < t.size(); ++i) lora.param(&t)[i] = static_cast<float>(0.05 * rng.normal());
    lora.set_trainable([](const TrainTensor& t) { return t.kind != ParamKind::kTensor; });
    // The merged model, through the GGUF writer.
    const std::string path = ::testing::TempDir() + "train_lora_" + s.arch + ".gguf";
    ASSERT_TRUE(lora.write_gguf(m->file().metadata, DType::kF32, path).is_ok());
    auto merged_model = Model::load(path);
    ASSERT_TRUE(merged_model) << merged_model.status().message();
    auto merged_r = TrainModel::from_model(**merged_model);
    ASSERT_TRUE(merged_r);
    TrainModel& merged = **merged_r;
    merged.set_trainable([](const TrainTensor& t) { return role_info(t.role).kind == TensorKind::kMatrix; });
    Batch b(m->config().n_vocab);
    // Same logits.
    TrainStep::Options o;
    o.max_rows = b.b.n_rows();
    TrainStep s1(lora, o, pool), s2(merged, o, pool);
    ASSERT_TRUE(s1.forward(b.b).is_ok());
    ASSERT_TRUE(s2.forward(b.b).is_ok());
    const int64_t V = m->config().n_vocab, n = b.b.n_rows();
    std::vector<float> l1(n * V), l2(n * V);
    s1.logits(0, n, l1.data());
    s2.logits(0, n, l2.data());
    double worst = 0, mx = 0;
    for (size_t i = 0; i < l1.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(l1[i]) - l2[i]));
      mx = std::max(mx, std::fabs(static_cast<double>(l2[i])));
    }
    EXPECT_LT(worst / mx, 1e-5);
    // dB = s dW A^T, dA = s B^T dW for every adapted linear.
    const auto ga = gradient(lora, b.b, pool, false), gw = gradient(merged, b.b, pool, false);
    const float sc = lora.lora_scale();
    const int R = lora.lora_rank();
    for (const TrainTensor& t : lora.tensors()) {
      if (t.kind != ParamKind::kLoraA) continue;
      const TrainTensor* tb = lora.find(t.role, t.layer, ParamKind::kLoraB);
      const TrainTensor* tw = merged.find(t.role, t.layer);
      const float* A = lora.param(&t);
      const float* B = lora.param(tb);
      const float* dW = gw.data() + tw->grad_offset;
      const int64_t out = tw->rows, in = tw->cols;
      double num = 0, den = 0;
      for (int64_t o2 = 0; o2 < out; ++o2)
        for (int r = 0; r < R; ++r) {
          double want = 0;
          for (int64_t i = 0; i < in; ++i) want += static_cast<double>(dW[o2 * in + i]) * A[r * in + i];
          want *= sc;
          const double got = ga[tb->grad_offset + o2 * R + r];
          num += (got - want) * (got - want);
          den += want * want;
        }
      for (int r = 0; r < R; ++r)
        for (int64_t i = 0; i < in; ++i) {
          double want = 0;
          for (int64_t o2 = 0; o2 < out; ++o2) want += static_cast<double>(B[o2 * R + r]) * dW[o2 * in + i];
          want *= sc;
          const double got = ga[t.grad_offset + r * in + i];
          num += (got - want) * (got - want);
          den += want * want;
        }
      EXPECT_LT(std::sqrt(num / den), 1e-4) << t.name;
    }
    std::remove(path.c_str());
  }
}

TEST(TrainStep, HiddenHookGradientReachesTheParameters) {
  ThreadPool pool(2);
  auto m = test::load_tiny(test::tiny_specs()[2]);
  auto tm = TrainModel::from_model(*m);
  ASSERT_TRUE(tm);
  (*tm)->set_trainable([](const TrainTensor&) { return true; });
  Batch b(m->config().n_vocab);
  const auto g0 = gradient(**tm, b.b, pool, false);
  int calls = 0;
  const auto g1 = gradient(**tm, b.b, pool, false, [&](int l, const float* h, float* dh) {
    ++calls;
    if (l == 0)
      for (int64_t i = 0; i < b.b.n_rows() * m->config().n_embd; ++i) dh[i] += 0.01f * h[i];
  });
  EXPECT_EQ(calls, m->config().n_layer);
  // Layer 0's parameters see the extra gradient, the head's do not.
  const TrainTensor* q0 = (*tm)->find(TensorRole::kAttnQ, 0);
  const TrainTensor* out = (*tm)->find(TensorRole::kOutputNorm, -1);
  EXPECT_NE(0, std::memcmp(g0.data() + q0->grad_offset, g1.data() + q0->grad_offset, q0->size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(g0.data() + out->grad_offset, g1.data() + out->grad_offset, out->size() * sizeof(float)));
}

}  // namespace
}  // namespace ember
