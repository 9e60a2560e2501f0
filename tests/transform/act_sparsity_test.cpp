// Activation sparsity end to end on tiny random llamas (Q8_0, and Q4_K with
// Q6_K parts): the calibrated thresholds are exactly the quantiles of each
// block input's |x| that a plain forward pass of the dense model sees
// (computed here independently, with an observer over whole forwards); the
// thresholds round-trip through a written GGUF; the column copies exist for
// the sparsified linears; decode under auto / skip / dense gives the same
// logits bit for bit, batched or one sequence at a time, and off (the dense
// model) differs; bad metadata and a bad S are clear errors.
#include "transform/act_sparsity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "kernels/act_sparse.h"
#include "model/act_sparsity.h"
#include "model/model.h"
#include "transform/gen_model.h"
#include "transform/pipeline.h"

namespace ember {
namespace {

class ActSparsityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ember_act_sparsity_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A 2-block llama of width e, FFN f, in type t.
  std::string write_tiny(DType t, int e, int f, const std::string& name) {
    auto s = gen_model_arch_defaults("llama");
    EXPECT_TRUE(s.is_ok());
    GenModelShape g = *s;
    g.n_layer = 2;
    g.n_embd = e;
    g.n_ff = f;
    g.n_head = 4;
    g.n_head_kv = 2;
    g.n_vocab = 300;
    g.n_ctx = 256;
    GenModelOptions o;
    o.type = t;
    o.seed = 7;
    o.weight_std = 0.05f;
    ThreadPool pool(2);
    auto st = write_random_model(g, o, path(name), pool);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    return path(name);
  }
  std::filesystem::path dir_;
};

std::vector<int32_t> tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 5 + i * i % 11) % 300);
  return t;
}

// |x| of every block input, keyed (layer, input), over whole forward passes.
class Collect : public ForwardObserver {
 public:
  std::map<std::pair<int, int>, std::vector<float>> abs;
  void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                       int64_t n_in) override {
    const int i = role == LinearRole::kQ ? 0 : role == LinearRole::kO ? 1 : role == LinearRole::kGate ? 2
                  : role == LinearRole::kDown                         ? 3
                                                                      : -1;
    if (i < 0 || layer < 0) return;
    auto& v = abs[{layer, i}];
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t c = 0; c < n_in; ++c) v.push_back(std::fabs(x[r * ld + c]));
  }
};

TEST_F(ActSparsityTest, ThresholdsAreTheQuantilesOfTheDenseInputs) {
  const std::string src = write_tiny(DType::kQ8_0, 64, 96, "q8.gguf");
  const int64_t W = 64;
  const std::vector<int32_t> toks = tokens(2 * W + 10);  // two windows; the rest unused
  ThreadPool pool(2);
  auto file = open_model_file(src);
  ASSERT_TRUE(file.is_ok());
  ActSparsityOptions o;
  o.sparsity = 0.4;
  o.window = W;
  ActSparsityReport rep;
  auto out = calibrate_act_sparsity(std::move(file.value()), toks, o, pool, &rep);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(rep.tokens, 2 * W);
  ASSERT_EQ(rep.thresholds.size(), 8u);

  auto model = Model::load(src);
  ASSERT_TRUE(model.is_ok());
  Collect c;
  ForwardContext ctx(**model, pool, static_cast<int>(W));
  ctx.set_observer(&c);
  for (int w = 0; w < 2; ++w) {
    ContiguousKvCache cache((*model)->config(), W);
    ASSERT_TRUE(ctx.forward(toks.data() + w * W, W, 0, cache, nullptr).is_ok());
  }
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < kActInputs; ++i) {
      std::vector<float> v = c.abs[{l, i}];
      ASSERT_FALSE(v.empty());
      const auto k = static_cast<size_t>(std::floor(0.4 * v.size()));
      std::nth_element(v.begin(), v.begin() + (k - 1), v.end());
      EXPECT_EQ(rep.thresholds[l * 4 + i], v[k - 1]) << "layer " << l << " input " << i;
      EXPECT_GE(rep.zeroed[l * 4 + i], static_cast<double>(k) / v.size());
      EXPECT_LT(rep.zeroed[l * 4 + i], 0.41);
    }
  auto t = read_act_thresholds((*out)->metadata, 2);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t, rep.thresholds);
  EXPECT_NEAR(*(*out)->metadata.get_float(kActSparsityTargetKey), 0.4, 1e-6);
}

