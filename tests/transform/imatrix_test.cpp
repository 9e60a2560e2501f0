// Importance matrices (transform/imatrix.h): the collecting observer, the
// calibration run against a hand computation of the first linear's input,
// llama.cpp's GGUF and legacy file formats (round trips, bad files), and
// importance-weighted quantization through the plan executor.
#include "transform/imatrix.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/model.h"
#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"
#include "transform/gen_model.h"
#include "transform/quantizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class ImatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_imatrix_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A 2-layer llama with rows of 256 (every k-quant fits), f32 weights; the
  // shape of tools/gen_imatrix_llama_cpp_fixture.sh.
  std::string make_model(bool tied = false) {
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 2, s.n_embd = 256, s.n_ff = 512, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 256;
    s.tied_embeddings = tied;
    GenModelOptions o;
    o.type = DType::kF32;
    o.seed = 3;
    const std::string path = (dir_ / (tied ? "tied.gguf" : "tiny.gguf")).string();
    EXPECT_TRUE(write_random_model(s, o, path, pool_).is_ok());
    return path;
  }

  ThreadPool pool_{2};
  fs::path dir_;
};

TEST_F(ImatrixTest, CollectorSumsSquaresPerColumnAndNamesTensors) {
  ImportanceCollector c(/*tied_output=*/true, /*include_output=*/false);
  const float x[] = {1, 2, 3, 9, -1, 0.5f, -2, 9};  // 2 rows of 3, row stride 4
  c.on_linear_input(1, LinearRole::kQ, x, 4, 2, 3);
  c.on_linear_input(1, LinearRole::kQ, x, 4, 1, 3);
  c.on_linear_input(0, LinearRole::kDown, x, 4, 2, 3);
  c.on_linear_input(-1, LinearRole::kOutput, x, 4, 2, 3);  // skipped
  const Imatrix& m = c.result();
  ASSERT_EQ(m.entries.size(), 2u);
  const ImatrixEntry& q = m.entries.at("blk.1.attn_q.weight");
  ASSERT_EQ(q.sums.size(), 3u);
  EXPECT_DOUBLE_EQ(q.sums[0], 1 + 1 + 1);
  EXPECT_DOUBLE_EQ(q.sums[1], 4 + 0.25 + 4);
  EXPECT_DOUBLE_EQ(q.sums[2], 9 + 4 + 9);
  EXPECT_EQ(q.counts, std::vector<int64_t>{3});
  EXPECT_EQ(m.entries.count("blk.0.ffn_down.weight"), 1u);
  auto imp = m.importance("blk.1.attn_q.weight");
  ASSERT_TRUE(imp.has_value());
  EXPECT_FLOAT_EQ((*imp)[2], 22.0f / 3.0f);
  EXPECT_FALSE(m.importance("blk.9.attn_q.weight").has_value());

  ImportanceCollector with_head(true, true);
  with_head.on_linear_input(-1, LinearRole::kOutput, x, 4, 2, 3);
  EXPECT_EQ(with_head.result().entries.count("token_embd.weight"), 1u);
  EXPECT_EQ(linear_tensor_name(-1, LinearRole::kOutput, false), "output.weight");
  EXPECT_EQ(linear_tensor_name(3, LinearRole::kGate, false), "blk.3.ffn_gate.weight");
}

