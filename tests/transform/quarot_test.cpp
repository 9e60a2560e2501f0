// QuaRot rotations fused into the weights (transform/quarot.h) on tiny
// random-weight f32 models of three architectures (llama with non-power-of-
// two widths, qwen2 with a V bias, gemma3 with post-norms): the rotated
// model, whose online parts the forward pass applies from the metadata,
// gives the source's logits to float rounding for every rotation alone and
// all together (a wrong fold, or a missing online part, is far off); the
// metadata survives a GGUF round trip; a rotated plan quantizes and runs
// with 4-bit activations; GPTQ composes (it calibrates on the rotated model,
// whose observer sees the rotated inputs: its Hessians are H X^T X H^T);
// rotating twice is an error.
#include "transform/quarot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "kernels/hadamard.h"
#include "model/io/gguf.h"
#include "model/model.h"
#include "transform/convert.h"
#include "transform/gen_model.h"
#include "transform/gptq_model.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

GenModelShape shape(const std::string& arch) {
  GenModelShape s = *gen_model_arch_defaults(arch);
  s.n_layer = 2, s.n_vocab = 300, s.n_ctx = 256;
  if (arch == "llama") s.n_embd = 96, s.n_ff = 160, s.n_head = 4, s.n_head_kv = 2;  // 96 = 8 * 12, 160 = 8 * 20, hd 24
  if (arch == "qwen2") s.n_embd = 128, s.n_ff = 256, s.n_head = 4, s.n_head_kv = 2, s.qkv_bias = true;
  if (arch == "gemma3") s.n_embd = 128, s.n_ff = 192, s.n_head = 4, s.n_head_kv = 1, s.head_dim = 32, s.sliding_window = 8;
  return s;
}

Status write_file(const ModelFile& f, const std::string& path) {
  GgufWriter w;
  for (const auto& [k, v] : f.metadata.entries()) w.add(k, v);
  for (const auto& [name, t] : f.tensors) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    EMBER_RETURN_IF_ERROR(w.add_tensor_ref(name, t.type, ne, t.data, t.nbytes));
  }
  return w.write(path);
}

class QuarotTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_quarot_" + GetParam() + std::to_string(::getpid()));
    fs::create_directories(dir_);
    GenModelOptions o;
    o.type = DType::kF32;
    o.seed = 5;
    o.weight_std = 0.08f;
    path_ = (dir_ / "src.gguf").string();
    ASSERT_TRUE(write_random_model(shape(GetParam()), o, path_, pool_).is_ok());
    auto src = Model::load(path_);
    ASSERT_TRUE(src.is_ok()) << src.status().message();
    want_ = logits(**src);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<float> logits(const Model& m) {
    const int64_t n = 24;
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % 300);
    ForwardContext ctx(m, pool_, 8);  // several steps: K/V (and rotated V rows) read back from the cache
    ContiguousKvCache cache(m.config(), n);
    std::vector<float> out(n * m.config().n_vocab);
    EXPECT_TRUE(ctx.forward(t.data(), n, 0, cache, nullptr, out.data()).is_ok());
    return out;
  }

  // RMS of (got - want) over RMS of want.
  double rel_error(const std::vector<float>& got) const {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += std::pow(got[i] - want_[i], 2), den += std::pow(want_[i], 2);
    return std::sqrt(num / den);
  }

  std::unique_ptr<ModelFile> rotated(const QuarotOptions& o, ModelRotation* r, QuantPlan* plan = nullptr) {
    auto f = open_model_file(path_);
    EXPECT_TRUE(f.is_ok());
    auto out = apply_quarot(std::move(f.value()), plan, o, pool_, r);
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    return out.is_ok() ? std::move(out.value()) : nullptr;
  }

  // The Q4_0 plan of the source.
  std::optional<QuantPlan> q4_plan() {
    ConvertOptions co;
    co.type = DType::kQ4_0;
    auto src = open_model_file(path_);
    EXPECT_TRUE(src.is_ok());
    auto plan = plan_quantization(**src, co);
    EXPECT_TRUE(plan.is_ok());
    return plan.is_ok() ? std::optional<QuantPlan>(std::move(plan.value())) : std::nullopt;
  }

  ThreadPool pool_{2};
  fs::path dir_;
  std::string path_;
  std::vector<float> want_;
};

INSTANTIATE_TEST_SUITE_P(Archs, QuarotTest, ::testing::Values("llama", "qwen2", "gemma3"));

