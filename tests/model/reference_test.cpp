// The default model against llama.cpp (reference data:
// tools/gen_model_reference.py), in two forms:
//
//  * f32: the same weights dequantized to f32 (no activation quantization in
//    either engine). Logits must agree closely at every stored position
//    (relative L2 < 1e-3: llama.cpp's GELU goes through an f16 lookup table,
//    ~3e-4 from the exact value), same top-1 everywhere, and identical greedy
//    continuations.
//  * as stored (Q4_K_M): both engines quantize activations to int8 blocks,
//    and rounding flips amplify through the layers: llama.cpp differs from
//    an exact float64 evaluation by 2-4%, and from itself by ~1% between
//    batched and token-by-token evaluation (docs/correctness.md). So here the
//    bound on logits is 10%, top-1 must agree wherever llama.cpp's top-1/top-2
//    gap exceeds kConfidentGap, and greedy continuations must match up to the
//    first step that llama.cpp itself decides by less than that gap.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine_free_greedy.h"
#include "transform/convert.h"
#include "model/model.h"

namespace ember {
namespace {

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model/";
const char* kModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
constexpr float kConfidentGap = 0.75f;

struct Criteria {
  double max_rel_l2;
  bool strict;  // top-1 everywhere and full greedy continuation
};

void compare_with_reference(const Model& model, const std::string& ref_name, const Criteria& crit) {
  std::ifstream jf(kData + ref_name + ".json");
  ASSERT_TRUE(jf.good()) << ref_name;
  nlohmann::json ref = nlohmann::json::parse(jf);
  std::ifstream bf(kData + ref_name + ".bin", std::ios::binary);
  ASSERT_TRUE(bf.good());
  const std::vector<int64_t> sampled = ref["sampled_ids"].get<std::vector<int64_t>>();
  const int V = model.config().n_vocab;
  ThreadPool pool(2);

  for (const auto& c : ref["cases"]) {
    const std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    const std::vector<int64_t> positions = c["positions"].get<std::vector<int64_t>>();
    const std::vector<int32_t> argmax = c["argmax"].get<std::vector<int32_t>>();
    const std::vector<float> gaps = c["gaps"].get<std::vector<float>>();
    std::vector<float> want(positions.size() * sampled.size());
    bf.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
    ASSERT_TRUE(bf.good());

    const int64_t n = static_cast<int64_t>(toks.size());
    ForwardContext ctx(model, pool, 256);
    ContiguousKvCache cache(model.config(), n + 40);
    std::vector<float> all(static_cast<size_t>(n) * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());

    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < positions.size(); ++i) {
      const float* row = all.data() + positions[i] * V;
      int best = 0;
      for (int j = 1; j < V; ++j)
        if (row[j] > row[best]) best = j;
      if (best != argmax[i] && (crit.strict || gaps[i] > kConfidentGap))
        ADD_FAILURE() << ref_name << ", " << n << "-token prompt, position " << positions[i] << ": top-1 " << best
                      << " vs llama.cpp " << argmax[i] << " (llama.cpp's top-1/top-2 gap " << gaps[i] << ")";
      for (size_t j = 0; j < sampled.size(); ++j) {
        const double d = row[sampled[j]] - want[i * sampled.size() + j];
        err2 += d * d;
        ref2 += static_cast<double>(want[i * sampled.size() + j]) * want[i * sampled.size() + j];
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LT(rel, crit.max_rel_l2) << ref_name << ": relative L2 error of logits, " << n << "-token prompt";

    const std::vector<int32_t> greedy = c["greedy"].get<std::vector<int32_t>>();
    const std::vector<float> greedy_gaps = c["greedy_gaps"].get<std::vector<float>>();
    const std::vector<int32_t> got =
        greedy_continue(ctx, cache, all.data() + (n - 1) * V, V, n, static_cast<int>(greedy.size()));
    size_t must_match = greedy.size();
    if (!crit.strict)
      for (size_t i = 0; i < greedy.size(); ++i)
        if (greedy_gaps[i] <= kConfidentGap) {
          must_match = i;
          break;
        }
    for (size_t i = 0; i < must_match; ++i)
      ASSERT_EQ(got[i], greedy[i]) << ref_name << ": greedy step " << i << " of a " << n << "-token prompt";
  }
}

class GemmaReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "default model not installed (scripts/setup.sh)";
  }
};

TEST_F(GemmaReference, F32WeightsMatchLlamaCpp) {
  auto file = open_model_file(kModel);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  ThreadPool pool(2);
  ConvertOptions opts;
  opts.type = DType::kF32;
  auto f32 = convert_model(std::move(file.value()), opts, pool);
  ASSERT_TRUE(f32.is_ok()) << f32.status().message();
  auto model = Model::from_file(std::move(f32.value()));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  compare_with_reference(**model, "gemma3_270m_q4_k_m_f32_ref", Criteria{1e-3, true});
}

TEST_F(GemmaReference, QuantizedMatchesLlamaCpp) {
  auto model = Model::load(kModel);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  compare_with_reference(**model, "gemma3_270m_q4_k_m_ref", Criteria{0.1, false});
}

}  // namespace
}  // namespace ember
