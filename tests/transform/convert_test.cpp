// convert_model: target types per tensor, including the output-head and
// token-embedding overrides (llama-quantize's --output-tensor-type /
// --token-embedding-type) for models with and without a tied output.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "transform/convert.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ember_convert_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ModelFile> make(bool tied) {
    auto s = gen_model_arch_defaults("llama");
    EXPECT_TRUE(s.is_ok());
    GenModelShape shape = *s;
    shape.n_layer = 1, shape.n_embd = 64, shape.n_ff = 96, shape.n_head = 4, shape.n_head_kv = 2, shape.n_vocab = 300;
    shape.tied_embeddings = tied;
    GenModelOptions o;
    o.type = DType::kF16;
    const std::string path = (dir_ / (tied ? "tied.gguf" : "untied.gguf")).string();
    EXPECT_TRUE(write_random_model(shape, o, path, pool_).is_ok());
    auto f = open_model_file(path);
    EXPECT_TRUE(f.is_ok()) << f.status().message();
    return f.is_ok() ? std::move(f.value()) : nullptr;
  }

  DType type_of(const ModelFile& f, const std::string& name) {
    auto it = f.tensors.find(name);
    EXPECT_NE(it, f.tensors.end()) << name;
    return it == f.tensors.end() ? DType::kF32 : it->second.type;
  }

  ThreadPool pool_{2};
  std::filesystem::path dir_;
};

TEST_F(ConvertTest, OutputAndEmbeddingOverrides) {
  ConvertOptions o;
  o.type = DType::kQ4_0;
  o.output_type = DType::kQ8_0;
  o.token_embd_type = DType::kQ5_0;
  {  // untied: each override applies to its own tensor
    auto conv = convert_model(make(false), o, pool_);
    ASSERT_TRUE(conv.is_ok()) << conv.status().message();
    EXPECT_EQ(type_of(**conv, "output.weight"), DType::kQ8_0);
    EXPECT_EQ(type_of(**conv, "token_embd.weight"), DType::kQ5_0);
    EXPECT_EQ(type_of(**conv, "blk.0.attn_q.weight"), DType::kQ4_0);
    EXPECT_EQ(type_of(**conv, "blk.0.attn_norm.weight"), DType::kF32);
  }
  {  // tied: token_embd is the output head, so the output type wins
    auto conv = convert_model(make(true), o, pool_);
    ASSERT_TRUE(conv.is_ok()) << conv.status().message();
    EXPECT_EQ((*conv)->tensors.count("output.weight"), 0u);
    EXPECT_EQ(type_of(**conv, "token_embd.weight"), DType::kQ8_0);
    EXPECT_EQ(type_of(**conv, "blk.0.ffn_down.weight"), DType::kQ4_0);
  }
  {  // no overrides: everything in the main type
    ConvertOptions plain;
    plain.type = DType::kQ8_0;
    auto conv = convert_model(make(false), plain, pool_);
    ASSERT_TRUE(conv.is_ok());
    EXPECT_EQ(type_of(**conv, "output.weight"), DType::kQ8_0);
    EXPECT_EQ(type_of(**conv, "token_embd.weight"), DType::kQ8_0);
  }
  {  // an override that cannot be a storage type is refused
    ConvertOptions bad = o;
    bad.output_type = DType::kQ8_K;
    EXPECT_FALSE(convert_model(make(false), bad, pool_).is_ok());
  }
}

}  // namespace
}  // namespace ember
