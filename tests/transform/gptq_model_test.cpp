// Layer-by-layer GPTQ over a model (transform/gptq_model.h) on a tiny
// random-weight llama: the Hessians' diagonals equal the importance sums of
// the same inputs, a HessianCollector's sums against double X^T X, every GPTQ entry comes out in its type while the others
// are left to the plan, and the quantized model's logits are closer to the
// source's than round-to-nearest's on tokens it was not calibrated on.
#include "transform/gptq_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cmath>
#include <filesystem>
#include <random>

#include "model/model.h"
#include "transform/convert.h"
#include "transform/gen_model.h"
#include "transform/imatrix.h"
#include "transform/quantizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class GptqModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_gptq_model_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 2, s.n_embd = 128, s.n_ff = 256, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 256;
    GenModelOptions o;
    o.type = DType::kF32;
    o.seed = 9;
    o.weight_std = 0.08f;
    path_ = (dir_ / "tiny.gguf").string();
    ASSERT_TRUE(write_random_model(s, o, path_, pool_).is_ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<int32_t> tokens(int n, int mul, int add) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * mul + add + (i * i) % 7) % 300);
    return t;
  }

  // Mean squared difference of all logits of `m` from the source model's.
  double logit_error(const Model& m, const std::vector<int32_t>& toks) {
    auto src = Model::load(path_);
    EXPECT_TRUE(src.is_ok());
    const int64_t n = static_cast<int64_t>(toks.size());
    const int V = m.config().n_vocab;
    std::vector<float> a(n * V), b(n * V), last(V);
    for (auto [model, out] : {std::pair<const Model*, std::vector<float>*>{src->get(), &a}, {&m, &b}}) {
      ForwardContext ctx(*model, pool_, 64);
      ContiguousKvCache cache(model->config(), n);
      EXPECT_TRUE(ctx.forward(toks.data(), n, 0, cache, last.data(), out->data()).is_ok());
    }
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
    return s / static_cast<double>(a.size());
  }

  ThreadPool pool_{2};
  fs::path dir_;
  std::string path_;
};

TEST_F(GptqModelTest, HessianDiagonalIsTheImportance) {
  auto m = Model::load(path_);
  ASSERT_TRUE(m.is_ok());
  const std::vector<int32_t> t = tokens(64, 31, 5);
  for (int layer : {0, 1}) {
    HessianCollector hc(layer, pool_);
    ImportanceCollector ic(false, false);
    for (ForwardObserver* obs : {static_cast<ForwardObserver*>(&hc), static_cast<ForwardObserver*>(&ic)}) {
      ForwardContext ctx(**m, pool_, 64);
      ctx.set_observer(obs);
      ContiguousKvCache cache((*m)->config(), 64);
      std::vector<float> last((*m)->config().n_vocab);
      ASSERT_TRUE(ctx.forward(t.data(), 64, 0, cache, last.data()).is_ok());
    }
    for (const char* role : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      const std::string name = "blk." + std::to_string(layer) + "." + role + ".weight";
      SCOPED_TRACE(name);
      const std::vector<double>* H = hc.hessian(name);
      ASSERT_NE(H, nullptr);
      EXPECT_EQ(hc.tokens(name), 64);
      const ImatrixEntry& e = ic.result().entries.at(name);
      const int64_t n = static_cast<int64_t>(e.sums.size());
      ASSERT_EQ(static_cast<int64_t>(H->size()), n * n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR((*H)[i * n + i], e.sums[i], 1e-9 * (1 + e.sums[i]));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) ASSERT_EQ((*H)[i * n + j], (*H)[j * n + i]);
    }
    EXPECT_EQ(hc.hessian("blk.7.attn_q.weight"), nullptr);
  }
}

