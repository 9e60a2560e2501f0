// The per-tensor quantization plan (transform/quant_plan.h): which tensor
// gets which type and method under which options (roles, 1-D tensors in
// f32, overrides for the head and the embedding with and without a tied
// output, block-size fallbacks, copies, the Q/K permutation of Hugging Face
// llama checkpoints), the summary line, and the Quantizer interface the
// executor drives (every row quantized once with the right context, edited
// plans honoured, errors named).
#include "transform/quant_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "model/model.h"
#include "quant/quantize.h"
#include "transform/convert.h"
#include "transform/gen_model.h"
#include "transform/quantizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

const std::string kModelData = EMBER_SOURCE_DIR "/tests/data/model/";

class QuantPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_quant_plan_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A 2-layer llama: n_embd 64, Q/K/V biases, RoPE factors; tied or not
  // (28 tensors untied). Each call writes a new file (earlier ones may still
  // be mapped).
  std::unique_ptr<ModelFile> make(bool tied, DType type = DType::kF32, int n_ff = 96) {
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 2, s.n_embd = 64, s.n_ff = n_ff, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300;
    s.tied_embeddings = tied, s.qkv_bias = true, s.rope_scale_factor = 8;
    GenModelOptions o;
    o.type = type;
    const std::string path = (dir_ / ("m" + std::to_string(n_files_++) + ".gguf")).string();
    EXPECT_TRUE(write_random_model(s, o, path, pool_).is_ok());
    auto f = open_model_file(path);
    EXPECT_TRUE(f.is_ok()) << f.status().message();
    return f.is_ok() ? std::move(f.value()) : nullptr;
  }

  ThreadPool pool_{2};
  fs::path dir_;
  int n_files_ = 0;
};

const QuantPlanEntry& entry(const QuantPlan& p, const std::string& name) {
  for (const QuantPlanEntry& e : p.entries)
    if (e.name == name) return e;
  ADD_FAILURE() << "no plan entry " << name;
  static const QuantPlanEntry kNone;
  return kNone;
}

