// One training step of tiny Llama, Qwen2, Qwen3 and Gemma 3 models against
// PyTorch (float64, eager attention; tools/gen_train_reference.py wrote the
// models, the batch, the teacher logits and the results): the loss and
// every parameter's gradient to 1e-5 relative, and every parameter after
// three AdamW steps with warm-up, cosine decay, clipping and weight decay.
// The loss is w_kl tau^2 KL(teacher_tau || student_tau) + w_ce CE, so the
// KL path, the temperature and the cross-entropy are all checked.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "train/optimizer.h"
#include "train/step.h"
#include "train/train_model.h"

namespace ember {
namespace {

std::string data_dir() { return std::string(EMBER_SOURCE_DIR) + "/tests/data/train/"; }

struct Reference {
  nlohmann::json index;
  std::vector<float> values;
  std::vector<float> array(const nlohmann::json& entry, const std::string& name) const {
    const auto& a = entry["arrays"].at(name);
    const size_t off = a[0].get<size_t>(), n = a[1].get<size_t>();
    return std::vector<float>(values.begin() + off, values.begin() + off + n);
  }
};

const Reference& reference() {
  static const Reference r = [] {
    Reference x;
    std::ifstream j(data_dir() + "reference.json");
    x.index = nlohmann::json::parse(j);
    std::ifstream b(data_dir() + "reference.bin", std::ios::binary | std::ios::ate);
    x.values.resize(static_cast<size_t>(b.tellg()) / sizeof(float));
    b.seekg(0);
    b.read(reinterpret_cast<char*>(x.values.data()), static_cast<std::streamsize>(x.values.size() * sizeof(float)));
    return x;
  }();
  return r;
}

class DenseTeacher : public KdTargets {
 public:
  DenseTeacher(std::vector<float> l, int64_t V) : logits_(std::move(l)), V_(V) {}
  bool dense() const override { return true; }
  void logits(int64_t r0, int64_t n, float* out) override {
    std::copy(logits_.begin() + r0 * V_, logits_.begin() + (r0 + n) * V_, out);
  }

 private:
  std::vector<float> logits_;
  int64_t V_;
};

// ||a - b|| / ||b||.
double rel_l2(const float* a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

class TrainPytorch : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainPytorch, OneStepGradientsAndAdamWStepsMatch) {
  const std::string arch = GetParam();
  const Reference& ref = reference();
  const nlohmann::json& e = ref.index.at(arch);
  auto model = Model::load(data_dir() + "hf_" + arch);
  ASSERT_TRUE(model) << model.status().message();
  auto tm_r = TrainModel::from_model(**model);
  ASSERT_TRUE(tm_r) << tm_r.status().message();
  TrainModel& tm = **tm_r;
  tm.set_trainable([](const TrainTensor&) { return true; });

  const std::vector<int32_t> tokens = e["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> targets = e["targets"].get<std::vector<int32_t>>();
  TrainBatch b;
  b.tokens = tokens.data();
  b.targets = targets.data();
  b.n_seq = e["n_seq"];
  b.seq_len = e["seq_len"];
  const int64_t rows = b.n_rows(), V = tm.config().n_vocab;
  DenseTeacher teacher(ref.array(e, "teacher"), V);
  LossWeights lw;
  lw.tau = e["tau"];
  lw.w_kl = e["w_kl"];
  lw.w_ce = e["w_ce"];

  OptimizerOptions oo;
  oo.lr = e["lr"];
  oo.min_lr_ratio = e["min_lr_ratio"];
  oo.warmup_steps = e["warmup"];
  oo.total_steps = e["steps"];
  oo.beta1 = e["beta1"];
  oo.beta2 = e["beta2"];
  oo.eps = e["eps"];
  oo.weight_decay = e["weight_decay"];
  oo.clip = e["clip"];
  AdamW opt(tm, oo);
  ThreadPool pool(2);
  TrainStep::Options so;
  so.max_rows = rows;
  so.head_chunk_rows = 7;  // several chunks
  TrainStep step(tm, so, pool);

  const std::vector<double> norms = e["grad_norms"].get<std::vector<double>>();
  for (int s = 0; s < oo.total_steps; ++s) {
    opt.zero_grad();
    ASSERT_TRUE(step.forward(b).is_ok());
    const LossStats st = step.head_loss(&teacher, lw, 1.0f / static_cast<float>(rows), opt.grad());
    step.backward(opt.grad());
    if (s == 0) {
      const double want = e["loss"];
      EXPECT_NEAR(st.loss / static_cast<double>(rows), want, 1e-5 * want);
      EXPECT_EQ(st.rows, rows);
      for (const TrainTensor& t : tm.tensors()) {
        SCOPED_TRACE(t.name);
        const std::vector<float> g = ref.array(e, "grad/" + t.name);
        ASSERT_EQ(static_cast<int64_t>(g.size()), t.size());
        EXPECT_LT(rel_l2(opt.grad() + t.grad_offset, g), 1e-5);
      }
    }
    const OptimizerStepInfo info = opt.step(pool);
    EXPECT_NEAR(info.grad_norm, norms[static_cast<size_t>(s)], 1e-5 * norms[static_cast<size_t>(s)]) << "step " << s;
  }
  // Parameters after the steps: the change from the start agrees to 1e-4
  // relative (f32 vs f64 moments; elements whose gradient is near 0 take
  // Adam's sign-like steps), every element within 1e-5 of the parameter scale.
  auto start = TrainModel::from_model(**model);
  ASSERT_TRUE(start);
  for (const TrainTensor& t : tm.tensors()) {
    SCOPED_TRACE(t.name);
    const std::vector<float> want = ref.array(e, "after/" + t.name);
    const float* got = tm.param(&t);
    const float* p0 = (*start)->param((*start)->find(t.role, t.layer));
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = static_cast<double>(got[i]) - want[i], u = static_cast<double>(want[i]) - p0[i];
      num += d * d;
      den += u * u;
      worst = std::max(worst, std::fabs(d));
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4);
    EXPECT_LT(worst, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, TrainPytorch, ::testing::Values("llama", "qwen2", "qwen3", "gemma3"));

}  // namespace
}  // namespace ember