// Decode: three sequences prefilled alone, then steps batched together and
// (on other caches) one at a time; the logits of every step.
std::vector<float> decode(const Model& m, int threads, bool batched) {
  ThreadPool pool(threads);
  ForwardContext ctx(m, pool, 32);
  const ModelConfig& cfg = m.config();
  const int64_t V = cfg.n_vocab;
  std::vector<std::unique_ptr<ContiguousKvCache>> caches;
  std::vector<int32_t> last(3);
  for (int s = 0; s < 3; ++s) {
    caches.push_back(std::make_unique<ContiguousKvCache>(cfg, 32));
    const std::vector<int32_t> p = tokens(8 + s);
    std::vector<float> lg(V);
    EXPECT_TRUE(ctx.forward(p.data() + s, 8, 0, *caches[s], lg.data()).is_ok());
    last[s] = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
  std::vector<float> out;
  for (int step = 0; step < 4; ++step) {
    std::vector<float> lg(3 * V);
    if (batched) {
      SeqBatch sb[3];
      for (int s = 0; s < 3; ++s) sb[s] = {&last[s], 1, 8 + step, caches[s].get(), true};
      EXPECT_TRUE(ctx.forward_ragged(sb, 3, lg.data()).is_ok());
    } else {
      for (int s = 0; s < 3; ++s) EXPECT_TRUE(ctx.forward(&last[s], 1, 8 + step, *caches[s], lg.data() + s * V).is_ok());
    }
    for (int s = 0; s < 3; ++s) last[s] = (last[s] * 7 + step + s) % static_cast<int32_t>(V);
    out.insert(out.end(), lg.begin(), lg.end());
  }
  return out;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(ActSparsityTest, ModesGiveTheSameBitsAndOffIsTheDenseModel) {
  for (auto [type, e, f] : {std::tuple{DType::kQ8_0, 64, 96}, std::tuple{DType::kQ4_K, 256, 512}}) {
    SCOPED_TRACE(dtype_name(type));
    const std::string src = write_tiny(type, e, f, "m.gguf");
    ThreadPool pool(2);
    auto file = open_model_file(src);
    ASSERT_TRUE(file.is_ok());
    ActSparsityOptions o;
    o.sparsity = 0.5;
    o.window = 64;
    ActSparsityReport rep;
    auto out = calibrate_act_sparsity(std::move(file.value()), tokens(128), o, pool, &rep);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    PipelineResult r;
    r.file = std::move(out.value());
    size_t bytes = 0;
    ASSERT_TRUE(write_pipeline_output(r, 0, path("teal.gguf"), &bytes).is_ok());
    auto model = Model::load(path("teal.gguf"));
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    Model& m = **model;
    EXPECT_EQ(m.activation_thresholds(), rep.thresholds);
    EXPECT_FLOAT_EQ(m.weights().layers[1].down.act_threshold, rep.thresholds[7]);
    const std::vector<float> automatic = decode(m, 2, true);
    EXPECT_TRUE(same(automatic, decode(m, 1, false)));
    // auto builds column copies only for the types its rule may use (Q8_0 with the SIMD kernel).
    const DType base = dtype_layout_base(m.weights().layers[1].down.weight->type);
    EXPECT_EQ(m.build_activation_columns(2) > 0, col_auto_pays(base));
    EXPECT_EQ(static_cast<bool>(m.weights().layers[1].down.cols), col_auto_pays(base));
    EXPECT_TRUE(same(automatic, decode(m, 2, true)));
    m.set_activation_sparsity(ActSparsityMode::kSkip);  // the rest (all, for Q4_K)
    EXPECT_EQ(m.build_activation_columns(2) > 0, !col_auto_pays(base));
    EXPECT_TRUE(m.weights().layers[1].down.cols);
    EXPECT_TRUE(same(automatic, decode(m, 3, true)));
    EXPECT_TRUE(same(automatic, decode(m, 2, false)));
    m.set_activation_sparsity(ActSparsityMode::kDense);
    EXPECT_FALSE(m.weights().layers[1].down.cols);
    EXPECT_TRUE(same(automatic, decode(m, 2, true)));
    m.set_activation_sparsity(ActSparsityMode::kOff);
    EXPECT_EQ(m.weights().layers[0].q.act_threshold, 0.0f);
    const std::vector<float> dense = decode(m, 2, true);
    EXPECT_FALSE(same(automatic, dense));
    auto plain = Model::load(src);  // the source: the dense model
    ASSERT_TRUE(plain.is_ok());
    EXPECT_TRUE((*plain)->activation_thresholds().empty());
    EXPECT_TRUE(same(dense, decode(**plain, 2, true)));
  }
}

TEST_F(ActSparsityTest, BadThresholdsAndSparsityAreClearErrors) {
  const std::string src = write_tiny(DType::kQ8_0, 64, 96, "bad.gguf");
  auto load_with = [&](GgufValue v) {
    auto f = open_model_file(src);
    EXPECT_TRUE(f.is_ok());
    (*f)->metadata.set(kActSparsityThresholdsKey, std::move(v));
    auto m = Model::from_file(std::move(f.value()));
    EXPECT_FALSE(m.is_ok());
    return m.is_ok() ? std::string() : m.status().message();
  };
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kFloat32;
  a.nums.assign(7, 0.1);  // 2 blocks need 8
  a.count = 7;
  std::string msg = load_with(a);
  EXPECT_NE(msg.find(kActSparsityThresholdsKey), std::string::npos) << msg;
  EXPECT_NE(msg.find("7 values for 2 blocks"), std::string::npos) << msg;
  a.nums.assign(8, 0.1);
  a.count = 8;
  a.nums[5] = -1;
  msg = load_with(a);
  EXPECT_NE(msg.find("block 1, attn_out"), std::string::npos) << msg;
  msg = load_with(Metadata::make_int_array({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_NE(msg.find("expected an array of float32"), std::string::npos) << msg;
  msg = load_with(Metadata::make_float(0.5));
  EXPECT_NE(msg.find("expected an array of float32"), std::string::npos) << msg;

  ThreadPool pool(1);
  for (double s : {0.0, 1.0, -0.1, static_cast<double>(NAN)}) {
    auto f = open_model_file(src);
    ASSERT_TRUE(f.is_ok());
    ActSparsityOptions o;
    o.sparsity = s;
    o.window = 64;
    ActSparsityReport rep;
    auto r = calibrate_act_sparsity(std::move(f.value()), tokens(64), o, pool, &rep);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("not in (0, 1)"), std::string::npos);
  }
}

}  // namespace
}  // namespace ember