TEST_F(QuantPlanTest, TypesMethodsAndRoles) {
  auto f = make(false);
  ConvertOptions o;
  o.type = DType::kQ4_0;
  auto plan = plan_quantization(*f, o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->entries.size(), f->tensors.size());
  for (const QuantPlanEntry& e : plan->entries) {
    SCOPED_TRACE(e.name);
    ASSERT_NE(e.role, TensorRole::kUnknown);
    const bool matrix = role_info(e.role).kind == TensorKind::kMatrix;
    EXPECT_EQ(e.target, matrix ? DType::kQ4_0 : DType::kF32);
    EXPECT_EQ(e.method, matrix ? QuantMethod::kRtn : QuantMethod::kCopy);  // 1-D tensors are f32 already
    EXPECT_EQ(e.transform, TensorTransform::kNone);
    EXPECT_FALSE(e.requested.has_value());
    EXPECT_EQ(e.source, DType::kF32);
  }
  const QuantPlanEntry& q = entry(*plan, "blk.1.attn_q.weight");
  EXPECT_EQ(q.role, TensorRole::kAttnQ);
  EXPECT_EQ(q.layer, 1);
  EXPECT_EQ(q.ne, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(entry(*plan, "blk.0.attn_k.bias").role, TensorRole::kAttnKBias);
  EXPECT_EQ(entry(*plan, "rope_freqs.weight").layer, -1);
  EXPECT_EQ(plan->file_type, DType::kQ4_0);
  ASSERT_EQ(plan->metadata.size(), 2u);
  EXPECT_EQ(plan->metadata[0].first, "general.file_type");
  EXPECT_EQ(plan->metadata[0].second.i, 2);

  // Float targets convert; a matrix already in the target type is copied.
  o.type = DType::kF16;
  auto p16 = plan_quantization(*f, o);
  ASSERT_TRUE(p16.is_ok());
  EXPECT_EQ(entry(*p16, "blk.0.ffn_up.weight").method, QuantMethod::kConvert);
  EXPECT_EQ(entry(*p16, "blk.0.ffn_up.weight").target, DType::kF16);
  o.type = DType::kF32;
  EXPECT_EQ(entry(*plan_quantization(*f, o), "blk.0.ffn_up.weight").method, QuantMethod::kCopy);
  auto q8 = make(false, DType::kQ8_0);
  o.type = DType::kQ8_0;
  EXPECT_EQ(entry(*plan_quantization(*q8, o), "output.weight").method, QuantMethod::kCopy);
  o.type = DType::kQ4_0;
  const QuantPlanEntry& requant = entry(*plan_quantization(*q8, o), "output.weight");
  EXPECT_EQ(requant.source, DType::kQ8_0);
  EXPECT_EQ(requant.method, QuantMethod::kRtn);
}

TEST_F(QuantPlanTest, FallbacksAndStrictMode) {
  auto f = make(false, DType::kF32, 48);  // rows of 48 fit neither q4_K nor its fallback q5_0
  ConvertOptions o;
  o.type = DType::kQ4_K;
  auto plan = plan_quantization(*f, o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  const QuantPlanEntry& q = entry(*plan, "blk.0.attn_q.weight");  // rows of 64
  EXPECT_EQ(q.target, DType::kQ5_0);
  EXPECT_EQ(q.requested, DType::kQ4_K);
  const QuantPlanEntry& down = entry(*plan, "blk.0.ffn_down.weight");  // rows of 48: not even q5_0
  EXPECT_EQ(down.target, DType::kF16);
  EXPECT_EQ(down.method, QuantMethod::kConvert);
  EXPECT_EQ(down.requested, DType::kQ4_K);
  const std::string summary = quant_plan_summary(*plan);
  EXPECT_NE(summary.find("by fallback from q4_K"), std::string::npos) << summary;
  EXPECT_EQ(summary.rfind("plan: 28 tensors:", 0), 0u) << summary;

  o.allow_fallback = false;
  auto strict = plan_quantization(*f, o);
  ASSERT_FALSE(strict.is_ok());
  EXPECT_EQ(strict.status().message(),
            "tensor 'blk.0.attn_k.weight': row length 64 is not a multiple of q4_K's block size 256");

  EXPECT_EQ(fallback_row_type(DType::kQ4_K, 512), DType::kQ4_K);
  EXPECT_EQ(fallback_row_type(DType::kQ5_K, 96), DType::kQ5_1);
  EXPECT_EQ(fallback_row_type(DType::kQ6_K, 64), DType::kQ8_0);
  EXPECT_EQ(fallback_row_type(DType::kQ2_K, 32), DType::kQ4_0);
  EXPECT_EQ(fallback_row_type(DType::kQ3_K, 48), DType::kF16);
  EXPECT_EQ(fallback_row_type(DType::kQ8_0, 48), DType::kF16);
}

TEST_F(QuantPlanTest, HeadAndEmbeddingOverrides) {
  ConvertOptions o;
  o.type = DType::kQ4_0;
  o.output_type = DType::kQ8_0;
  o.token_embd_type = DType::kQ6_K;  // rows of 64: falls back to q8_0
  auto untied = plan_quantization(*make(false), o);
  ASSERT_TRUE(untied.is_ok());
  EXPECT_EQ(entry(*untied, "output.weight").target, DType::kQ8_0);
  EXPECT_EQ(entry(*untied, "token_embd.weight").target, DType::kQ8_0);
  EXPECT_EQ(entry(*untied, "token_embd.weight").requested, DType::kQ6_K);
  EXPECT_EQ(entry(*untied, "blk.1.attn_v.weight").target, DType::kQ4_0);
  o.token_embd_type = DType::kQ5_1;
  auto tied = plan_quantization(*make(true), o);  // the embedding is the head: the output type wins
  ASSERT_TRUE(tied.is_ok());
  EXPECT_EQ(entry(*tied, "token_embd.weight").target, DType::kQ8_0);
  o.output_type.reset();
  EXPECT_EQ(entry(*plan_quantization(*make(true), o), "token_embd.weight").target, DType::kQ5_1);
  o.output_type = DType::kQ8_K;  // an activation type cannot be stored
  auto bad = plan_quantization(*make(false), o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "cannot convert to type q8_K");
}

TEST_F(QuantPlanTest, HuggingFaceLlamaQkPermutation) {
  auto llama = open_model_file(kModelData + "hf_llama_sharded");
  ASSERT_TRUE(llama.is_ok());
  ConvertOptions o;
  o.type = DType::kF32;
  auto plan = plan_quantization(**llama, o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  const int64_t hd = *(*llama)->metadata.get_int("llama.attention.key_length");
  for (const QuantPlanEntry& e : plan->entries) {
    const bool qk = e.role == TensorRole::kAttnQ || e.role == TensorRole::kAttnK;
    EXPECT_EQ(e.transform, qk ? TensorTransform::kPermuteQkRows : TensorTransform::kNone) << e.name;
    if (qk) {
      EXPECT_EQ(e.head_dim, hd);
      EXPECT_EQ(e.method, QuantMethod::kConvert);  // a transform is never a copy
    }
  }
  ASSERT_FALSE(plan->metadata.empty());
  EXPECT_EQ(plan->metadata[0].first, "llama.rope.type");
  EXPECT_EQ(plan->metadata[0].second.str, "normal");
  EXPECT_NE(quant_plan_summary(*plan).find("Q/K rows permuted"), std::string::npos);
  // The permutation itself: row 2i of each head is source row i, 2i+1 is i + hd/2.
  auto conv = convert_model(std::move(llama.value()), *plan, pool_);
  ASSERT_TRUE(conv.is_ok()) << conv.status().message();
  auto src = open_model_file(kModelData + "hf_llama_sharded");
  ASSERT_TRUE(src.is_ok());
  const TensorView& in = *(*src)->tensor("blk.0.attn_k.weight");
  const TensorView& out = *(*conv)->tensor("blk.0.attn_k.weight");
  ASSERT_EQ(out.type, DType::kF32);
  std::vector<float> want(in.ne[0]);
  for (int64_t r = 0; r < out.ne[1]; ++r) {
    const int64_t h = r / hd, j = r % hd;
    const int64_t sr = h * hd + (j % 2 == 0 ? j / 2 : j / 2 + hd / 2);
    dequantize_row_ref(in.type, in.row(sr), want.data(), in.ne[0]);
    EXPECT_EQ(std::memcmp(out.row(r), want.data(), want.size() * 4), 0) << "row " << r;
  }

  // Architectures whose GGUF files keep NeoX order are not permuted.
  auto qwen = open_model_file(kModelData + "hf_qwen2");
  ASSERT_TRUE(qwen.is_ok());
  auto qplan = plan_quantization(**qwen, o);
  ASSERT_TRUE(qplan.is_ok());
  for (const QuantPlanEntry& e : qplan->entries) EXPECT_EQ(e.transform, TensorTransform::kNone) << e.name;
  EXPECT_EQ(qplan->metadata[0].first, "general.file_type");
}

// Records every call; quantizes like RTN.
class RecordingQuantizer : public Quantizer {
 public:
  const char* name() const override { return "recording"; }
  bool supports(DType t) const override { return rtn_.supports(t); }
  Status quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType target,
                       const QuantTensorContext& ctx, uint8_t* dst) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t r = 0; r < n_rows; ++r) ++rows_[ctx.entry->name][ctx.row0 + r];
      EXPECT_EQ(target, ctx.entry->target);
      EXPECT_EQ(n_per_row, ctx.entry->ne[0]);
      EXPECT_EQ(ctx.importance, nullptr);
      if (fail_on_ == ctx.entry->name) return Status::error("refused");
    }
    return rtn_.quantize_rows(src, n_rows, n_per_row, target, ctx, dst);
  }
  std::map<std::string, std::map<int64_t, int>> rows_;
  std::string fail_on_;

 private:
  std::mutex mu_;
  RtnQuantizer rtn_;
};

