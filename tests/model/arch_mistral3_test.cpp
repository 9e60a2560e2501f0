// mistral3 (Ministral 3, Mistral Small 3.x text) and the earlier Ministral:
// tiny HF models (YaRN x16 over 32, attention temperature 0.1, a window of 8
// on every layer; Ministral: windows by layer_types) against transformers;
// llama.cpp's conversion of Ministral 3 (which drops the window, as
// llama.cpp's mistral3 has none) against llama.cpp; both formats the same
// function (the first window of positions for the conversion without it);
// gen-model files. Fixtures: tools/gen_hf_arch_fixtures.py.
#include "arch_test_util.h"

namespace ember::archtest {
namespace {

TEST(Mistral3, HfReference) { check_hf("mistral3"); }
TEST(Mistral3, MinistralHfReference) { check_hf("ministral"); }
TEST(Mistral3, GgufReference) { check_gguf("mistral3"); }
TEST(Mistral3, Formats) { check_formats("mistral3", 8); }
TEST(Mistral3, MinistralFormats) { check_formats("ministral"); }

TEST(Mistral3, Config) {
  auto mis = load(kData + "hf_mistral3");
  ASSERT_TRUE(mis);
  const ModelConfig& m = mis->config();
  EXPECT_FLOAT_EQ(m.attn_temp_scale, 0.1f);
  EXPECT_EQ(m.rope_orig_ctx, 32);
  EXPECT_EQ(m.rope_style, RopeStyle::kNeox);  // HF: unpermuted Q/K
  for (const LayerConfig& l : m.layers) {
    EXPECT_EQ(l.sliding_window, 8);
    EXPECT_FLOAT_EQ(l.rope_ext_factor, 1.f);
    EXPECT_FLOAT_EQ(l.rope_freq_scale, 1.f / 16);
    EXPECT_FLOAT_EQ(l.rope_attn_factor, 1.f);  // mscale = mscale_all_dim
  }
  auto gg = load(kData + "gguf_mistral3.gguf");
  ASSERT_TRUE(gg);
  EXPECT_FLOAT_EQ(gg->config().attn_temp_scale, 0.1f);
  EXPECT_EQ(gg->config().rope_style, RopeStyle::kNormal);  // llama.cpp's converter permutes Q/K
  EXPECT_EQ(gg->config().layers[0].sliding_window, 0);
  auto old = load(kData + "hf_ministral");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->config().layers[0].sliding_window, 8);
  EXPECT_EQ(old->config().layers[1].sliding_window, 0);
}

TEST(Mistral3, GenModel) {
  check_gen_model(
      "mistral3",
      [](GenModelShape& s) { s.yarn_factor = 4, s.rope_original_ctx = 256, s.attn_temp_scale = 0.1f; },
      [](const Model& m) {
        EXPECT_FLOAT_EQ(m.config().attn_temp_scale, 0.1f);
        EXPECT_FLOAT_EQ(m.config().layers[0].rope_ext_factor, 1.f);
      });
  auto s = gen_model_shape("ministral-3-3b");
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE(validate_gen_model_shape(*s).is_ok());
}

TEST(Mistral3, MalformedFilesAreRefused) {
  expect_error(load_edited(kData + "gguf_mistral3.gguf",
                           [](ModelFile& f) {
                             f.metadata.set("mistral3.attention.temperature_scale", Metadata::make_string("x"));
                           }),
               {"mistral3.attention.temperature_scale"});
  expect_error(load_with_config("ministral", [](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; }),
               {"layer_types"});
  expect_error(load_with_config("mistral3",
                                [](nlohmann::json& j) { j["rope_parameters"]["llama_4_scaling_beta"] = -1.0; }),
               {"llama_4_scaling_beta"});
}

}  // namespace
}  // namespace ember::archtest
