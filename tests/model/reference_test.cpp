// The default model against llama.cpp: logits at stored positions (top-1 and
// relative L2 error over sampled vocabulary ids) and greedy continuations.
// Reference data: tools/gen_model_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine_free_greedy.h"
#include "model/model.h"

namespace ember {
namespace {

const char* kModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
const char* kRefJson = EMBER_SOURCE_DIR "/tests/data/model/gemma3_270m_q4_k_m_ref.json";
const char* kRefBin = EMBER_SOURCE_DIR "/tests/data/model/gemma3_270m_q4_k_m_ref.bin";

class GemmaReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;
    auto m = Model::load(kModel);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "default model not installed (scripts/setup.sh)";
  }
  static Model* model_;
};
Model* GemmaReference::model_ = nullptr;

TEST_F(GemmaReference, LogitsAndGreedyMatchLlamaCpp) {
  std::ifstream jf(kRefJson);
  ASSERT_TRUE(jf.good());
  nlohmann::json ref = nlohmann::json::parse(jf);
  std::ifstream bf(kRefBin, std::ios::binary);
  ASSERT_TRUE(bf.good());
  const std::vector<int64_t> sampled = ref["sampled_ids"].get<std::vector<int64_t>>();
  const int V = model_->config().n_vocab;
  ThreadPool pool(2);

  for (const auto& c : ref["cases"]) {
    const std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    const std::vector<int64_t> positions = c["positions"].get<std::vector<int64_t>>();
    const std::vector<int32_t> argmax = c["argmax"].get<std::vector<int32_t>>();
    std::vector<float> want(positions.size() * sampled.size());
    bf.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
    ASSERT_TRUE(bf.good());

    const int64_t n = static_cast<int64_t>(toks.size());
    ForwardContext ctx(*model_, pool, 256);
    ContiguousKvCache cache(model_->config(), n + 40);
    std::vector<float> all(static_cast<size_t>(n) * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());

    int top1_miss = 0;
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < positions.size(); ++i) {
      const float* row = all.data() + positions[i] * V;
      int best = 0;
      for (int j = 1; j < V; ++j)
        if (row[j] > row[best]) best = j;
      if (best != argmax[i]) {
        ++top1_miss;
        ADD_FAILURE() << "position " << positions[i] << ": top-1 " << best << " vs llama.cpp " << argmax[i]
                      << " (logits " << row[best] << " vs " << row[argmax[i]] << ")";
      }
      for (size_t j = 0; j < sampled.size(); ++j) {
        const double d = row[sampled[j]] - want[i * sampled.size() + j];
        err2 += d * d;
        ref2 += static_cast<double>(want[i * sampled.size() + j]) * want[i * sampled.size() + j];
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LT(rel, 1e-2) << "relative L2 error of logits, prompt of " << n << " tokens";
    EXPECT_EQ(top1_miss, 0);

    // Greedy continuation, decoding one token at a time.
    const std::vector<int32_t> greedy = c["greedy"].get<std::vector<int32_t>>();
    std::vector<int32_t> got = greedy_continue(ctx, cache, all.data() + (n - 1) * V, V, n,
                                               static_cast<int>(greedy.size()));
    EXPECT_EQ(got, greedy) << "greedy continuation of a " << n << "-token prompt";
  }
}

}  // namespace
}  // namespace ember