// A Hugging Face llama checkpoint with Q/K biases (attention_bias): the
// biases are permuted with their rows, so the converted GGUF (interleaved
// RoPE) computes the same function as the checkpoint run directly (NeoX RoPE
// on the stored order).
TEST_F(QuantPlanTest, HuggingFaceLlamaQkBiasesFollowTheirRows) {
  auto with_biases = [](std::unique_ptr<ModelFile> f) {
    const int64_t q = f->tensor("blk.0.attn_q.weight")->ne[1], k = f->tensor("blk.0.attn_k.weight")->ne[1];
    for (auto [name, n] : {std::pair<std::string, int64_t>{"blk.0.attn_q.bias", q}, {"blk.0.attn_k.bias", k}}) {
      auto v = std::make_shared<std::vector<float>>(n);
      for (int64_t i = 0; i < n; ++i) (*v)[i] = 0.05f * static_cast<float>((i * 7919) % 23) - 0.5f;
      TensorView t;
      t.name = name;
      t.type = DType::kF32;
      t.n_dims = 1;
      t.ne[0] = n;
      t.data = v->data();
      t.nbytes = static_cast<size_t>(n) * 4;
      f->owners.push_back(v);
      f->tensors[name] = t;
    }
    return f;
  };
  auto logits_of = [&](std::unique_ptr<ModelFile> f) {
    auto m = Model::from_file(std::move(f));
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    if (!m.is_ok()) return std::vector<float>{};
    ForwardContext ctx(**m, pool_, 16);
    ContiguousKvCache cache((*m)->config(), 16);
    const std::vector<int32_t> toks = {1, 5, 9, 2, 7, 3};
    std::vector<float> all(toks.size() * (*m)->config().n_vocab);
    EXPECT_TRUE(ctx.forward(toks.data(), 6, 0, cache, nullptr, all.data()).is_ok());
    return all;
  };
  auto direct = open_model_file(kModelData + "hf_llama_sharded");
  auto source = open_model_file(kModelData + "hf_llama_sharded");
  ASSERT_TRUE(direct.is_ok() && source.is_ok());
  const std::vector<float> want = logits_of(with_biases(std::move(direct.value())));
  ConvertOptions o;
  o.type = DType::kF32;
  auto conv = convert_model(with_biases(std::move(source.value())), o, pool_);
  ASSERT_TRUE(conv.is_ok()) << conv.status().message();
  EXPECT_EQ(*(*conv)->metadata.get_string("llama.rope.type"), "normal");
  const std::vector<float> got = logits_of(std::move(conv.value()));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    ref += want[i] * static_cast<double>(want[i]);
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-5);
}