TEST_F(ImatrixTest, CalibrationMatchesHandComputedFirstLinearInput) {
  auto model = Model::load(make_model());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const Model& m = **model;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 70; ++i) tokens.push_back((i * 37 + 11) % 300);
  CalibrationOptions o;
  o.chunk_size = 32;
  o.bos_id = 1;
  auto im = collect_importance(m, tokens, o, pool_);
  ASSERT_TRUE(im.is_ok()) << im.status().message();
  EXPECT_EQ(im->chunk_count, 2);  // 70 tokens: two whole chunks of 32
  EXPECT_EQ(im->chunk_size, 32);
  ASSERT_EQ(im->entries.size(), 14u);  // 7 matrices x 2 layers, no output head
  for (const auto& [name, e] : im->entries) EXPECT_EQ(e.counts, std::vector<int64_t>{64}) << name;

  // The input of blk.0.attn_q is RMSNorm(token embedding) * attn_norm.
  const ModelFile& f = m.file();
  const TensorView* embd = f.tensor("token_embd.weight");
  const TensorView* norm = f.tensor("blk.0.attn_norm.weight");
  ASSERT_TRUE(embd && norm && embd->type == DType::kF32);
  const int64_t E = embd->ne[0];
  std::vector<double> want(E, 0.0);
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 32; ++i) {
      const int32_t t = i == 0 ? 1 : tokens[c * 32 + i];
      const float* e = static_cast<const float*>(embd->data) + t * E;
      double ss = 0;
      for (int64_t j = 0; j < E; ++j) ss += static_cast<double>(e[j]) * e[j];
      const double inv = 1.0 / std::sqrt(ss / E + m.config().norm_eps);
      for (int64_t j = 0; j < E; ++j) {
        const double v = e[j] * inv * static_cast<const float*>(norm->data)[j];
        want[j] += v * v;
      }
    }
  const ImatrixEntry& q = im->entries.at("blk.0.attn_q.weight");
  ASSERT_EQ(static_cast<int64_t>(q.sums.size()), E);
  for (int64_t j = 0; j < E; ++j) ASSERT_NEAR(q.sums[j], want[j], 1e-4 * want[j] + 1e-9) << j;
  // Q, K and V read the same rows.
  EXPECT_EQ(im->entries.at("blk.0.attn_k.weight").sums, q.sums);
  EXPECT_EQ(im->entries.at("blk.0.attn_v.weight").sums, q.sums);

  o.chunk_size = 100;
  EXPECT_FALSE(collect_importance(m, tokens, o, pool_).is_ok());  // not one whole chunk
}

Imatrix sample_imatrix() {
  Imatrix m;
  m.datasets = {"data/calibration.txt"};
  m.chunk_count = 3, m.chunk_size = 512;
  m.entries["blk.0.attn_q.weight"] = {{1.5, 2.25, 0.0, 8.0}, {1536}};
  m.entries["blk.1.ffn_down.weight"] = {{3, 1, 4, 1, 5, 9}, {1000}};
  return m;
}

TEST_F(ImatrixTest, GgufFormatRoundTrip) {
  const Imatrix m = sample_imatrix();
  const std::string path = (dir_ / "m.gguf").string();
  ASSERT_TRUE(write_imatrix_gguf(m, path));
  auto r = read_imatrix(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->legacy);
  EXPECT_EQ(r->datasets, m.datasets);
  EXPECT_EQ(r->chunk_count, 3);
  EXPECT_EQ(r->chunk_size, 512);
  ASSERT_EQ(r->entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    EXPECT_EQ(r->entries.at(name).sums, e.sums) << name;
    EXPECT_EQ(r->entries.at(name).counts, e.counts) << name;
    EXPECT_EQ(*r->importance(name), *m.importance(name)) << name;
  }
  EXPECT_FLOAT_EQ((*r->importance("blk.0.attn_q.weight"))[3], 8.0f / 1536.0f);
}

TEST_F(ImatrixTest, LegacyFormatRoundTrip) {
  const Imatrix m = sample_imatrix();
  const std::string path = (dir_ / "m.dat").string();
  ASSERT_TRUE(write_imatrix_legacy(m, path));
  auto r = read_imatrix(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->legacy);
  EXPECT_EQ(r->datasets, m.datasets);
  EXPECT_EQ(r->chunk_count, 3);
  // ncall = ceil(count / chunk): 3 and 2; the means survive.
  EXPECT_EQ(r->entries.at("blk.0.attn_q.weight").counts, std::vector<int64_t>{3});
  EXPECT_EQ(r->entries.at("blk.1.ffn_down.weight").counts, std::vector<int64_t>{2});
  for (const auto& [name, e] : m.entries) {
    const std::vector<float> a = *r->importance(name), b = *m.importance(name);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f * b[i]) << name << " " << i;
  }
  // Writing what was read gives the same file.
  const std::string again = (dir_ / "again.dat").string();
  ASSERT_TRUE(write_imatrix_legacy(*r, again));
  std::ifstream fa(path, std::ios::binary), fb(again, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(fa), {}), std::string(std::istreambuf_iterator<char>(fb), {}));
}

