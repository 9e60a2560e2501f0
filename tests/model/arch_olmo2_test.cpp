// olmo2 (OLMo 2, OLMo 3): tiny HF models (no pre-norms, post-norms, QK-norm
// over whole Q / K rows; OLMo 3: a sliding layer with plain RoPE and a
// global one with YaRN) against transformers; llama.cpp's conversions
// against llama.cpp; both formats the same function; gen-model files;
// malformed norm widths refused. Fixtures: tools/gen_hf_arch_fixtures.py.
#include <cmath>

#include "arch_test_util.h"

namespace ember::archtest {
namespace {

TEST(Olmo2, HfReference) { check_hf("olmo2"); }
TEST(Olmo2, Olmo3HfReference) { check_hf("olmo3"); }
TEST(Olmo2, GgufReference) { check_gguf("olmo2"); }
TEST(Olmo2, Olmo3GgufReference) { check_gguf("olmo3"); }
TEST(Olmo2, Formats) { check_formats("olmo2"); }
TEST(Olmo2, Olmo3Formats) { check_formats("olmo3"); }

TEST(Olmo2, Config) {
  auto olmo = load(kData + "hf_olmo2");
  ASSERT_TRUE(olmo);
  const ModelConfig& o = olmo->config();
  EXPECT_FALSE(o.attn_pre_norm);
  EXPECT_FALSE(o.ffn_pre_norm);
  EXPECT_TRUE(o.qk_norm_full);
  EXPECT_TRUE(o.post_attn_norm && o.post_ffn_norm);
  for (const std::string& path : {kData + "hf_olmo3", kData + "gguf_olmo3.gguf"}) {
    auto o3 = load(path);
    ASSERT_TRUE(o3);
    const ModelConfig& c = o3->config();
    EXPECT_EQ(c.layers[0].sliding_window, 8) << path;
    EXPECT_EQ(c.layers[0].rope_ext_factor, 0.f) << path;
    EXPECT_EQ(c.layers[0].rope_freq_scale, 1.f) << path;
    EXPECT_EQ(c.layers[1].sliding_window, 0) << path;
    EXPECT_EQ(c.layers[1].rope_ext_factor, 1.f) << path;
    EXPECT_FLOAT_EQ(c.layers[1].rope_freq_scale, 1.f / 8) << path;
    EXPECT_NEAR(c.layers[1].rope_attn_factor, 0.1 * std::log(8.0) + 1, 1e-6) << path;
    EXPECT_EQ(o3->n_rope_tables(), 2) << path;
  }
}

TEST(Olmo2, GenModel) {
  check_gen_model("olmo2", [](GenModelShape&) {},
                  [](const Model& m) { EXPECT_TRUE(m.config().qk_norm_full && !m.config().attn_pre_norm); });
  auto s = gen_model_shape("olmo-2-1b");
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE(validate_gen_model_shape(*s).is_ok());
}

TEST(Olmo2, MalformedFilesAreRefused) {
  const std::string olmo = kData + "gguf_olmo2.gguf";
  expect_error(load_edited(olmo, [](ModelFile& f) { f.tensors["blk.0.attn_q_norm.weight"].ne[0] = 16; }),
               {"blk.0.attn_q_norm.weight", "expected 64"});
  expect_error(load_edited(olmo, [](ModelFile& f) { f.tensors["blk.0.attn_k_norm.weight"].ne[0] = 64; }),
               {"blk.0.attn_k_norm.weight", "expected 32"});
  expect_error(load_edited(olmo, [](ModelFile& f) { f.tensors.erase("blk.1.post_ffw_norm.weight"); }),
               {"blk.1.post_ffw_norm.weight"});
  expect_error(load_edited(kData + "gguf_olmo3.gguf",
                           [](ModelFile& f) {
                             f.metadata.set("olmo2.attention.sliding_window_pattern",
                                            Metadata::make_int_array({1, 0, 1}, GgufType::kBool));
                           }),
               {"olmo2.attention.sliding_window_pattern"});
  // Input rotations need pre-norms.
  expect_error(load_edited(olmo, [](ModelFile& f) { f.metadata.set(kRotAttnInKey, Metadata::make_int(64)); }),
               {kRotAttnInKey, "pre-norms"});
}

}  // namespace
}  // namespace ember::archtest
