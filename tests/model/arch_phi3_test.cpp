// phi3 (Phi-3 / 3.5 / 4-mini): a tiny HF model with fused Q|K|V and gate|up,
// 3/4 rotary and LongRoPE (original context 256 of 1024) against
// transformers (short factors at 9 and 40 tokens, long at 264); llama.cpp's
// conversion against llama.cpp at contexts 256 (short) and 512 (long); both
// formats the same function; gen-model files; malformed fused widths, factor
// tensors and configs refused. Fixtures: tools/gen_hf_arch_fixtures.py.
#include <algorithm>
#include <cmath>

#include "arch_test_util.h"

namespace ember::archtest {
namespace {

TEST(Phi3, HfReference) { check_hf("phi3"); }
TEST(Phi3, GgufReference) { check_gguf("phi3"); }
TEST(Phi3, Formats) { check_formats("phi3"); }

TEST(Phi3, Config) {
  for (const std::string& path : {kData + "hf_phi3", kData + "gguf_phi3.gguf"}) {
    auto m = load(path);
    ASSERT_TRUE(m);
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.n_rot, 12) << path;  // head_dim 16 * partial_rotary_factor 0.75
    EXPECT_EQ(c.rope_orig_ctx, 256) << path;
    EXPECT_TRUE(c.rope_longrope) << path;
    EXPECT_NEAR(c.layers[0].rope_attn_factor, std::sqrt(1 + std::log(4.0) / std::log(256.0)), 1e-6) << path;
    EXPECT_TRUE(m->rope_long_factors()) << path;  // at load: the trained context 1024 > 256
    m->set_context_length(256);
    EXPECT_FALSE(m->rope_long_factors()) << path;
  }
}

TEST(Phi3, GenModel) {
  check_gen_model(
      "phi3", [](GenModelShape& s) { s.n_rot = 12, s.longrope = true, s.rope_original_ctx = 256; },
      [](const Model& m) {
        EXPECT_TRUE(m.config().rope_longrope);
        EXPECT_EQ(m.config().n_rot, 12);
        EXPECT_TRUE(m.weights().rope_factors_long && m.weights().rope_factors_short);
      });
  for (const std::string name : {"phi-3.5-mini", "phi-4-mini"}) {
    auto s = gen_model_shape(name);
    ASSERT_TRUE(s.is_ok()) << name;
    EXPECT_TRUE(validate_gen_model_shape(*s).is_ok()) << name;
  }
  EXPECT_EQ(gen_model_shape("phi-4-mini")->rot_dims(), 96);
  // Phi-3's special tokens (llama.cpp looks four of them up in models named phi3).
  Metadata vocab;
  ASSERT_TRUE(synthetic_bpe_vocab("phi3", 400, &vocab).is_ok());
  const GgufValue* toks = vocab.find("tokenizer.ggml.tokens");
  ASSERT_NE(toks, nullptr);
  ASSERT_EQ(toks->count, 400u);
  for (const char* t : {"<unk>", "<s>", "</s>", "<|endoftext|>", "<|end|>"})
    EXPECT_NE(std::find(toks->strings.begin(), toks->strings.end(), t), toks->strings.end()) << t;
  EXPECT_EQ(toks->strings[*vocab.get_int("tokenizer.ggml.eos_token_id")], "<|endoftext|>");
}

// The fused matrices' row views are interleaved like any weight
// (kernels/interleave.h): the same logits bit for bit, prompt and decode.
TEST(Phi3, FusedViewsInterleave) {
  test::TempDir dir("fused_interleave");
  ThreadPool pool(2);
  auto d = gen_model_arch_defaults("phi3");
  ASSERT_TRUE(d.is_ok());
  GenModelShape s = *d;
  s.n_layer = 2, s.n_embd = 256, s.n_ff = 512, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 400, s.n_ctx = 4096;
  s.n_rot = 48, s.longrope = true, s.rope_original_ctx = 1024;
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    const std::string path = (dir.path() / (std::string(dtype_name(t)) + ".gguf")).string();
    GenModelOptions o;
    o.type = t;
    o.weight_std = 0.05f;
    ASSERT_TRUE(write_random_model(s, o, path, pool).is_ok());
    auto m = load(path);
    ASSERT_TRUE(m);
    std::vector<int32_t> toks;
    for (int i = 0; i < 24; ++i) toks.push_back((i * 37 + 11) % 400);
    auto run = [&]() {
      ForwardContext ctx(*m, pool, 32);
      ContiguousKvCache cache(m->config(), 32);
      std::vector<float> all(20 * 400), step(4 * 400);
      EXPECT_TRUE(ctx.forward(toks.data(), 20, 0, cache, nullptr, all.data()).is_ok());
      for (int i = 20; i < 24; ++i)
        EXPECT_TRUE(ctx.forward(&toks[i], 1, i, cache, step.data() + (i - 20) * 400).is_ok());
      all.insert(all.end(), step.begin(), step.end());
      return all;
    };
    const std::vector<float> before = run();
    if (m->interleave_weights(2) == 0) GTEST_SKIP() << "no interleaved layout at this ISA level";
    int views = 0;  // Q, K, V, gate and up of both layers
    for (const auto& v : m->weights().views) views += v.type != t;
    EXPECT_EQ(views, 2 * 5) << dtype_name(t);
    EXPECT_EQ(run(), before) << dtype_name(t);
  }
}

TEST(Phi3, MalformedFilesAreRefused) {
  const std::string phi = kData + "gguf_phi3.gguf";
  expect_error(load_edited(phi, [](ModelFile& f) { f.tensors["blk.1.attn_qkv.weight"].ne[1] -= 16; }),
               {"blk.1.attn_qkv.weight", "attn_q 64 + attn_k 32 + attn_v 32"});
  expect_error(load_edited(phi, [](ModelFile& f) { f.tensors["blk.0.ffn_up.weight"].ne[1] /= 2; }),
               {"blk.0.ffn_up.weight", "ffn_gate 128 + ffn_up 128"});
  expect_error(load_edited(phi, [](ModelFile& f) { f.tensors.erase("blk.0.attn_qkv.weight"); }),
               {"missing tensor 'blk.0.attn_qkv.weight'"});
  expect_error(load_edited(phi, [](ModelFile& f) { f.tensors.erase("rope_factors_short.weight"); }),
               {"rope_factors_short.weight"});
  expect_error(load_edited(phi,
                           [](ModelFile& f) {
                             f.tensors.erase("rope_factors_short.weight");
                             f.tensors.erase("rope_factors_long.weight");
                           }),
               {"LongRoPE", "rope_factors_long.weight"});
  expect_error(load_edited(phi, [](ModelFile& f) { f.tensors["rope_factors_long.weight"].ne[0] = 4; }),
               {"rope_factors_long.weight", "expected 6"});

  expect_error(load_with_config("phi3", [](nlohmann::json& j) { j["rope_parameters"]["long_factor"].erase(0); }),
               {"long_factor", "6"});
  expect_error(load_with_config("phi3", [](nlohmann::json& j) { j["rope_parameters"].erase("short_factor"); }),
               {"short_factor"});
  expect_error(load_with_config("phi3", [](nlohmann::json& j) { j["rope_parameters"]["short_factor"][2] = -1.0; }),
               {"short_factor", "positive"});
  expect_error(load_with_config("phi3", [](nlohmann::json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.7; }),
               {"partial_rotary_factor"});
  EXPECT_TRUE(load_with_config("phi3", [](nlohmann::json&) {}).is_ok());
}

}  // namespace
}  // namespace ember::archtest