TEST_F(ImatrixTest, BadFilesAreErrors) {
  EXPECT_FALSE(read_imatrix((dir_ / "missing").string()).is_ok());
  const std::string path = (dir_ / "bad.dat").string();
  ASSERT_TRUE(write_imatrix_legacy(sample_imatrix(), path));
  fs::resize_file(path, 40);  // inside the first entry's values
  auto r = read_imatrix(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  // A model file is not an imatrix.
  auto model = read_imatrix(make_model());
  ASSERT_FALSE(model.is_ok());
  EXPECT_NE(model.status().message().find("imatrix"), std::string::npos) << model.status().message();
}

TEST_F(ImatrixTest, PlanUsesImportanceWhereThereAreStatistics) {
  const std::string path = make_model();
  auto model = Model::load(path);
  ASSERT_TRUE(model.is_ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 64; ++i) tokens.push_back((i * 53 + 7) % 300);
  CalibrationOptions co;
  co.chunk_size = 32;
  auto im = collect_importance(**model, tokens, co, pool_);
  ASSERT_TRUE(im.is_ok());

  for (DType type : {DType::kQ4_K, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(type));
    auto src = open_model_file(path);
    ASSERT_TRUE(src.is_ok());
    ConvertOptions opts;
    opts.type = type;
    auto plan = plan_quantization(**src, opts);
    ASSERT_TRUE(plan.is_ok());
    std::map<std::string, std::vector<float>> importance;
    auto n = apply_imatrix(*im, &*plan, &importance);
    ASSERT_TRUE(n.is_ok()) << n.status().message();
    EXPECT_EQ(*n, 14);
    for (const QuantPlanEntry& e : plan->entries) {
      const bool stats = im->entries.count(e.name) > 0;
      if (stats) {
        EXPECT_EQ(e.method, QuantMethod::kImatrix) << e.name;
      } else if (e.name == "token_embd.weight" || e.name == "output.weight") {
        EXPECT_EQ(e.method, QuantMethod::kRtn);
      }
    }
    RtnQuantizer rtn;
    ImatrixQuantizer imq;
    auto out = execute_quant_plan(
        std::move(src.value()), *plan,
        [&](QuantMethod m) -> Quantizer* { return m == QuantMethod::kRtn ? static_cast<Quantizer*>(&rtn) : &imq; },
        pool_, [&](const QuantPlanEntry& e) -> const float* {
          auto it = importance.find(e.name);
          return it == importance.end() ? nullptr : it->second.data();
        });
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    // Every matrix with statistics holds exactly the importance-weighted rows.
    auto ref = open_model_file(path);
    ASSERT_TRUE(ref.is_ok());
    for (const auto& [name, w] : importance) {
      const TensorView& t = *(*ref)->tensor(name);
      const TensorView& q = *(*out)->tensor(name);
      ASSERT_EQ(q.type, type);
      std::vector<uint8_t> want(q.nbytes);
      ASSERT_TRUE(quantize_rows_imatrix(type, static_cast<const float*>(t.data), want.data(), t.nrows(), t.ne[0],
                                        w.data()));
      EXPECT_EQ(std::memcmp(want.data(), q.data, q.nbytes), 0) << name;
    }
  }

  // Statistics with another column count than the tensor: an error naming it.
  Imatrix bad;
  bad.entries["blk.0.ffn_down.weight"] = {{1, 2, 3}, {5}};
  auto src = open_model_file(path);
  ASSERT_TRUE(src.is_ok());
  ConvertOptions opts;
  opts.type = DType::kQ4_K;
  auto plan = plan_quantization(**src, opts);
  std::map<std::string, std::vector<float>> importance;
  auto n = apply_imatrix(bad, &*plan, &importance);
  ASSERT_FALSE(n.is_ok());
  EXPECT_NE(n.status().message().find("blk.0.ffn_down.weight"), std::string::npos);
  // The quantizer refuses to run without statistics.
  ImatrixQuantizer imq;
  std::vector<float> row(256, 1.0f);
  std::vector<uint8_t> dst(dtype_row_size(DType::kQ4_K, 256));
  EXPECT_FALSE(imq.quantize_rows(row.data(), 1, 256, DType::kQ4_K, QuantTensorContext{}, dst.data()));
}

}  // namespace
}  // namespace ember
