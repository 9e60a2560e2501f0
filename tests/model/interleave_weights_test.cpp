// Model::interleave_weights (kernels/interleave.h): Q4_0, Q5_0, Q8_0, Q4_K and Q6_K models
// (random weights, llama layout, tied and untied heads) give the same logits
// bit for bit before and after their weights are interleaved, for a prompt
// and for decode steps (the one-token, few-token and tile kernels), and the
// embedding lookup of a tied interleaved head returns the plain rows; MXFP4
// expert stacks (no interleaved form) of a file copied unchanged into 2 MiB
// pages, the logits bit-identical; the
// same preparation through Model::prepare_weights and the Backend seam, and
// Model::check_backend against a backend that refuses a type.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/interleave.h"
#include "model/model.h"
#include "model/prompt_steps_logits.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

class InterleaveWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ember_interleave_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(DType type, bool tied) {
    GenModelShape s;
    s.arch = "llama";
    s.n_layer = 2;
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_vocab = 400;  // 25 groups of 16 rows
    s.tied_embeddings = tied;
    GenModelOptions o;
    o.type = type;
    o.seed = 3;
    o.weight_std = 0.05f;
    const std::string p = (dir_ / (std::string(dtype_name(type)) + (tied ? "_tied" : "") + ".gguf")).string();
    auto st = write_random_model(s, o, p, pool_);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    return p;
  }

  std::vector<float> run(const Model& m) { return prompt_steps_logits(m, pool_); }

  std::filesystem::path dir_;
  ThreadPool pool_{2};
};

TEST_F(InterleaveWeights, LogitsUnchanged) {
  for (DType type : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + (tied ? " tied" : " untied"));
      const std::string path = write(type, tied);
      auto plain = Model::load(path);
      auto il = Model::load(path);
      ASSERT_TRUE(plain.is_ok() && il.is_ok());
      const int n = (*il)->interleave_weights(2);
      // 2 layers x 7 block linears + the head, where the level pays for it.
      EXPECT_EQ(n, interleave_pays(type, 16) ? 15 : 0);
      if (n > 0) {
        EXPECT_EQ((*il)->weights().output.weight->type, interleaved_type(type));
      }
      const std::vector<float> a = run(**plain), b = run(**il);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "logit " << i;
    }
}