TEST(HessianCollector, SumsOfProductsOverCalls) {
  // Two calls of strided rows (K shares Q's matrix when it reads the same
  // rows); a third tensor of another width gets its own.
  ThreadPool pool(3);
  HessianCollector hc(0, pool);
  const int64_t n_in = 70, ld = 83, rows[2] = {37, 100};
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<double> want(n_in * n_in, 0.0);
  std::vector<std::vector<float>> xs;
  for (int64_t n : rows) {
    std::vector<float> x(n * ld);
    for (float& v : x) v = d(rng) * 3.f;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < n_in; ++i)
        for (int64_t j = 0; j < n_in; ++j) want[i * n_in + j] += static_cast<double>(x[r * ld + i]) * x[r * ld + j];
    hc.on_linear_input(0, LinearRole::kQ, x.data(), ld, n, n_in);
    hc.on_linear_input(0, LinearRole::kK, x.data(), ld, n, n_in);
    xs.push_back(std::move(x));
  }
  std::vector<float> other(10 * 32, 1.0f);
  hc.on_linear_input(0, LinearRole::kO, other.data(), 32, 10, 32);
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight"}) {
    const std::vector<double>* H = hc.hessian(name);
    ASSERT_NE(H, nullptr);
    EXPECT_EQ(hc.tokens(name), 137);
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j) {
        const double w = want[i * n_in + j], tol = i == j ? 1e-12 * w : 1e-5 * std::sqrt(want[i * n_in + i] * want[j * n_in + j]);
        ASSERT_NEAR((*H)[i * n_in + j], w, tol) << i << "," << j;
        ASSERT_EQ((*H)[i * n_in + j], (*H)[j * n_in + i]);
      }
  }
  const std::vector<double>* O = hc.hessian("blk.0.attn_output.weight");
  ASSERT_NE(O, nullptr);
  for (double v : *O) ASSERT_EQ(v, 10.0);
  EXPECT_EQ(hc.hessian("blk.0.ffn_up.weight"), nullptr);
}

TEST_F(GptqModelTest, QuantizesLayerByLayerAndBeatsRoundToNearest) {
  for (DType type : {DType::kQ4_0}) {  // the k-quant paths of GPTQ: gptq_test.cpp
    SCOPED_TRACE(dtype_name(type));
    ConvertOptions opts;
    opts.type = type;
    auto src = open_model_file(path_);
    ASSERT_TRUE(src.is_ok());
    auto plan = plan_quantization(**src, opts);
    ASSERT_TRUE(plan.is_ok());
    int n_gptq = 0;
    for (QuantPlanEntry& e : plan->entries)
      if (e.method == QuantMethod::kRtn && e.layer >= 0 && gptq_supports(e.target)) e.method = QuantMethod::kGptq, ++n_gptq;
    ASSERT_EQ(n_gptq, 14);
    GptqRunOptions go;
    go.chunk_size = 64;
    int progress = 0;
    go.progress = [&](int done, int total) { progress = done * 100 + total; };
    auto done = run_gptq(std::move(src.value()), &*plan, tokens(1024, 17, 3), go, pool_);
    ASSERT_TRUE(done.is_ok()) << done.status().message();
    EXPECT_EQ(progress, 202);
    for (const QuantPlanEntry& e : plan->entries)
      if (e.layer >= 0 && e.ne.size() == 2) {
        EXPECT_EQ(e.method, QuantMethod::kCopy) << e.name;
        EXPECT_EQ((*done)->tensor(e.name)->type, type) << e.name;
      }
    auto out = convert_model(std::move(done.value()), *plan, pool_);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    auto gptq_model = Model::from_file(std::move(out.value()));
    ASSERT_TRUE(gptq_model.is_ok()) << gptq_model.status().message();
    auto rtn_src = open_model_file(path_);
    ASSERT_TRUE(rtn_src.is_ok());
    auto rtn = convert_model(std::move(rtn_src.value()), opts, pool_);
    ASSERT_TRUE(rtn.is_ok());
    auto rtn_model = Model::from_file(std::move(rtn.value()));
    ASSERT_TRUE(rtn_model.is_ok());
    const std::vector<int32_t> held_out = tokens(96, 23, 101);
    const double e_gptq = logit_error(**gptq_model, held_out), e_rtn = logit_error(**rtn_model, held_out);
    // Measured 0.0864 vs 0.1113 (random weights and tokens: nearly isotropic
    // activations, where GPTQ gains least).
    EXPECT_LT(e_gptq, 0.9 * e_rtn) << "gptq " << e_gptq << " rtn " << e_rtn;
  }
  // Errors: no whole chunk; a GPTQ entry outside the blocks.
  auto src = open_model_file(path_);
  ConvertOptions opts;
  opts.type = DType::kQ4_0;
  auto plan = plan_quantization(**src, opts);
  for (QuantPlanEntry& e : plan->entries)
    if (e.name == "output.weight") e.method = QuantMethod::kGptq;
  EXPECT_FALSE(run_gptq(std::move(src.value()), &*plan, tokens(256, 17, 3), {}, pool_).is_ok());
  auto src2 = open_model_file(path_);
  auto plan2 = plan_quantization(**src2, opts);
  EXPECT_FALSE(run_gptq(std::move(src2.value()), &*plan2, tokens(10, 17, 3), {}, pool_).is_ok());
}

}  // namespace
}  // namespace ember
