// Activation sparsity end to end on tiny random llamas (Q8_0, and Q4_K with
// Q6_K parts): the calibrated thresholds are exactly the quantiles of each
// block input's |x| that a plain forward pass of the dense model sees
// (computed here independently, with an observer over whole forwards); the
// thresholds round-trip through a written GGUF; the column copies exist for
// the sparsified linears; decode under auto / skip / dense gives the same
// logits bit for bit, batched or one sequence at a time, and off (the dense
// model) differs; bad metadata and a bad S are clear errors. The greedy
// allocation: every block's parameter-weighted mean level reaches S (by at
// most one step more), and each of its first steps went to the input whose
// step gave the least block error, recomputed here with plain forward
// passes of the model under Model::set_activation_thresholds.
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
  // The file at src calibrated with o over the windows of toks.
  static Result<std::unique_ptr<ModelFile>> calibrate(const std::string& src, const std::vector<int32_t>& toks,
                                                      const ActSparsityOptions& o, ThreadPool& pool,
                                                      ActSparsityReport* rep) {
    auto file = open_model_file(src);
    if (!file) return file.status();
    return calibrate_act_sparsity(std::move(file.value()), toks, o, pool, rep);
  }

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

// The |x| of every block input of m over the first two windows of W tokens.
std::map<std::pair<int, int>, std::vector<float>> dense_inputs(const Model& m, ThreadPool& pool,
                                                               const std::vector<int32_t>& toks, int64_t W) {
  Collect c;
  ForwardContext ctx(m, pool, static_cast<int>(W));
  ctx.set_observer(&c);
  for (int w = 0; w < 2; ++w) {
    ContiguousKvCache cache(m.config(), W);
    EXPECT_TRUE(ctx.forward(toks.data() + w * W, W, 0, cache, nullptr).is_ok());
  }
  return std::move(c.abs);
}

TEST_F(ActSparsityTest, ThresholdsAreTheQuantilesOfTheDenseInputs) {
  const std::string src = write_tiny(DType::kQ8_0, 64, 96, "q8.gguf");
  const int64_t W = 64;
  const std::vector<int32_t> toks = tokens(2 * W + 10);  // two windows; the rest unused
  ThreadPool pool(2);
  ActSparsityOptions o;
  o.sparsity = 0.4;
  o.window = W;
  o.allocation = ActAllocation::kUniform;
  ActSparsityReport rep;
  auto out = calibrate(src, toks, o, pool, &rep);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(rep.tokens, 2 * W);
  ASSERT_EQ(rep.thresholds.size(), 8u);

  auto model = Model::load(src);
  ASSERT_TRUE(model.is_ok());
  auto abs = dense_inputs(**model, pool, toks, W);
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < kActInputs; ++i) {
      std::vector<float> v = abs[{l, i}];
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
  EXPECT_TRUE(rep.steps.empty());  // uniform searches nothing
}

// Block outputs of one layer over whole forwards.
class BlockOut : public ForwardObserver {
 public:
  explicit BlockOut(int layer) : layer_(layer) {}
  std::vector<float> y;
  void on_block_output(int layer, const float* x, int64_t n_rows, int64_t n_embd) override {
    if (layer == layer_) y.insert(y.end(), x, x + n_rows * n_embd);
  }

 private:
  int layer_;
};

