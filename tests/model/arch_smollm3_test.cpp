// smollm3 (SmolLM3): a tiny HF model of four layers, the fourth without RoPE,
// against transformers; llama.cpp's conversion against llama.cpp; both formats
// the same function; gen-model files; malformed no_rope_layers refused.
// Fixtures: tools/gen_hf_arch_fixtures.py.
#include "arch_test_util.h"

namespace ember::archtest {
namespace {

TEST(SmolLM3, HfReference) { check_hf("smollm3"); }
TEST(SmolLM3, GgufReference) { check_gguf("smollm3"); }
TEST(SmolLM3, Formats) { check_formats("smollm3"); }

TEST(SmolLM3, Config) {
  // HF: no_rope_layer_interval 4; GGUF: no key, llama.cpp's fixed interval.
  for (const std::string& path : {kData + "hf_smollm3", kData + "gguf_smollm3.gguf"}) {
    auto m = load(path);
    ASSERT_TRUE(m);
    for (int il = 0; il < 4; ++il) EXPECT_EQ(m->config().layers[il].use_rope, il != 3) << path << " " << il;
  }
  // An explicit list is followed as given.
  test::TempDir dir("smol_rope");
  nlohmann::json j = nlohmann::json::parse(test::read_file(kData + "hf_smollm3/config.json"));
  j["no_rope_layers"] = {0, 1, 1, 1};
  test::write_file(dir.path() / "config.json", j.dump());
  std::filesystem::copy_file(kData + "hf_smollm3/model.safetensors", dir.path() / "model.safetensors");
  auto m = load(dir.str());
  ASSERT_TRUE(m);
  for (int il = 0; il < 4; ++il) EXPECT_EQ(m->config().layers[il].use_rope, il != 0) << il;
}

TEST(SmolLM3, GenModel) {
  check_gen_model("smollm3", [](GenModelShape&) {},
                  [](const Model& m) {
                    EXPECT_FALSE(m.config().layers[3].use_rope);
                    EXPECT_TRUE(m.config().layers[2].use_rope);
                  });
  auto s = gen_model_shape("smollm3-3b");
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE(validate_gen_model_shape(*s).is_ok());
}

TEST(SmolLM3, MalformedFilesAreRefused) {
  expect_error(load_with_config("smollm3", [](nlohmann::json& j) { j["no_rope_layers"] = {1, 1, 0}; }),
               {"no_rope_layers", "4"});
  expect_error(load_with_config("smollm3", [](nlohmann::json& j) { j["no_rope_layers"] = {1, 1, 2, 0}; }),
               {"no_rope_layers[2]"});
  expect_error(load_edited(kData + "gguf_smollm3.gguf",
                           [](ModelFile& f) {
                             f.metadata.set("smollm3.rope.layers", Metadata::make_int_array({1, 0}, GgufType::kBool));
                           }),
               {"smollm3.rope.layers"});
}

}  // namespace
}  // namespace ember::archtest
