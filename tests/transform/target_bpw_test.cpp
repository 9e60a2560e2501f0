// --target-bpw (transform/target_bpw.h): the budget allocation against brute
// force on random instances, and the whole choice on a tiny random-weight
// llama: the file lands at (not above) the target, the activation weights
// and the probe steer the bits, and at the same size the chosen mix is closer
// to the source than one type for every matrix on held-out tokens.
#include "transform/target_bpw.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "eval/model_compare.h"
#include "model/model.h"
#include "transform/gen_model.h"
#include "transform/quantizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

double damage_of(const std::vector<BpwItem>& items, const std::vector<int>& pick, double* bits) {
  double d = 0;
  *bits = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    d += items[i].choices[pick[i]].damage;
    *bits += items[i].choices[pick[i]].bits * static_cast<double>(items[i].n_elements);
  }
  return d;
}

TEST(TargetBpwAllocate, MatchesBruteForce) {
  std::mt19937 rng(7);
  const double kBits[] = {2.5625, 3.4375, 4.5, 5.5, 6.5625, 8.5};
  for (int trial = 0; trial < 40; ++trial) {
    const int T = 2 + trial % 4;
    std::vector<BpwItem> items(T);
    double lo = 0, hi = 0;
    for (BpwItem& it : items) {
      it.n_elements = 64 + rng() % 4096;
      const int C = 2 + rng() % 4;
      double dmg = 1 + (rng() % 1000) / 10.0;
      for (int c = 0; c < C; ++c) {
        it.choices.push_back({DType::kQ4_0, kBits[c + (6 - C) * (rng() % 2)], dmg});
        dmg *= 0.2 + (rng() % 60) / 100.0;
      }
      double mn = 1e30, mx = 0;
      for (const BpwChoice& c : it.choices) mn = std::min(mn, c.bits), mx = std::max(mx, c.bits);
      lo += mn * it.n_elements, hi += mx * it.n_elements;
    }
    const double budget = lo + (hi - lo) * ((rng() % 1000) / 1000.0);
    auto pick = allocate_bpw(items, budget);
    ASSERT_TRUE(pick.is_ok()) << pick.status().message();
    double bits = 0;
    const double got = damage_of(items, *pick, &bits);
    EXPECT_LE(bits, budget + 1e-6);
    // Brute force: no combination that leaves one rounding unit per item
    // spare is better, and none within the budget is better than the DP by
    // more than what one unit per item can buy.
    const double margin = T * (budget - lo) / kBudgetUnits;
    std::vector<int> cur(T, 0);
    double best_margin = 1e300, best = 1e300;
    for (;;) {
      double b = 0;
      const double d = damage_of(items, cur, &b);
      if (b <= budget) best = std::min(best, d);
      if (b <= budget - margin) best_margin = std::min(best_margin, d);
      int i = 0;
      while (i < T && ++cur[i] == static_cast<int>(items[i].choices.size())) cur[i++] = 0;
      if (i == T) break;
    }
    EXPECT_LE(got, best_margin * (1 + 1e-12) + 1e-15) << "trial " << trial;
    EXPECT_GE(got, best * (1 - 1e-12) - 1e-15) << "trial " << trial;
  }
}

TEST(TargetBpwAllocate, EdgesAndErrors) {
  std::vector<BpwItem> items(2);
  for (BpwItem& it : items) {
    it.n_elements = 100;
    it.choices = {{DType::kQ4_0, 4.5, 10}, {DType::kQ8_0, 8.5, 1}};
  }
  auto all = allocate_bpw(items, 1e9);  // room for everything: least damage everywhere
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ((*all)[0], 1);
  EXPECT_EQ((*all)[1], 1);
  auto tight = allocate_bpw(items, 900);  // exactly the cheapest
  ASSERT_TRUE(tight.is_ok());
  EXPECT_EQ((*tight)[0], 0);
  EXPECT_EQ((*tight)[1], 0);
  EXPECT_FALSE(allocate_bpw(items, 899).is_ok());
  items[1].choices.clear();
  EXPECT_FALSE(allocate_bpw(items, 1e9).is_ok());
}

class TargetBpwModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_target_bpw_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 2, s.n_embd = 256, s.n_ff = 512, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 256;
    GenModelOptions o;
    o.type = DType::kF32;
    o.seed = 11;
    o.weight_std = 0.08f;
    path_ = (dir_ / "tiny.gguf").string();
    ASSERT_TRUE(write_random_model(s, o, path_, pool_).is_ok());
    auto f = open_model_file(path_);
    ASSERT_TRUE(f.is_ok());
    src_ = std::move(*f);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<int32_t> tokens(int n, int mul, int add) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * mul + add + (i * i) % 7) % 300);
    return t;
  }

  QuantPlan base_plan(DType t) {
    ConvertOptions o;
    o.type = t;
    auto p = plan_quantization(*src_, o);
    EXPECT_TRUE(p.is_ok());
    return *p;
  }

  // KL of the model `plan` writes against the source on held-out tokens.
  double held_out_kl(const QuantPlan& plan) {
    RtnQuantizer rtn;
    const QuantizerFor qf = [&](QuantMethod m) -> Quantizer* { return m == QuantMethod::kRtn ? &rtn : nullptr; };
    auto out = execute_quant_plan(std::make_unique<ModelFile>(*src_), plan, qf, pool_);
    EXPECT_TRUE(out.is_ok());
    auto m = Model::from_file(std::move(*out));
    auto ref = Model::load(path_);
    EXPECT_TRUE(m.is_ok() && ref.is_ok());
    WindowedCompareOptions wo;
    wo.n_ctx = 128;
    auto c = compare_models_windows(**ref, **m, tokens(512, 37, 3), wo, pool_);
    EXPECT_TRUE(c.is_ok());
    return c->kl_mean;
  }

  ThreadPool pool_{2};
  fs::path dir_;
  std::string path_;
  std::unique_ptr<ModelFile> src_;
};

TEST_F(TargetBpwModelTest, LandsAtTheTargetWithCandidateTypes) {
  QuantPlan plan = base_plan(DType::kQ8_0);
  TargetBpwOptions o;
  o.target_bpw = 4.8;
  auto rep = plan_target_bpw(*src_, &plan, {}, o, pool_);
  ASSERT_TRUE(rep.is_ok()) << rep.status().message();
  EXPECT_FALSE(rep->probed);
  EXPECT_LE(rep->bpw, 4.8);
  EXPECT_GT(rep->bpw, 4.6);  // the budget is used, not left idle
  EXPECT_DOUBLE_EQ(rep->bpw, plan_bits_per_weight(plan));
  std::map<DType, int> used;
  for (const QuantPlanEntry& e : plan.entries) {
    if (e.ne.size() != 2) continue;
    ++used[e.target];
    EXPECT_NE(std::find(o.candidates.begin(), o.candidates.end(), e.target), o.candidates.end()) << e.name;
    EXPECT_EQ(e.method, QuantMethod::kRtn) << e.name;
  }
  EXPECT_GE(used.size(), 2u);  // a mix, not one type
  // Below what the candidates reach: an error naming the floor.
  QuantPlan p2 = base_plan(DType::kQ8_0);
  o.target_bpw = 1.0;
  auto low = plan_target_bpw(*src_, &p2, {}, o, pool_);
  ASSERT_FALSE(low.is_ok());
  EXPECT_NE(low.status().message().find("smallest"), std::string::npos);
}

