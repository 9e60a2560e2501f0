// The pipeline `ember quantize` and `ember prune` share (transform/
// pipeline.h): structured pruning keeps each tensor's type when no type is
// asked for (a sliced matrix is rounded back to its source type); pruning
// then GPTQ is one pass whose zeros survive the rounding; the result is
// written and loads.
#include "transform/pipeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/dtype_sparse.h"
#include "model/act_sparsity.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_pipeline_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    calib_ = (dir_ / "calib.txt").string();
    std::string text;
    for (int i = 0; i < 400; ++i) text += "The river rises in the hills " + std::to_string(i * 7919 % 1000) + ". ";
    FILE* f = std::fopen(calib_.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string gen(DType type) {
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 2, s.n_embd = 128, s.n_ff = 256, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 512;
    GenModelOptions o;
    o.type = type;
    o.weight_std = 0.08f;
    const std::string p = (dir_ / (std::string(dtype_name(type)) + ".gguf")).string();
    EXPECT_TRUE(write_random_model(s, o, p, pool_).is_ok());
    return p;
  }

  ThreadPool pool_{2};
  fs::path dir_;
  std::string calib_;
};

TEST_F(PipelineTest, StructuredPruningKeepsTheSourceTypes) {
  PipelineOptions o;
  o.in = gen(DType::kQ8_0);
  o.keep_types = true;
  o.calib_path = calib_;
  o.calib_tokens = 1024;
  StructuredPruneOptions so;
  so.ffn = 0.5, so.ffn_multiple = 32, so.heads = 0.5, so.window = 128;
  o.structured = so;
  auto r = run_pipeline(o, {}, pool_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const auto& [name, t] : r->file->tensors)
    if (t.n_dims == 2) {
      EXPECT_EQ(t.type, DType::kQ8_0) << name;  // ffn_down and attn_output were sliced in f32
    }
  EXPECT_EQ(r->file->tensor("blk.0.ffn_down.weight")->ne[0], 128);
  EXPECT_EQ(r->file->tensor("blk.1.attn_output.weight")->ne[0], 64);
  const std::string out = (dir_ / "out.gguf").string();
  size_t bytes = 0;
  ASSERT_TRUE(write_pipeline_output(*r, 0, out, &bytes).is_ok());
  auto m = Model::load(out);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m.value()->config().layers[0].n_ff, 128);
  EXPECT_EQ(m.value()->config().layers[0].n_head, 2);
}

TEST_F(PipelineTest, PruneThenGptqIsOnePlan) {
  PipelineOptions o;
  o.in = gen(DType::kF32);
  o.convert.type = DType::kQ8_0;
  o.method = QuantizeMethod::kGptq;
  o.calib_path = calib_;
  o.calib_tokens = 1024;
  PruneOptions po;
  po.method = PruneMethod::kWanda;
  po.sparsity = 0.5;
  po.window = 128;
  o.prune = po;
  auto r = run_pipeline(o, {}, pool_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_TRUE(r->prune.has_value());
  EXPECT_EQ(r->prune->joint, 14);
  for (const auto& [name, t] : r->file->tensors) {
    if (t.n_dims != 2 || name.rfind("blk.", 0) != 0) continue;
    EXPECT_EQ(t.type, DType::kQ8_0) << name;
    std::vector<float> row(t.ne[0]);
    int64_t zeros = 0;
    for (int64_t i = 0; i < t.nrows(); ++i) {
      dequantize_row_ref(t.type, t.row(i), row.data(), t.ne[0]);
      for (float x : row) zeros += x == 0.0f;
    }
    EXPECT_GE(zeros, t.nelements() / 2) << name;  // Wanda's masks, kept exact through the GPTQ rounding
  }
}

TEST_F(PipelineTest, ImportanceIsCalibratedOnTheStructurallyPrunedModel) {
  PipelineOptions o;
  o.in = gen(DType::kF32);
  o.convert.type = DType::kQ4_0;
  o.method = QuantizeMethod::kImatrix;
  o.calib_path = calib_;
  o.calib_tokens = 1024;
  StructuredPruneOptions so;
  so.ffn = 0.5, so.ffn_multiple = 32, so.drop_layers = 1, so.window = 128;
  o.structured = so;
  auto r = run_pipeline(o, {}, pool_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();  // the unpruned model's statistics would not fit ffn_down
  for (const QuantPlanEntry& e : r->plan.entries)
    if (e.layer >= 0 && e.ne.size() == 2) {
      EXPECT_EQ(e.method, QuantMethod::kImatrix) << e.name;
    }
  o.imatrix_path = calib_;  // a file of the unpruned model: refused
  Status st = run_pipeline(o, {}, pool_).status();
  EXPECT_NE(st.message().find("unpruned"), std::string::npos) << st.message();
}

// `ember prune SPARSE OUT --activations S`: the thresholds are metadata, so
// a file in ember's sparse format keeps its matrices as they are (it used to
// be rewritten as dense Q8_0); pruning such a file again rounds the changed
// matrices to the dense export type.
TEST_F(PipelineTest, ActivationThresholdsKeepASparseFilesMatrices) {
  PipelineOptions o;
  o.in = gen(DType::kQ8_0);
  o.keep_types = true;
  o.calib_path = calib_;
  o.calib_tokens = 1024;
  PruneOptions po;
  po.method = PruneMethod::kMagnitude;
  po.sparsity = 0.5;
  po.per_row = true;
  po.window = 128;
  o.prune = po;
  o.sparse_format = true;
  auto sp = run_pipeline(o, {}, pool_);
  ASSERT_TRUE(sp.is_ok()) << sp.status().message();
  const std::string sparse = (dir_ / "sparse.gguf").string();
  size_t bytes = 0;
  ASSERT_TRUE(write_pipeline_output(*sp, 0, sparse, &bytes).is_ok());
  auto src = Model::load(sparse);
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  int n_sparse = 0;
  for (const auto& [name, t] : src.value()->file().tensors) n_sparse += dtype_is_sparse(t.type);
  ASSERT_EQ(n_sparse, 14);

  PipelineOptions a;
  a.in = sparse;
  a.keep_types = true;
  a.calib_path = calib_;
  a.calib_tokens = 1024;
  a.act_sparsity = 0.4;
  a.act_allocation = ActAllocation::kUniform;  // the thresholds' values do not matter here: the fast rule
  auto r = run_pipeline(a, {}, pool_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_TRUE(r->act.has_value());
  EXPECT_NE(r->file->metadata.find(kActSparsityThresholdsKey), nullptr);
  for (const auto& [name, t] : src.value()->file().tensors) {
    const TensorView* u = r->file->tensor(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->type, t.type) << name;
    ASSERT_EQ(u->nbytes, t.nbytes) << name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << name;
  }

  PipelineOptions p = a;  // pruned again: the changed matrices become Q8_0, the sparse format's dense export
  p.act_sparsity.reset();
  po.sparsity = 0.6;
  p.prune = po;
  auto q = run_pipeline(p, {}, pool_);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  for (const auto& [name, t] : q->file->tensors)
    if (name.rfind("blk.", 0) == 0 && t.n_dims == 2) {
      EXPECT_EQ(t.type, DType::kQ8_0) << name;
    }
}

}  // namespace
}  // namespace ember