// Experts of a type the CPU does not interleave (MXFP4) move out of the
// file mapping into 2 MiB pages, bytes and type unchanged, every expert's
// view following its stack; the logits stay bit-identical.
TEST_F(InterleaveWeights, MappedExpertStacksMoveIntoHugePages) {
  GenModelShape s = gen_model_shape("gpt-oss-20b-6l").value();
  s.n_layer = 2;
  s.n_embd = 64;
  s.n_ff = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 16;
  s.n_vocab = 512;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_ff_exp = 64;
  GenModelOptions o;
  o.type = DType::kMXFP4;
  o.seed = 5;
  const std::string path = (dir_ / "gptoss_mxfp4.gguf").string();
  auto st = write_random_model(s, o, path, pool_);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  auto m = Model::load(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const MoeWeights& moe = (*m)->weights().layers[1].moe;
  ASSERT_EQ(moe.down_w.size(), 4u);
  std::vector<const void*> at;
  std::vector<std::vector<uint8_t>> bytes;
  for (const auto* w : {&moe.gate_w, &moe.up_w, &moe.down_w})
    for (const TensorView* v : *w) {
      ASSERT_EQ(v->type, DType::kMXFP4);
      at.push_back(v->data);
      const auto* p = static_cast<const uint8_t*>(v->data);
      bytes.emplace_back(p, p + v->nbytes);
    }
  const std::vector<float> before = run(**m);
  (*m)->interleave_weights(2);
  size_t i = 0;
  for (const auto* w : {&moe.gate_w, &moe.up_w, &moe.down_w})
    for (const TensorView* v : *w) {
      EXPECT_NE(v->data, at[i]);
      EXPECT_EQ(v->type, DType::kMXFP4);
      EXPECT_EQ(0, std::memcmp(v->data, bytes[i].data(), bytes[i].size()));
      ++i;
    }
  // Expert 0 starts its stack: the stack's buffer is 2 MiB aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(moe.down_w[0]->data) % (uintptr_t{2} << 20), 0u);
  const std::vector<float> after = run(**m);
  ASSERT_EQ(before.size(), after.size());
  EXPECT_EQ(0, std::memcmp(before.data(), after.data(), before.size() * sizeof(float)));
}

// A backend that only answers supports() (every type but `refused`) and
// fails prepare_weights; its compute ops are never called here.
class RefusingBackend final : public Backend {
 public:
  explicit RefusingBackend(DType refused) : refused_(refused) {}
  const char* name() const override { return "refusing"; }
  bool supports(DType t, WeightOp op) const override { return t != refused_ && cpu_backend_supports(t, op); }
  Result<int> prepare_weights(const WeightToPrepare*, int64_t, std::vector<std::shared_ptr<void>>*,
                              const WeightRetired&) override {
    return Status::error("no device memory");
  }
  void matmul(const float*, int64_t, int64_t, const MatmulTarget*, int) override { ADD_FAILURE(); }
  void embed(const TensorView&, const int32_t*, int64_t, float, float*) override { ADD_FAILURE(); }
  void rms_norm(const float*, int64_t, const float*, float*, int64_t, int64_t, int64_t, float) override {
    ADD_FAILURE();
  }
  void rope_angles(const int32_t*, int64_t, const float*, int, float*, float*) override { ADD_FAILURE(); }
  void rope(float*, int64_t, int64_t, int, int, int, RopeStyle, const float*, const float*) override { ADD_FAILURE(); }
  void add_bias(float*, int64_t, int64_t, int64_t, const float*) override { ADD_FAILURE(); }
  void add(float*, const float*, int64_t) override { ADD_FAILURE(); }
  void gated_activation(GatedActivation, float*, int64_t, const float*, int64_t, int64_t, int64_t) override {
    ADD_FAILURE();
  }
  void softcap(float*, int64_t, float) override { ADD_FAILURE(); }
  void hadamard(float*, int64_t, int64_t, int, int, bool) override { ADD_FAILURE(); }
  void moe_route(const float*, int64_t, int64_t, const MoeRouting&, int32_t*, float*) override { ADD_FAILURE(); }
  void moe_matmul(const float*, int64_t, int64_t, const int32_t*, const int32_t*, int, const ExpertTarget*,
                  int) override {
    ADD_FAILURE();
  }
  void moe_combine(const float*, int64_t, const float*, int, int64_t, int64_t, float*, int64_t, bool) override {
    ADD_FAILURE();
  }
  void attention(const AttentionShape&, const float*, const int32_t*, int64_t, const KvView*, const int32_t*,
                 float*) override {
    ADD_FAILURE();
  }

 private:
  DType refused_;
};

// Model::prepare_weights through the Backend seam: the CPU backend's
// preparation is interleave_weights' (the same tensors, the same logits);
// check_backend accepts the CPU backend and names the first weight another
// backend refuses; a backend whose preparation fails leaves the model as
// it was.
TEST_F(InterleaveWeights, PreparedThroughTheBackend) {
  const DType type = DType::kQ4_K;
  const std::string path = write(type, false);
  auto plain = Model::load(path);
  auto prepared = Model::load(path);
  ASSERT_TRUE(plain.is_ok() && prepared.is_ok());
  auto cpu = make_cpu_backend(pool_);
  EXPECT_TRUE((*prepared)->check_backend(*cpu).is_ok());

  RefusingBackend refusing(type);
  const Status st = (*prepared)->check_backend(refusing);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("refusing backend"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("q4_K"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("blk.0."), std::string::npos) << st.message();
  EXPECT_TRUE((*prepared)->check_backend(RefusingBackend(DType::kMXFP4)).is_ok());
  auto failed = (*prepared)->prepare_weights(refusing);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_NE(failed.status().message().find("no device memory"), std::string::npos);
  EXPECT_EQ((*prepared)->weights().output.weight->type, type);

  auto n = (*prepared)->prepare_weights(*cpu);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(*n, interleave_pays(type, 16) ? 15 : 0);
  if (*n > 0) {
    EXPECT_EQ((*prepared)->weights().layers[1].down.weight->type, interleaved_type(type));
  }
  EXPECT_TRUE((*prepared)->check_backend(*cpu).is_ok());  // the interleaved types run too
  const std::vector<float> a = run(**plain), b = run(**prepared);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace ember