TEST_F(QuantPlanTest, ExecutorDrivesTheQuantizer) {
  ConvertOptions o;
  o.type = DType::kQ4_0;
  auto plan = plan_quantization(*make(false), o);
  ASSERT_TRUE(plan.is_ok());
  // An edited plan is what runs: attn_v of layer 1 in q8_0.
  for (QuantPlanEntry& e : plan->entries)
    if (e.name == "blk.1.attn_v.weight") e.target = DType::kQ8_0;
  RecordingQuantizer rec;
  auto out = execute_quant_plan(make(false), *plan, [&](QuantMethod m) -> Quantizer* {
    return m == QuantMethod::kRtn ? &rec : nullptr;
  }, pool_);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  int n_rtn = 0;
  for (const QuantPlanEntry& e : plan->entries) {
    if (e.method != QuantMethod::kRtn) {
      EXPECT_EQ(rec.rows_.count(e.name), 0u) << e.name;
      continue;
    }
    ++n_rtn;
    const auto& rows = rec.rows_[e.name];
    ASSERT_EQ(static_cast<int64_t>(rows.size()), e.ne[1]) << e.name;
    for (const auto& [r, n] : rows) EXPECT_EQ(n, 1) << e.name << " row " << r;
    EXPECT_EQ((*out)->tensor(e.name)->type, e.target);
  }
  EXPECT_EQ(n_rtn, 2 * 7 + 2);
  EXPECT_EQ((*out)->tensor("blk.1.attn_v.weight")->type, DType::kQ8_0);
  // Same bytes as convert_model with the same (edited) plan.
  auto ref = convert_model(make(false), *plan, pool_);
  ASSERT_TRUE(ref.is_ok());
  for (const auto& [name, t] : (*ref)->tensors) {
    const TensorView* g = (*out)->tensor(name);
    ASSERT_TRUE(g && g->nbytes == t.nbytes) << name;
    EXPECT_EQ(std::memcmp(g->data, t.data, t.nbytes), 0) << name;
  }
}

TEST_F(QuantPlanTest, ExecutorErrors) {
  ConvertOptions o;
  o.type = DType::kQ4_0;
  auto plan = plan_quantization(*make(false), o);
  ASSERT_TRUE(plan.is_ok());
  RecordingQuantizer rec;
  rec.fail_on_ = "blk.0.ffn_gate.weight";
  const QuantizerFor use_rec = [&](QuantMethod) -> Quantizer* { return &rec; };
  auto failed = execute_quant_plan(make(false), *plan, use_rec, pool_);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_NE(failed.status().message().find("blk.0.ffn_gate.weight"), std::string::npos) << failed.status().message();
  EXPECT_NE(failed.status().message().find("refused"), std::string::npos);

  auto none = execute_quant_plan(make(false), *plan, [](QuantMethod) -> Quantizer* { return nullptr; }, pool_);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no rtn quantizer for q4_0"), std::string::npos) << none.status().message();

  rec.fail_on_.clear();
  rec.rows_.clear();
  auto other = make(false);  // a plan for another model
  other->tensors.erase("blk.1.ffn_up.weight");
  auto mismatch = execute_quant_plan(std::move(other), *plan, use_rec, pool_);
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_EQ(mismatch.status().message(), "tensor 'blk.1.ffn_up.weight': the plan does not match the model");
  EXPECT_TRUE(rec.rows_.empty()) << "the plan is checked before any tensor is converted";
  QuantPlan edited = *plan;
  for (QuantPlanEntry& e : edited.entries)
    if (e.name == "blk.0.attn_norm.weight") e.target = DType::kF16;  // still a copy
  auto copy = execute_quant_plan(make(false), edited, use_rec, pool_);
  ASSERT_FALSE(copy.is_ok());
  EXPECT_EQ(copy.status().message(), "tensor 'blk.0.attn_norm.weight': a copy cannot change the type");

  RtnQuantizer rtn;
  EXPECT_TRUE(rtn.supports(DType::kQ6_K));
  EXPECT_FALSE(rtn.supports(DType::kF16));
  EXPECT_FALSE(rtn.supports(DType::kQ8_K));
  std::vector<float> row(48, 1.0f);
  std::vector<uint8_t> dst(1024);
  EXPECT_FALSE(rtn.quantize_rows(row.data(), 1, 48, DType::kQ4_0, QuantTensorContext{}, dst.data()).is_ok());
}

}  // namespace
}  // namespace ember
