// Random-weight models (transform/gen_model.h): tiny shapes of every
// architecture in f32, q8_0 and a k-quant with fallback load with
// Model::load, match the requested config and give finite, non-constant
// logits; the file is a function of the seed alone (not of the thread
// count); weights have the requested scale; the synthetic vocabulary is a
// valid BPE vocabulary; bad shapes are refused.
#include "transform/gen_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "model/model.h"
#include "quant/quantize.h"
#include "transform/quant_plan.h"

namespace ember {
namespace {

const std::string kDefaultModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";

class GenModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ember_gen_model_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

GenModelShape tiny(const std::string& arch) {
  auto s = gen_model_arch_defaults(arch);
  EXPECT_TRUE(s.is_ok());
  GenModelShape t = *s;
  t.n_layer = 3;
  t.n_embd = 64;
  t.n_ff = 96;
  t.n_head = 4;
  t.n_head_kv = 2;
  t.head_dim = arch == "gemma3" || arch == "qwen3" ? 32 : 0;  // head size != n_embd / n_head
  t.n_vocab = 300;
  t.n_ctx = 256;
  if (arch == "llama") t.rope_scale_factor = 8;  // rope_freqs.weight
  if (arch == "gemma3") t.sliding_window = 8;
  return t;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void check_forward(const Model& m) {
  ThreadPool pool(2);
  ForwardContext ctx(m, pool, 32);
  const int64_t n = 20, V = m.config().n_vocab;
  ContiguousKvCache cache(m.config(), n);
  std::vector<int32_t> toks(n);
  for (int64_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>((i * 37 + 5) % V);
  std::vector<float> logits(n * V);
  ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, logits.data()).is_ok());
  double mean = 0, var = 0;
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    mean += x;
  }
  mean /= logits.size();
  for (float x : logits) var += (x - mean) * (x - mean);
  EXPECT_GT(std::sqrt(var / logits.size()), 1e-3) << "logits are (nearly) constant";
}

TEST_F(GenModelTest, EveryArchitectureLoadsAndRuns) {
  ThreadPool pool(2);
  for (const std::string arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
    for (DType type : {DType::kF32, DType::kQ8_0}) {
      SCOPED_TRACE(arch + " " + dtype_name(type));
      const GenModelShape s = tiny(arch);
      GenModelOptions o;
      o.type = type;
      o.seed = 42;
      const std::string p = path(arch + ".gguf");
      auto stats = write_random_model(s, o, p, pool);
      ASSERT_TRUE(stats.is_ok()) << stats.status().message();
      EXPECT_TRUE(stats->fallbacks.empty());
      EXPECT_EQ(stats->file_bytes, std::filesystem::file_size(p));
      auto model = Model::load(p);
      ASSERT_TRUE(model.is_ok()) << model.status().message();
      const Model& m = **model;
      const ModelConfig& c = m.config();
      EXPECT_EQ(c.arch, arch);
      EXPECT_EQ(c.n_layer, 3);
      EXPECT_EQ(c.n_embd, 64);
      EXPECT_EQ(c.n_ff, 96);
      EXPECT_EQ(c.n_head, 4);
      EXPECT_EQ(c.n_head_kv, 2);
      EXPECT_EQ(c.head_dim, arch == "gemma3" || arch == "qwen3" ? 32 : 16);
      EXPECT_EQ(c.n_vocab, 300);
      EXPECT_EQ(c.n_ctx_train, 256);
      EXPECT_EQ(m.n_params(), stats->n_params);
      const ModelWeights& w = m.weights();
      EXPECT_EQ(w.layers[0].q.weight->type, type);
      EXPECT_EQ(w.tok_embd->type, type);
      EXPECT_EQ(w.output.weight == w.tok_embd, s.tied_embeddings);
      EXPECT_EQ(w.rope_freqs != nullptr, arch == "llama");
      EXPECT_EQ(w.layers[0].q.bias != nullptr, arch == "qwen2");
      EXPECT_EQ(c.qk_norm, arch == "gemma3" || arch == "qwen3");
      EXPECT_EQ(w.layers[0].q_norm != nullptr, c.qk_norm);
      if (arch == "gemma3") {
        EXPECT_EQ(c.layers[0].sliding_window, 8);
        EXPECT_EQ(c.layers[2].sliding_window, 8);
        EXPECT_NEAR(c.layers[0].rope_base, 10000, 1e-3);
      }
      const GgufValue* toks = m.file().metadata.find("tokenizer.ggml.tokens");
      ASSERT_NE(toks, nullptr);
      EXPECT_EQ(toks->count, 300u);
      check_forward(m);
    }
  }
}

TEST_F(GenModelTest, SameSeedSameBytes) {
  const GenModelShape s = tiny("qwen2");
  GenModelOptions o;
  o.type = DType::kQ4_0;
  o.seed = 7;
  ThreadPool one(1), two(2);
  ASSERT_TRUE(write_random_model(s, o, path("a.gguf"), one).is_ok());
  ASSERT_TRUE(write_random_model(s, o, path("b.gguf"), two).is_ok());
  o.seed = 8;
  ASSERT_TRUE(write_random_model(s, o, path("c.gguf"), two).is_ok());
  const std::string a = read_file(path("a.gguf")), b = read_file(path("b.gguf")), c = read_file(path("c.gguf"));
  ASSERT_GT(a.size(), 10000u);
  EXPECT_TRUE(a == b) << "same seed, different threads: files differ";
  ASSERT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "different seeds gave the same file";
}

TEST_F(GenModelTest, WeightScaleAndNorms) {
  GenModelShape s = tiny("llama");
  s.n_embd = 256;
  s.n_vocab = 2000;
  GenModelOptions o;
  o.type = DType::kF32;
  o.weight_std = 0.02f;
  ThreadPool pool(2);
  ASSERT_TRUE(write_random_model(s, o, path("w.gguf"), pool).is_ok());
  auto model = Model::load(path("w.gguf"));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const TensorView& e = *(*model)->weights().tok_embd;
  const float* x = static_cast<const float*>(e.data);
  const int64_t n = e.nelements();
  double mean = 0, m2 = 0, m4 = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    m2 += d * d;
    m4 += d * d * d * d;
  }
  m2 /= n;
  m4 /= n;
  EXPECT_NEAR(mean, 0, 1e-4);
  EXPECT_NEAR(std::sqrt(m2), 0.02, 0.0005);
  // Irwin-Hall(4) kurtosis is 2.7 (normal: 3); a uniform would give 1.8.
  EXPECT_NEAR(m4 / (m2 * m2), 2.7, 0.1);
  const float* norm = (*model)->weights().layers[1].attn_norm;
  for (int i = 0; i < s.n_embd; ++i) EXPECT_NEAR(norm[i], 1.0f, 0.08f);
  // Llama 3 RoPE factors: 1 for high frequencies, the scale factor for low ones.
  const float* rf = (*model)->weights().rope_freqs;
  ASSERT_NE(rf, nullptr);
  EXPECT_FLOAT_EQ(rf[0], 1.0f);
  EXPECT_FLOAT_EQ(rf[s.head_size() / 2 - 1], 8.0f);
}

