// Tiny random-weight Hugging Face models (llama sharded F16, qwen2 BF16 with
// biases, qwen3 BF16 with QK-norm and an explicit head size, gemma3 with
// sliding window + linear RoPE scaling) against transformers in float32
// (reference: tools/gen_hf_reference.py): relative L2 error of the logits
// < 1e-4, same top-1 at every position, identical greedy continuations.
// Also: converting to GGUF q8_0 keeps top-1.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine_free_greedy.h"
#include "logits_compare.h"
#include "transform/convert.h"
#include "model/model.h"

namespace ember {
namespace {

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model/";

nlohmann::json load_reference() {
  std::ifstream f(kData + "hf_reference.json");
  return f.good() ? nlohmann::json::parse(f) : nlohmann::json();
}

void check_folder(const std::string& name, const nlohmann::json& ref) {
  auto model = Model::load(kData + name);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const Model& m = **model;
  const int V = m.config().n_vocab;
  ASSERT_EQ(V, ref["vocab"].get<int>());
  ThreadPool pool(2);
  for (const auto& c : ref["cases"]) {
    const std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(toks.size());
    ForwardContext ctx(m, pool, 16);  // batches of 16: also exercises split prefill
    ContiguousKvCache cache(m.config(), n + 40);
    std::vector<float> all(n * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());
    const LogitsComparison cmp = compare_logits(all.data(), c["logits"], V);
    for (int64_t t = 0; t < n; ++t)
      EXPECT_EQ(cmp.top1[t], cmp.want_top1[t]) << name << ": top-1 at position " << t << " of " << n;
    EXPECT_LT(cmp.rel_l2, 1e-4) << name << ": relative L2 error, " << n << " tokens";
    const std::vector<int32_t> greedy = c["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy_continue(ctx, cache, all.data() + (n - 1) * V, V, n, static_cast<int>(greedy.size())), greedy)
        << name << ": greedy continuation of " << n << " tokens";
  }
}

TEST(HfReference, Llama) { check_folder("hf_llama_sharded", load_reference()["hf_llama_sharded"]); }
TEST(HfReference, Qwen2) { check_folder("hf_qwen2", load_reference()["hf_qwen2"]); }
TEST(HfReference, Qwen3) { check_folder("hf_qwen3", load_reference()["hf_qwen3"]); }
TEST(HfReference, Gemma3) { check_folder("hf_gemma3", load_reference()["hf_gemma3"]); }

TEST(HfReference, ConvertedToGgufTypesStayClose) {
  // HF llama (NeoX RoPE on unpermuted Q/K) -> GGUF llama (permuted Q/K,
  // interleaved RoPE) must compute the same function.
  const nlohmann::json ref = load_reference()["hf_llama_sharded"];
  for (DType t : {DType::kF32, DType::kQ8_0}) {
    auto file = open_model_file(kData + "hf_llama_sharded");
    ASSERT_TRUE(file.is_ok());
    ThreadPool pool(2);
    ConvertOptions o;
    o.type = t;
    auto conv = convert_model(std::move(file.value()), o, pool);
    ASSERT_TRUE(conv.is_ok()) << conv.status().message();
    ASSERT_EQ(*(*conv)->metadata.get_string("llama.rope.type"), "normal");
    auto model = Model::from_file(std::move(conv.value()));
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const auto& c = ref["cases"][2];
    const std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    const int V = (*model)->config().n_vocab, n = static_cast<int>(toks.size());
    ForwardContext ctx(**model, pool, 64);
    ContiguousKvCache cache((*model)->config(), n);
    std::vector<float> all(n * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());
    double err2 = 0, ref2 = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < V; ++j) {
        const double w = c["logits"][i][j].get<double>(), d = all[i * V + j] - w;
        err2 += d * d;
        ref2 += w * w;
      }
    EXPECT_LT(std::sqrt(err2 / ref2), t == DType::kF32 ? 1e-4 : 3e-2) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ember