TEST_P(QuarotTest, RotatedFloatModelGivesTheSourceLogits) {
  const QuarotOptions only[] = {{true, false, false, false, false}, {false, true, false, false, false},
                                {false, false, true, false, false}, {false, false, false, true, false},
                                {false, false, false, false, true},  {true, true, true, true, true}};
  for (const QuarotOptions& o : only) {
    SCOPED_TRACE(::testing::Message() << "attn_in " << o.attn_in << " ffn_in " << o.ffn_in << " ffn_down "
                                      << o.ffn_down << " attn_v " << o.attn_v << " attn_out " << o.attn_out);
    ModelRotation r;
    std::unique_ptr<ModelFile> f = rotated(o, &r);
    ASSERT_TRUE(f);
    const GenModelShape s = shape(GetParam());
    EXPECT_EQ(r.attn_in, o.attn_in ? s.n_embd : 0);  // the whole width is a Hadamard size in every shape here
    EXPECT_EQ(r.ffn_down, o.ffn_down ? s.n_ff : 0);
    EXPECT_EQ(r.attn_v, o.attn_v ? s.head_size() : 0);
    EXPECT_EQ(r.attn_out, o.attn_out ? s.n_head * s.head_size() : 0);
    // The weights really changed (the fold is not a no-op).
    const char* changed = o.attn_in ? "blk.0.attn_k.weight" : o.ffn_in ? "blk.0.ffn_up.weight"
                        : o.ffn_down ? "blk.0.ffn_down.weight" : o.attn_v ? "blk.1.attn_v.weight"
                                                                   : "blk.1.attn_output.weight";
    auto src = open_model_file(path_);
    ASSERT_TRUE(src.is_ok());
    const TensorView* a = (*src)->tensor(changed);
    const TensorView* b = f->tensor(changed);
    ASSERT_TRUE(a && b && a->nbytes == b->nbytes);
    EXPECT_NE(std::memcmp(a->data, b->data, a->nbytes), 0) << changed;
    // The online parts: without them the model is another function.
    if (o.attn_in || o.ffn_in || o.ffn_down || o.attn_out) {
      auto broken = std::make_unique<ModelFile>(*f);
      Metadata md;
      for (const auto& [k, v] : broken->metadata.entries())
        if (k.rfind("ember.quarot.", 0) != 0) md.set(k, v);
      broken->metadata = md;
      auto m = Model::from_file(std::move(broken));
      ASSERT_TRUE(m.is_ok());
      EXPECT_GT(rel_error(logits(**m)), 0.05);
    }
    auto m = Model::from_file(std::move(f));
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ((*m)->config().rotation.attn_in, r.attn_in);
    EXPECT_LT(rel_error(logits(**m)), 2e-5);  // the same function; float rounding only
  }
}

TEST_P(QuarotTest, MetadataRoundTripsAndQuantizedRotatedModelRuns) {
  std::optional<QuantPlan> plan = q4_plan();
  ModelRotation r;
  std::unique_ptr<ModelFile> f = rotated({true, true, true, true, true}, &r, &*plan);
  ASSERT_TRUE(f);
  for (const QuantPlanEntry& e : plan->entries)
    if (e.name == "blk.1.ffn_down.weight" || e.name == "blk.0.attn_output.weight") {
      EXPECT_EQ(e.source, DType::kF32);
      EXPECT_EQ(e.method, QuantMethod::kRtn);
    }
  // f32 round trip: the same config and the same logits bit for bit.
  const std::string f32_path = (dir_ / "rot_f32.gguf").string();
  ASSERT_TRUE(write_file(*f, f32_path).is_ok());
  auto loaded = Model::load(f32_path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  const ModelRotation& lr = (*loaded)->config().rotation;
  EXPECT_EQ(lr.attn_in, r.attn_in);
  EXPECT_EQ(lr.ffn_in, r.ffn_in);
  EXPECT_EQ(lr.ffn_down, r.ffn_down);
  EXPECT_EQ(lr.attn_v, r.attn_v);
  EXPECT_EQ(lr.attn_out, r.attn_out);
  auto in_memory = Model::from_file(std::make_unique<ModelFile>(*f));
  ASSERT_TRUE(in_memory.is_ok());
  EXPECT_EQ(logits(**loaded), logits(**in_memory));
  // Rotating a rotated file again is refused.
  auto again = open_model_file(f32_path);
  ASSERT_TRUE(again.is_ok());
  auto twice = apply_quarot(std::move(again.value()), nullptr, {}, pool_);
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.status().message().find("already rotated"), std::string::npos);
  // The plan quantizes the rotated tensors to Q4_0; the result runs with
  // 4-bit activations and stays near the source.
  auto q = convert_model(std::move(f), *plan, pool_);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  auto qm = Model::from_file(std::move(q.value()));
  ASSERT_TRUE(qm.is_ok()) << qm.status().message();
  const double e8 = rel_error(logits(**qm));
  ASSERT_TRUE((*qm)->set_activation_bits(4).is_ok());
  EXPECT_EQ((*qm)->weights().layers[0].down.act_bits, 4);
  EXPECT_EQ((*qm)->weights().output.act_bits, 0);  // the head keeps its activations
  const double e4 = rel_error(logits(**qm));
  EXPECT_LT(e8, 0.5);
  EXPECT_LT(e4, 1.0);
  EXPECT_GT(e4, e8);
}