TEST_F(GenModelTest, KQuantFallbackForShortRows) {
  const GenModelShape s = tiny("llama");  // rows of 64 and 96: not multiples of 256
  GenModelOptions o;
  o.type = DType::kQ4_K;
  ThreadPool pool(2);
  auto stats = write_random_model(s, o, path("k.gguf"), pool);
  ASSERT_TRUE(stats.is_ok()) << stats.status().message();
  EXPECT_FALSE(stats->fallbacks.empty());
  auto model = Model::load(path("k.gguf"));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->weights().layers[0].q.weight->type, DType::kQ5_0);
  check_forward(**model);
  EXPECT_EQ(fallback_row_type(DType::kQ4_K, 512), DType::kQ4_K);
  EXPECT_EQ(fallback_row_type(DType::kQ6_K, 64), DType::kQ8_0);
  EXPECT_EQ(fallback_row_type(DType::kQ8_0, 48), DType::kF16);
}

TEST(GenModelVocab, SyntheticBpeIsConsistent) {
  for (const std::string arch : {"llama", "qwen2"}) {
    Metadata md;
    ASSERT_TRUE(synthetic_bpe_vocab(arch, 40000, &md).is_ok());
    const GgufValue* toks = md.find("tokenizer.ggml.tokens");
    const GgufValue* merges = md.find("tokenizer.ggml.merges");
    const GgufValue* types = md.find("tokenizer.ggml.token_type");
    ASSERT_TRUE(toks && merges && types);
    EXPECT_EQ(toks->strings.size(), 40000u);
    EXPECT_EQ(types->ints.size(), 40000u);
    EXPECT_EQ(*md.get_string("tokenizer.ggml.model"), "gpt2");
    const std::set<std::string> vocab(toks->strings.begin(), toks->strings.end());
    EXPECT_EQ(vocab.size(), toks->strings.size()) << "duplicate tokens";
    // Every merge joins two tokens into a token.
    for (const std::string& mg : merges->strings) {
      const size_t sp = mg.find(' ');
      ASSERT_NE(sp, std::string::npos);
      const std::string l = mg.substr(0, sp), r = mg.substr(sp + 1);
      ASSERT_TRUE(vocab.count(l) && vocab.count(r) && vocab.count(l + r)) << mg;
    }
    const int64_t bos = *md.get_int("tokenizer.ggml.bos_token_id");
    EXPECT_EQ(types->ints[bos], 3);  // control
    EXPECT_EQ(*md.get_bool("tokenizer.ggml.add_bos_token"), arch == "llama");
  }
  Metadata md;
  EXPECT_FALSE(synthetic_bpe_vocab("llama", 200, &md).is_ok());
}