TEST_F(ActSparsityTest, GreedyReachesSAndEachStepTakesTheLeastBlockError) {
  const int64_t E = 64, W = 64;
  const std::string src = write_tiny(DType::kQ8_0, E, 96, "greedy.gguf");
  const std::vector<int32_t> toks = tokens(2 * W);
  ThreadPool pool(2);
  ActSparsityOptions o;
  o.sparsity = 0.4f;  // as the CLI reads it: 0.4 + 6e-9
  o.window = W;
  EXPECT_EQ(o.allocation, ActAllocation::kGreedy);  // the default
  ActSparsityReport rep;
  auto out = calibrate(src, toks, o, pool, &rep);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  ASSERT_EQ(rep.level.size(), 8u);
  // Parameters: Q 64x64, K and V 64x32 (2 KV heads of 16), O 64x64, gate and up 96x64, down 64x96.
  const double p[4] = {8192, 4096, 12288, 6144}, P = 30720;
  bool uneven = false;
  for (int l = 0; l < 2; ++l) {
    double mean = 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(rep.params[l * 4 + i], p[i]);
      EXPECT_EQ(rep.step[l * 4 + i], 0.05 * (P / 4) / p[i]);
      mean += p[i] * rep.level[l * 4 + i] / P;
      if (rep.level[l * 4 + i] != rep.level[l * 4]) uneven = true;
    }
    // 0.4 is 32 steps of 0.0125: no step more (within 1e-6 of S counts as S).
    EXPECT_GE(mean, 0.4 - 1e-6) << "block " << l;
    EXPECT_LE(mean, 0.4 + 1e-6) << "block " << l;
  }
  EXPECT_TRUE(uneven) << "greedy gave every input the same level";
  EXPECT_EQ(rep.steps.size(), 2u * 32);  // 0.4 / 0.0125 per block

  // Independently: the dense inputs' sorted |x| and, per block, the first
  // steps' candidate errors from plain forwards.
  auto model = Model::load(src);
  ASSERT_TRUE(model.is_ok());
  auto abs = dense_inputs(**model, pool, toks, W);
  for (auto& [key, v] : abs) std::sort(v.begin(), v.end());
  auto quantile = [&](int l, int i, double s) {
    const std::vector<float>& v = abs[{l, i}];
    const auto k = static_cast<size_t>(std::floor(s * static_cast<double>(v.size())));
    return k > 0 ? v[k - 1] : 0.0f;
  };
  auto block_out = [&](int l, const std::vector<float>& t) {
    EXPECT_TRUE((*model)->set_activation_thresholds(t).is_ok());
    BlockOut b(l);
    ForwardContext ctx(**model, pool, static_cast<int>(W));
    ctx.set_observer(&b);
    for (int w = 0; w < 2; ++w) {
      ContiguousKvCache cache((*model)->config(), W);
      EXPECT_TRUE(ctx.forward(toks.data() + w * W, W, 0, cache, nullptr).is_ok());
    }
    return b.y;
  };
  size_t at = 0;  // rep.steps index of block l's first step
  for (int l = 0; l < 2; ++l) {
    const std::vector<float> dense = block_out(l, {});
    ASSERT_EQ(dense.size(), static_cast<size_t>(2 * W * E));
    int count[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k, ++at) {
      ASSERT_LT(at, rep.steps.size());
      ASSERT_EQ(rep.steps[at].layer, l);
      double err[4];
      int best = -1;
      for (int i = 0; i < 4; ++i) {
        std::vector<float> t(8, 0.0f);
        for (int j = 0; j < 4; ++j) t[l * 4 + j] = quantile(l, j, (count[j] + (j == i)) * rep.step[l * 4 + j]);
        const std::vector<float> y = block_out(l, t);
        double sum = 0;
        for (int64_t r = 0; r < 2 * W; ++r) {
          double sq = 0;
          for (int64_t e = 0; e < E; ++e) sq += std::pow(static_cast<double>(y[r * E + e]) - dense[r * E + e], 2);
          sum += std::sqrt(sq);
        }
        err[i] = sum / (2 * W);
        EXPECT_NEAR(rep.steps[at].error[i], err[i], 1e-6 * err[i] + 1e-12) << "block " << l << " step " << k;
        if (best < 0 || err[i] < err[best]) best = i;
      }
      EXPECT_EQ(rep.steps[at].chosen, best) << "block " << l << " step " << k;
      ++count[best];
    }
    while (at < rep.steps.size() && rep.steps[at].layer == l) ++at;
    // The written thresholds are the quantiles at the chosen levels.
    for (int i = 0; i < 4; ++i) EXPECT_EQ(rep.thresholds[l * 4 + i], quantile(l, i, rep.level[l * 4 + i]));
  }
  EXPECT_EQ(at, rep.steps.size());
}

// An S between multiples of the step: the last step overshoots, by less than one step.
TEST_F(ActSparsityTest, GreedyOvershootsByLessThanOneStep) {
  const std::string src = write_tiny(DType::kQ8_0, 64, 96, "greedy41.gguf");
  ThreadPool pool(2);
  ActSparsityOptions o;
  o.sparsity = 0.41;
  o.window = 64;
  ActSparsityReport rep;
  auto out = calibrate(src, tokens(128), o, pool, &rep);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(rep.steps.size(), 2u * 33);
  for (int l = 0; l < 2; ++l) {
    double mean = 0, P = 0;
    for (int i = 0; i < 4; ++i) mean += rep.params[l * 4 + i] * rep.level[l * 4 + i], P += rep.params[l * 4 + i];
    EXPECT_GE(mean / P, 0.41);
    EXPECT_LT(mean / P, 0.41 + 0.0125);
  }
}

TEST_F(ActSparsityTest, BadAllocationOptionsAreClearErrors) {
  EXPECT_EQ(*act_allocation_from_name("uniform"), ActAllocation::kUniform);
  EXPECT_EQ(*act_allocation_from_name("greedy"), ActAllocation::kGreedy);
  auto bad = act_allocation_from_name("owl");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'owl' (uniform, greedy)"), std::string::npos);
  const std::string src = write_tiny(DType::kQ8_0, 64, 96, "badstep.gguf");
  ThreadPool pool(1);
  for (double step : {0.0, 1.0, -0.05}) {
    auto f = open_model_file(src);
    ASSERT_TRUE(f.is_ok());
    ActSparsityOptions o;
    o.window = 64;
    o.allocation = ActAllocation::kGreedy;
    o.base_step = step;
    ActSparsityReport rep;
    auto r = calibrate_act_sparsity(std::move(f.value()), tokens(64), o, pool, &rep);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("step"), std::string::npos) << r.status().message();
  }
  auto model = Model::load(src);
  ASSERT_TRUE(model.is_ok());
  EXPECT_FALSE((*model)->set_activation_thresholds(std::vector<float>(7, 0.1f)).is_ok());
  EXPECT_FALSE((*model)->set_activation_thresholds({0, 0, 0, 0, 0, -1, 0, 0}).is_ok());
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
    ActSparsityOptions o;
    o.sparsity = 0.5;
    o.window = 64;
    ActSparsityReport rep;
    auto out = calibrate(src, tokens(128), o, pool, &rep);
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
