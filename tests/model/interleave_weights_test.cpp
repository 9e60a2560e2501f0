// Model::interleave_weights (kernels/interleave.h): Q4_0, Q5_0, Q8_0, Q4_K and Q6_K models
// (random weights, llama layout, tied and untied heads) give the same logits
// bit for bit before and after their weights are interleaved, for a prompt
// and for decode steps (the one-token, few-token and tile kernels), and the
// embedding lookup of a tied interleaved head returns the plain rows.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

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
      if (n > 0) EXPECT_EQ((*il)->weights().output.weight->type, interleaved_type(type));
      const std::vector<float> a = run(**plain), b = run(**il);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "logit " << i;
    }
}

}  // namespace
}  // namespace ember