TEST(GenModelShapes, KnownAndRefused) {
  for (const std::string name : {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-1.5b", "gemma-3-270m",
                                 "mixtral-tiny"}) {
    auto s = gen_model_shape(name);
    ASSERT_TRUE(s.is_ok()) << name;
    EXPECT_TRUE(validate_gen_model_shape(*s).is_ok()) << name;
  }
  auto l8 = gen_model_shape("llama-3.1-8b");
  EXPECT_EQ(l8->n_layer, 32);
  EXPECT_EQ(l8->n_ff, 14336);
  auto q15 = gen_model_shape("qwen2.5-1.5b");  // Qwen2.5-1.5B's config.json
  EXPECT_EQ(q15->n_embd, 1536);
  EXPECT_EQ(q15->n_ff, 8960);
  EXPECT_EQ(q15->n_head_kv, 2);
  EXPECT_TRUE(q15->qkv_bias);
  auto mix = gen_model_shape("mixtral-tiny");
  EXPECT_EQ(mix->n_expert, 8);
  EXPECT_EQ(mix->n_expert_used, 2);
  EXPECT_FALSE(gen_model_shape("gpt-5").is_ok());
  EXPECT_FALSE(gen_model_arch_defaults("mamba").is_ok());

  GenModelShape s = tiny("llama");
  s.n_head_kv = 3;  // 4 % 3 != 0
  EXPECT_FALSE(validate_gen_model_shape(s).is_ok());
  s = tiny("llama");
  s.head_dim = 15;
  EXPECT_FALSE(validate_gen_model_shape(s).is_ok());
  s = tiny("llama");
  s.n_layer = 0;
  EXPECT_FALSE(validate_gen_model_shape(s).is_ok());
  s = tiny("qwen2");
  s.n_expert = 4, s.n_expert_used = 2;  // experts: llama (Mixtral) layout only
  EXPECT_FALSE(validate_gen_model_shape(s).is_ok());
  s = tiny("llama");
  s.n_expert = 4, s.n_expert_used = 5;
  EXPECT_FALSE(validate_gen_model_shape(s).is_ok());
}

