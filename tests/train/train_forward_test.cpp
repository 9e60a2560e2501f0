// The training forward (train/step.h) gives the inference forward's logits
// (ForwardContext, all logits) on tiny models of the four architectures
// whose layers differ (tests/model/tiny_layered_model.h: interleaved and
// NeoX RoPE, biases, QK-norm, Gemma's post-norms and (1 + w) norms, GeGLU,
// scaled and tied embeddings, sliding windows, attention and final
// soft-capping), for several sequences at once, with and without
// checkpointing; the TrainModel round-trips through its GGUF writer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/format_test_util.h"
#include "model/model.h"
#include "model/tiny_layered_model.h"
#include "train/step.h"
#include "train/train_model.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

constexpr int64_t kSeq = 2, kLen = 9;

std::vector<int32_t> batch_tokens(int vocab) {
  std::vector<int32_t> t(kSeq * kLen);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return t;
}

// Inference logits of each sequence alone, [kSeq * kLen, V].
std::vector<float> inference_logits(const Model& m, const std::vector<int32_t>& toks, ThreadPool& pool) {
  const int64_t V = m.config().n_vocab;
  std::vector<float> out(toks.size() * V);
  for (int64_t b = 0; b < kSeq; ++b) {
    ForwardContext ctx(m, pool, 64);
    ContiguousKvCache cache(m.config(), kLen);
    EXPECT_TRUE(ctx.forward(toks.data() + b * kLen, kLen, 0, cache, nullptr, out.data() + b * kLen * V).is_ok());
  }
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, worst = 0;
  for (float x : b) mx = std::max(mx, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst / mx;
}

TEST(TrainForward, MatchesInferenceLogitsOnEveryArchitecture) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    ASSERT_TRUE(m);
    const auto toks = batch_tokens(m->config().n_vocab);
    const std::vector<float> want = inference_logits(*m, toks, pool);
    auto tm = TrainModel::from_model(*m);
    ASSERT_TRUE(tm) << tm.status().message();
    for (bool ckpt : {false, true}) {
      TrainStep::Options o;
      o.max_rows = 64;
      o.checkpointing = ckpt;
      TrainStep step(**tm, o, pool);
      TrainBatch b;
      b.tokens = toks.data();
      b.n_seq = kSeq;
      b.seq_len = kLen;
      ASSERT_TRUE(step.forward(b).is_ok());
      std::vector<float> got(want.size());
      step.logits(0, kSeq * kLen, got.data());
      EXPECT_LT(max_rel_diff(got, want), 2e-5) << "checkpointing " << ckpt;
    }
  }
}

TEST(TrainForward, GgufRoundTripKeepsTheModel) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    ASSERT_TRUE(m);
    auto tm = TrainModel::from_model(*m);
    ASSERT_TRUE(tm) << tm.status().message();
    const std::string path = ::testing::TempDir() + "train_roundtrip_" + s.arch + ".gguf";
    ASSERT_TRUE((*tm)->write_gguf(m->file().metadata, DType::kF32, path).is_ok());
    auto back = Model::load(path);
    ASSERT_TRUE(back) << back.status().message();
    const auto toks = batch_tokens(m->config().n_vocab);
    EXPECT_LT(max_rel_diff(inference_logits(**back, toks, pool), inference_logits(*m, toks, pool)), 1e-6);
    std::remove(path.c_str());
  }
}

// Block features the training forward does not implement are refused by
// name, never trained as if they were another architecture's.
TEST(TrainForward, UnsupportedBlocksAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"olmoe", "Mixture-of-Experts"}, {"phi3", "fused matrices"}, {"olmo2", "QK-norm over whole projections"},
      {"smollm3", "layers without RoPE"}};
  ThreadPool pool(2);
  for (const auto& [arch, want] : cases) {
    SCOPED_TRACE(arch);
    test::TempDir dir(std::string("train_refuse_") + arch);
    auto s = gen_model_arch_defaults(arch);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    GenModelShape t = *s;
    t.n_layer = 4, t.n_embd = 64, t.n_ff = 96, t.n_head = 4, t.n_head_kv = 2, t.head_dim = 16, t.n_vocab = 300;
    if (std::string(arch) == "olmoe") t.n_expert = 4, t.n_expert_used = 2;
    if (std::string(arch) == "phi3") t.longrope = true, t.rope_original_ctx = 1024;
    GenModelOptions o;
    o.type = DType::kF32;
    const std::string path = (dir.path() / "m.gguf").string();
    auto st = write_random_model(t, o, path, pool);
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    auto m = Model::load(path);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    auto tm = TrainModel::from_model(**m);
    ASSERT_FALSE(tm.is_ok());
    EXPECT_NE(tm.status().message().find(want), std::string::npos) << tm.status().message();
  }
}

}  // namespace
}  // namespace ember
