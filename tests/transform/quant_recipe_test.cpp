// llama.cpp's named mixes (transform/quant_recipe.h) through
// plan_quantization: for every mix and override variant, the type of every
// tensor of two small gen-model shapes equals what llama-quantize chose for
// the same shapes (tests/data/transform/quant_recipes.tsv, made by
// tools/gen_quant_recipe_fixture.sh); plus names, aliases and the parsing of
// --tensor-type.
#include "transform/quant_recipe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "transform/gen_model.h"
#include "transform/quant_plan.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = EMBER_SOURCE_DIR "/tests/data/transform/quant_recipes.tsv";

TEST(QuantRecipe, NamesAndAliases) {
  EXPECT_EQ(find_quant_recipe("Q4_K_M")->recipe, QuantRecipe::kQ4_K_M);
  EXPECT_EQ(find_quant_recipe("q4_k_m")->recipe, QuantRecipe::kQ4_K_M);
  EXPECT_EQ(find_quant_recipe("q4_k")->recipe, QuantRecipe::kQ4_K_M);
  EXPECT_EQ(find_quant_recipe("Q3_K")->recipe, QuantRecipe::kQ3_K_M);
  EXPECT_EQ(find_quant_recipe("q8_0")->base, DType::kQ8_0);
  EXPECT_EQ(find_quant_recipe("Q6_K")->file_type, 18);
  EXPECT_FALSE(find_quant_recipe("f16"));
  EXPECT_FALSE(find_quant_recipe("q4_k_x"));
  EXPECT_EQ(quant_recipe_names().size(), 15u);
}

TEST(QuantRecipe, ParseTensorTypeOverride) {
  auto o = parse_tensor_type_override("Attn_Q=q8_0");
  ASSERT_TRUE(o.is_ok());
  EXPECT_EQ(o->pattern, "attn_q");
  EXPECT_EQ(o->type, DType::kQ8_0);
  EXPECT_EQ(parse_tensor_type_override("blk\\.[0-3]\\.ffn=Q5_K")->type, DType::kQ5_K);
  for (const char* bad : {"attn_q", "=q8_0", "attn_q=", "attn_q=q9_9", "attn_q=q8_k", "attn_(q=q8_0"})
    EXPECT_FALSE(parse_tensor_type_override(bad).is_ok()) << bad;
}

class QuantRecipeFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_quant_recipe_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The shapes of tools/gen_quant_recipe_fixture.sh.
  std::unique_ptr<ModelFile> model(const std::string& shape) {
    GenModelShape s = *gen_model_arch_defaults(shape);
    if (shape == "gemma3") {
      s.n_layer = 8, s.n_embd = 640, s.n_ff = 1152, s.n_head = 4, s.n_head_kv = 1, s.head_dim = 256;
    } else {
      s.n_layer = 16, s.n_embd = 256, s.n_ff = 768, s.n_head = 8, s.n_head_kv = 2;
    }
    s.n_vocab = 512;
    GenModelOptions o;
    o.type = DType::kF16;
    const std::string path = (dir_ / (shape + ".gguf")).string();
    EXPECT_TRUE(write_random_model(s, o, path, pool_).is_ok());
    return std::move(open_model_file(path).value());
  }

  ThreadPool pool_{2};
  fs::path dir_;
};

TEST_F(QuantRecipeFixtureTest, MatchesLlamaQuantize) {
  // config -> shape -> tensor -> type
  std::map<std::string, std::map<std::string, std::map<std::string, std::string>>> want;
  std::ifstream f(kFixture);
  ASSERT_TRUE(f.good()) << kFixture;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string config, shape, tensor, type;
    ASSERT_TRUE(std::getline(ls, config, '\t') && std::getline(ls, shape, '\t') && std::getline(ls, tensor, '\t') &&
                std::getline(ls, type, '\t'))
        << line;
    want[config][shape][tensor] = type;
  }
  ASSERT_GE(want.size(), 20u);
  std::map<std::string, std::unique_ptr<ModelFile>> models;
  for (const char* s : {"gemma3", "llama"}) models[s] = model(s);
  int checked = 0;
  for (const auto& [config, shapes] : want) {
    ConvertOptions opts;
    std::istringstream cs(config);
    std::string part;
    std::getline(cs, part, '|');
    opts.recipe = find_quant_recipe(part);
    ASSERT_TRUE(opts.recipe) << config;
    while (std::getline(cs, part, '|')) {
      DType t;
      if (part == "imatrix") opts.has_imatrix = true;
      else if (part.rfind("tt=", 0) == 0) opts.tensor_types.push_back(*parse_tensor_type_override(part.substr(3)));
      else if (part.rfind("out=", 0) == 0 && dtype_from_name(part.substr(4), &t)) opts.output_type = t;
      else if (part.rfind("embd=", 0) == 0 && dtype_from_name(part.substr(5), &t)) opts.token_embd_type = t;
      else FAIL() << "config part " << part;
    }
    for (const auto& [shape, types] : shapes) {
      SCOPED_TRACE(config + " " + shape);
      auto plan = plan_quantization(*models.at(shape), opts);
      ASSERT_TRUE(plan.is_ok()) << plan.status().message();
      ASSERT_EQ(plan->entries.size(), types.size());
      for (const QuantPlanEntry& e : plan->entries) {
        auto it = types.find(e.name);
        ASSERT_NE(it, types.end()) << e.name;
        DType t;
        ASSERT_TRUE(dtype_from_name(it->second, &t)) << it->second;
        EXPECT_EQ(std::string(dtype_name(e.target)), std::string(dtype_name(t))) << e.name;
        ++checked;
      }
      EXPECT_EQ(plan->metadata.back().first, "general.quantization_version");
    }
  }
  EXPECT_GT(checked, 2000);
}

}  // namespace
}  // namespace ember
