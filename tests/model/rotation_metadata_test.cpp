// The rotation and activation-bits metadata of model/config.h (kRot*Key,
// kActBitsKey): read into ModelConfig, and every bad value a clear error
// naming the key; Model::set_activation_bits and ember.activation_bits on
// a Q8_0 model (4-bit levels change the logits a little; f32 weights have no
// 4-bit activation form, an error).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "model/model.h"
#include "transform/convert.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class RotationMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_rotmeta_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 1, s.n_embd = 128, s.n_ff = 192, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 128;
    GenModelOptions o;
    o.type = DType::kF32;
    path_ = (dir_ / "m.gguf").string();
    ASSERT_TRUE(write_random_model(s, o, path_, pool_).is_ok());
    auto f = open_model_file(path_);
    ASSERT_TRUE(f.is_ok());
    meta_ = (*f)->metadata;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The config error of meta_ with `key` set to v ("" if it loads).
  std::string error_with(const std::string& key, GgufValue v) {
    Metadata m = meta_;
    m.set(key, std::move(v));
    auto c = config_from_metadata(m);
    return c.is_ok() ? std::string() : c.status().message();
  }

  ThreadPool pool_{2};
  fs::path dir_;
  std::string path_;
  Metadata meta_;
};

TEST_F(RotationMetadataTest, ReadsValidValues) {
  Metadata m = meta_;
  auto c0 = config_from_metadata(m);
  ASSERT_TRUE(c0.is_ok());
  EXPECT_FALSE(c0->rotation.any());
  EXPECT_EQ(c0->act_bits, 8);
  m.set(kRotAttnInKey, Metadata::make_int(128, GgufType::kUint32));
  m.set(kRotFfnInKey, Metadata::make_int(64, GgufType::kUint32));  // block-diagonal: two blocks of 64
  m.set(kRotFfnDownKey, Metadata::make_int(96, GgufType::kUint32));  // 192 = 2 * 96 (96 = 8 * 12)
  m.set(kRotAttnVKey, Metadata::make_int(32, GgufType::kUint32));
  m.set(kRotAttnOutKey, Metadata::make_int(128, GgufType::kUint32));  // n_head 4 * 32
  m.set(kActBitsKey, Metadata::make_int(4, GgufType::kUint32));
  auto c = config_from_metadata(m);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->rotation.attn_in, 128);
  EXPECT_EQ(c->rotation.ffn_in, 64);
  EXPECT_EQ(c->rotation.ffn_down, 96);
  EXPECT_EQ(c->rotation.attn_v, 32);
  EXPECT_EQ(c->rotation.attn_out, 128);
  EXPECT_EQ(c->act_bits, 4);
}

TEST_F(RotationMetadataTest, BadValuesAreClearErrors) {
  struct Case {
    const char* key;
    GgufValue v;
    const char* says;
  } cases[] = {
      {kRotAttnInKey, Metadata::make_int(7, GgufType::kUint32), "not a rotation size"},
      {kRotAttnInKey, Metadata::make_int(48, GgufType::kUint32), "does not divide the input width 128"},
      {kRotFfnInKey, Metadata::make_string("128"), "must be an integer"},
      {kRotFfnDownKey, Metadata::make_int(128, GgufType::kUint32), "does not divide layer 0's n_ff 192"},
      {kRotAttnVKey, Metadata::make_int(16, GgufType::kUint32), "not the V head size 32"},
      {kRotAttnOutKey, Metadata::make_int(256, GgufType::kUint32), "does not divide layer 0's attention output width 128"},
      {kRotAttnInKey, Metadata::make_int(8192, GgufType::kUint32), "not a rotation size"},
      {kActBitsKey, Metadata::make_int(5, GgufType::kUint32), "must be 4 or 8"},
      {kActBitsKey, Metadata::make_bool(true), "must be 4 or 8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    const std::string err = error_with(c.key, c.v);
    EXPECT_NE(err.find(c.key), std::string::npos) << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
  }
}

TEST_F(RotationMetadataTest, ActivationBits) {
  auto f32 = Model::load(path_);
  ASSERT_TRUE(f32.is_ok());
  Status st = (*f32)->set_activation_bits(4);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("f32"), std::string::npos) << st.message();
  EXPECT_FALSE((*f32)->set_activation_bits(6).is_ok());
  // Q8_0 weights: 4-bit activations from the metadata or the setter, the same bits.
  ConvertOptions co;
  co.type = DType::kQ8_0;
  auto run = [&](int meta_bits, int set_bits) {
    auto src = open_model_file(path_);
    EXPECT_TRUE(src.is_ok());
    if (meta_bits) (*src)->metadata.set(kActBitsKey, Metadata::make_int(meta_bits, GgufType::kUint32));
    auto q = convert_model(std::move(src.value()), co, pool_);
    EXPECT_TRUE(q.is_ok());
    auto m = Model::from_file(std::move(q.value()));
    EXPECT_TRUE(m.is_ok());
    if (set_bits) {
      EXPECT_TRUE((*m)->set_activation_bits(set_bits).is_ok());
    }
    EXPECT_EQ((*m)->config().act_bits, set_bits ? set_bits : meta_bits ? meta_bits : 8);
    std::vector<int32_t> t = {1, 5, 9, 200, 17, 3, 77, 250};
    ForwardContext ctx(**m, pool_, 8);
    ContiguousKvCache cache((*m)->config(), 8);
    std::vector<float> out(8 * 300);
    EXPECT_TRUE(ctx.forward(t.data(), 8, 0, cache, nullptr, out.data()).is_ok());
    return out;
  };
  const std::vector<float> a8 = run(0, 0), a4_meta = run(4, 0), a4_set = run(0, 4), back8 = run(4, 8);
  EXPECT_EQ(a4_meta, a4_set);
  EXPECT_EQ(back8, a8);
  double num = 0, den = 0;
  for (size_t i = 0; i < a8.size(); ++i) num += std::pow(a4_meta[i] - a8[i], 2), den += std::pow(a8[i], 2);
  EXPECT_GT(std::sqrt(num / den), 1e-4);  // 4-bit levels really are used
  EXPECT_LT(std::sqrt(num / den), 0.5);
}

}  // namespace
}  // namespace ember