// Mixtral layout: llama.cpp's tensor names and shapes (checked against
// llama.cpp itself by tools/gen_model_llama_cpp_check.py); ember refuses to
// load it with a clear message until it supports experts.
TEST_F(GenModelTest, MixtureOfExpertsLayout) {
  GenModelShape s = tiny("llama");
  s.n_expert = 4;
  s.n_expert_used = 2;
  GenModelOptions o;
  o.type = DType::kQ8_0;
  ThreadPool pool(2);
  auto stats = write_random_model(s, o, path("moe.gguf"), pool);
  ASSERT_TRUE(stats.is_ok()) << stats.status().message();
  auto f = GgufFile::open(path("moe.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->metadata().get_int("llama.expert_count"), 4);
  EXPECT_EQ((*f)->metadata().get_int("llama.expert_used_count"), 2);
  const GgufTensorInfo* router = (*f)->find_tensor("blk.1.ffn_gate_inp.weight");
  const GgufTensorInfo* down = (*f)->find_tensor("blk.1.ffn_down_exps.weight");
  const GgufTensorInfo* up = (*f)->find_tensor("blk.1.ffn_up_exps.weight");
  ASSERT_TRUE(router && down && up && (*f)->find_tensor("blk.2.ffn_gate_exps.weight"));
  EXPECT_EQ(router->view.type, DType::kF32);
  EXPECT_EQ(router->view.ne[0], 64);
  EXPECT_EQ(router->view.ne[1], 4);
  EXPECT_EQ(up->view.type, DType::kQ8_0);
  EXPECT_EQ(up->view.n_dims, 3);
  EXPECT_EQ(up->view.ne[1], 96);
  EXPECT_EQ(down->view.ne[0], 96);
  EXPECT_EQ(down->view.ne[1], 64);
  EXPECT_EQ(down->view.ne[2], 4);
  EXPECT_EQ((*f)->find_tensor("blk.0.ffn_up.weight"), nullptr);
  // Each expert's matrices differ (seeded per row of the 3-D tensor).
  const uint8_t* e0 = static_cast<const uint8_t*>(up->view.data);
  const size_t expert_bytes = up->view.nbytes / 4;
  EXPECT_NE(std::memcmp(e0, e0 + expert_bytes, expert_bytes), 0);
  auto model = Model::load(path("moe.gguf"));  // ember runs the Mixtral layout
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->config().layers[1].ffn_kind, FfnKind::kMoe);
  EXPECT_EQ((*model)->config().layers[1].n_ff_exp, 96);
  EXPECT_TRUE((*model)->config().layers[1].moe_norm_topk);
}

// The MoE shapes: the released models' hyper-parameters, the cut ones
// their first layers.
TEST_F(GenModelTest, MixtureOfExpertsShapes) {
  auto q = gen_model_shape("qwen3-30b-a3b");
  auto q12 = gen_model_shape("qwen3-30b-a3b-12l");
  auto o = gen_model_shape("olmoe-1b-7b");
  auto m = gen_model_shape("mixtral-8x7b-4l");
  ASSERT_TRUE(q.is_ok() && q12.is_ok() && o.is_ok() && m.is_ok());
  EXPECT_EQ(q->arch, "qwen3moe");
  EXPECT_EQ(q->n_layer, 48);
  EXPECT_EQ(q12->n_layer, 12);
  EXPECT_EQ(q->n_expert, 128);
  EXPECT_EQ(q->n_expert_used, 8);
  EXPECT_EQ(q->n_ff_exp, 768);
  EXPECT_EQ(q->head_size(), 128);
  EXPECT_EQ(o->arch, "olmoe");
  EXPECT_EQ(o->n_expert, 64);
  EXPECT_EQ(o->n_ff, 1024);
  EXPECT_EQ(m->arch, "llama");
  EXPECT_EQ(m->n_expert, 8);
  EXPECT_EQ(m->n_expert_used, 2);
  EXPECT_EQ(m->n_ff, 14336);
  for (const auto& s : {*q, *q12, *o, *m}) EXPECT_TRUE(validate_gen_model_shape(s).is_ok()) << s.name;
  // A qwen3moe file written small loads with the expert keys llama.cpp reads.
  GenModelShape t = *q12;
  t.n_layer = 2, t.n_embd = 64, t.n_ff = 96, t.n_ff_exp = 32, t.n_head = 4, t.n_head_kv = 2, t.head_dim = 16;
  t.n_vocab = 300, t.n_expert = 8;
  GenModelOptions opts;
  opts.type = DType::kQ8_0;
  ThreadPool pool(2);
  ASSERT_TRUE(write_random_model(t, opts, path("q3moe.gguf"), pool).is_ok());
  auto f = GgufFile::open(path("q3moe.gguf"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ((*f)->metadata().get_int("qwen3moe.expert_feed_forward_length"), 32);
  EXPECT_EQ((*f)->metadata().get_int("qwen3moe.feed_forward_length"), 96);
  auto model = Model::load(path("q3moe.gguf"));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->config().layers[0].n_expert, 8);
}

TEST_F(GenModelTest, BadOutputPathFails) {
  ThreadPool pool(1);
  EXPECT_FALSE(write_random_model(tiny("llama"), GenModelOptions{}, path("no/such/dir/x.gguf"), pool).is_ok());
}

TEST_F(GenModelTest, GemmaVocabularyFromTheDefaultModel) {
  if (!std::filesystem::exists(kDefaultModel)) GTEST_SKIP() << "default model not installed";
  auto src = open_model_file(kDefaultModel);
  ASSERT_TRUE(src.is_ok());
  GenModelShape s = tiny("gemma3");
  GenModelOptions o;
  o.vocab = &(*src)->metadata;
  ThreadPool pool(2);
  auto stats = write_random_model(s, o, path("g.gguf"), pool);
  ASSERT_TRUE(stats.is_ok()) << stats.status().message();
  EXPECT_EQ(stats->n_vocab, 262144);
  auto model = Model::load(path("g.gguf"));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->config().n_vocab, 262144);
  EXPECT_EQ(*(*model)->file().metadata.get_string("tokenizer.ggml.model"), "llama");
}

}  // namespace
}  // namespace ember