// GPTQ composes: on the rotated model its observer sees the rotated inputs,
// so the Hessian of a rotated matrix is H X^T X H^T of the source's (layer
// 0, whose inputs the rotation leaves otherwise unchanged), and the whole
// run quantizes the rotated model into one that stays near the source.
TEST_P(QuarotTest, GptqCalibratesOnTheRotatedInputs) {
  ModelRotation r;
  std::unique_ptr<ModelFile> f = rotated({}, &r);
  ASSERT_TRUE(f);
  auto rot = Model::from_file(std::make_unique<ModelFile>(*f));
  auto src = Model::load(path_);
  ASSERT_TRUE(rot.is_ok() && src.is_ok());
  std::vector<int32_t> t;
  for (int i = 0; i < 48; ++i) t.push_back((i * 17 + 3 + (i * i) % 7) % 300);
  HessianCollector hs(0, pool_), hr(0, pool_);
  for (auto [m, c] : {std::pair{src->get(), &hs}, std::pair{rot->get(), &hr}}) {
    ForwardContext ctx(*m, pool_, 48);
    ctx.set_observer(c);
    ContiguousKvCache cache(m->config(), 48);
    std::vector<float> last(m->config().n_vocab);
    ASSERT_TRUE(ctx.forward(t.data(), 48, 0, cache, last.data()).is_ok());
  }
  for (auto [name, g] : {std::pair{"blk.0.attn_q.weight", r.attn_in}, std::pair{"blk.0.ffn_gate.weight", r.ffn_in},
                         std::pair{"blk.0.ffn_down.weight", r.ffn_down}}) {
    SCOPED_TRACE(name);
    const std::vector<double>* S = hs.hessian(name);
    const std::vector<double>* R = hr.hessian(name);
    ASSERT_TRUE(S && R && S->size() == R->size());
    const int64_t n = static_cast<int64_t>(std::sqrt(static_cast<double>(S->size())));
    std::vector<float> m(S->begin(), S->end()), col(n);
    for (int64_t i = 0; i < n; ++i)  // rows: S H^T
      for (int64_t b = 0; b < n; b += g) hadamard_row(m.data() + i * n + b, g, false);
    for (int64_t j = 0; j < n; ++j) {  // columns: H (S H^T)
      for (int64_t i = 0; i < n; ++i) col[i] = m[i * n + j];
      for (int64_t b = 0; b < n; b += g) hadamard_row(col.data() + b, g, false);
      for (int64_t i = 0; i < n; ++i) m[i * n + j] = col[i];
    }
    double scale = 0;
    for (double v : *R) scale = std::max(scale, std::fabs(v));
    for (int64_t k = 0; k < n * n; ++k) ASSERT_NEAR(m[k], (*R)[k], 1e-4 * scale) << "element " << k;
  }
  std::optional<QuantPlan> plan = q4_plan();
  ASSERT_TRUE(plan);
  f = rotated({}, nullptr, &*plan);
  int n_gptq = 0;
  for (QuantPlanEntry& e : plan->entries)
    if (e.method == QuantMethod::kRtn && e.layer >= 0 && gptq_supports(e.target)) e.method = QuantMethod::kGptq, ++n_gptq;
  EXPECT_EQ(n_gptq, 14);
  GptqRunOptions go;
  go.chunk_size = 64;
  std::vector<int32_t> calib;
  for (int i = 0; i < 512; ++i) calib.push_back((i * 17 + 3 + (i * i) % 7) % 300);
  auto done = run_gptq(std::move(f), &*plan, calib, go, pool_);
  ASSERT_TRUE(done.is_ok()) << done.status().message();
  auto q = convert_model(std::move(done.value()), *plan, pool_);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  auto m = Model::from_file(std::move(q.value()));
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ((*m)->config().rotation.ffn_down, shape(GetParam()).n_ff);
  EXPECT_LT(rel_error(logits(**m)), 0.5);
}

}  // namespace
}  // namespace ember