TEST_F(TargetBpwModelTest, ActivationWeightsSteerTheBits) {
  // The same tensor with 10^4 times the activation energy on its columns
  // must get at least as many bits, and here strictly more.
  const std::string hot = "blk.1.attn_q.weight";
  auto bits_of = [&](float scale) {
    QuantPlan plan = base_plan(DType::kQ8_0);
    std::map<std::string, std::vector<float>> imp;
    for (const QuantPlanEntry& e : plan.entries)
      if (e.ne.size() == 2) imp[e.name] = std::vector<float>(e.ne[0], e.name == hot ? scale : 1.0f);
    const ImportanceFor f = [&](const QuantPlanEntry& e) -> const float* {
      auto it = imp.find(e.name);
      return it == imp.end() ? nullptr : it->second.data();
    };
    TargetBpwOptions o;
    o.target_bpw = 4.0;
    auto rep = plan_target_bpw(*src_, &plan, f, o, pool_);
    EXPECT_TRUE(rep.is_ok());
    for (const QuantPlanEntry& e : plan.entries)
      if (e.name == hot) return dtype_type_size(e.target) * 8.0 / dtype_block_size(e.target);
    return 0.0;
  };
  EXPECT_GT(bits_of(1e4f), bits_of(1.0f));
}

TEST_F(TargetBpwModelTest, ProbedMixBeatsOneTypeAtTheSameSize) {
  // One type for every matrix: q4_K (4.5 bpw) ...
  QuantPlan uniform = base_plan(DType::kQ4_K);
  const double b = plan_bits_per_weight(uniform);
  // ... against the probed choice at the same bits per weight.
  QuantPlan chosen = base_plan(DType::kQ8_0);
  TargetBpwOptions o;
  o.target_bpw = b;
  o.probe_tokens = tokens(256, 31, 5);  // calibration tokens, not the held-out ones
  o.probe_ctx = 128;
  auto rep = plan_target_bpw(*src_, &chosen, {}, o, pool_);
  ASSERT_TRUE(rep.is_ok()) << rep.status().message();
  ASSERT_TRUE(rep->probed);
  int positive = 0;
  for (const TargetBpwTensor& t : rep->tensors) {
    EXPECT_TRUE(std::isfinite(t.probe_kl) && t.probe_kl >= 0) << t.name;
    positive += t.probe_kl > 0;
  }
  EXPECT_EQ(positive, static_cast<int>(rep->tensors.size()));
  EXPECT_LE(rep->bpw, b + 1e-9);
  const double kl_uniform = held_out_kl(uniform), kl_chosen = held_out_kl(chosen);
  EXPECT_LT(kl_chosen, kl_uniform) << "uniform " << kl_uniform << " chosen " << kl_chosen;
  // The prediction is a KL estimate of the right order.
  EXPECT_GT(rep->predicted_kl, kl_chosen / 10);
  EXPECT_LT(rep->predicted_kl, kl_chosen * 10);
}

TEST_F(TargetBpwModelTest, SourceInACandidateTypeStillHasASensitivity) {
  // A source whose matrices are q5_0 (as the default model's f32 copy holds
  // values dequantized from its types): q5_0 re-rounds without error, so a
  // probe at q5_0 would measure nothing and every choice would look free.
  QuantPlan to_q5 = base_plan(DType::kQ5_0);
  RtnQuantizer rtn;
  const QuantizerFor qf = [&](QuantMethod m) -> Quantizer* { return m == QuantMethod::kRtn ? &rtn : nullptr; };
  auto q5 = execute_quant_plan(std::make_unique<ModelFile>(*src_), to_q5, qf, pool_);
  ASSERT_TRUE(q5.is_ok());
  ConvertOptions co;
  co.type = DType::kQ8_0;
  auto plan = plan_quantization(**q5, co);
  ASSERT_TRUE(plan.is_ok());
  TargetBpwOptions o;
  o.candidates = {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0};
  o.target_bpw = 6.0;
  o.probe_tokens = tokens(256, 31, 5);
  auto rep = plan_target_bpw(**q5, &*plan, {}, o, pool_);
  ASSERT_TRUE(rep.is_ok()) << rep.status().message();
  for (const TargetBpwTensor& t : rep->tensors) {
    EXPECT_EQ(t.probe, DType::kQ4_0) << t.name;
    EXPECT_GT(t.sensitivity, 0) << t.name;
  }
  EXPECT_GT(rep->bpw, 5.2);  // the lossless q5_0 is bought where it fits, not q4_0 everywhere
}

}  // namespace
}  // namespace ember
