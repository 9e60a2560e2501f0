// Structured pruning (transform/prune_structured.h): every option writes a
// model that loads and whose logits equal those of the unpruned model with
// the removed parts zeroed (FFN channels: their ffn_down columns; query
// heads and KV groups: their attn_output columns; layers: their attn_output
// and ffn_down, which makes the block the identity); per-layer widths are
// written as arrays; Gemma 3's sliding-window layers keep their windows
// after layers go; a trimmed vocabulary keeps the kept tokens' logits and
// gives the others -inf; bad options give errors.
#include "transform/prune_structured.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "eval/model_compare.h"
#include "model/io/gguf.h"
#include "model/model.h"
#include "transform/gen_model.h"
#include "transform/quant_plan.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class StructuredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_structured_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string gen(const std::string& arch, int n_layer, int sliding_window = 0) {
    GenModelShape s = *gen_model_arch_defaults(arch);
    s.n_layer = n_layer, s.n_embd = 128, s.n_ff = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 32;
    s.n_vocab = 300, s.n_ctx = 256, s.sliding_window = sliding_window;
    GenModelOptions o;
    o.type = DType::kF32;
    o.seed = 11;
    o.weight_std = 0.1f;
    const std::string p = (dir_ / (arch + std::to_string(n_layer) + ".gguf")).string();
    EXPECT_TRUE(write_random_model(s, o, p, pool_).is_ok());
    return p;
  }

  static std::vector<int32_t> tokens(int n, int mul = 17) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * mul + 3 + (i * i) % 7) % 300);
    return t;
  }

  // Logits [n, n_vocab] of every position.
  std::vector<float> logits(const Model& m, const std::vector<int32_t>& t) {
    ForwardContext ctx(m, pool_, 64);
    ContiguousKvCache cache(m.config(), static_cast<int64_t>(t.size()));
    std::vector<float> all(t.size() * m.config().n_vocab), last(m.config().n_vocab);
    EXPECT_TRUE(ctx.forward(t.data(), static_cast<int64_t>(t.size()), 0, cache, last.data(), all.data()).is_ok());
    return all;
  }

  // The source with columns `cols` of tensor `name` zeroed.
  static void zero_columns(ModelFile* f, const std::string& name, const std::vector<int64_t>& cols) {
    const TensorView& t = *f->tensor(name);
    std::vector<float> v = read_f32_rows(t);
    for (int64_t r = 0; r < t.nrows(); ++r)
      for (int64_t c : cols) v[r * t.ne[0] + c] = 0;
    replace_with_f32(f, name, std::move(v));
  }
  static std::vector<int64_t> removed(const std::vector<int>& kept, int units, int width) {
    std::vector<int64_t> r;
    for (int u = 0; u < units; ++u)
      if (std::find(kept.begin(), kept.end(), u) == kept.end())
        for (int i = 0; i < width; ++i) r.push_back(static_cast<int64_t>(u) * width + i);
    return r;
  }

  // Prunes `path`, zeroes the same parts of the source and compares logits.
  StructuredPruneReport check_equivalent(const std::string& path, StructuredPruneOptions o, int n_tok = 40) {
    o.window = 32;
    StructuredPruneReport rep;
    auto src = open_model_file(path);
    EXPECT_TRUE(src.is_ok());
    const ModelConfig cfg = *config_from_metadata((*src)->metadata);
    auto out = prune_structured(std::move(src.value()), tokens(256, 29), o, pool_, &rep);
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out.is_ok()) return rep;
    auto pruned = Model::from_file(std::move(out.value()));
    EXPECT_TRUE(pruned.is_ok()) << pruned.status().message();
    auto zeroed = open_model_file(path);
    std::vector<int> kept_layers;
    for (int l = 0; l < cfg.n_layer; ++l)
      if (std::find(rep.dropped.begin(), rep.dropped.end(), l) == rep.dropped.end()) kept_layers.push_back(l);
    EXPECT_EQ(kept_layers.size(), rep.kept_heads.size());
    for (int l : rep.dropped)  // a block with no attention output and no FFN output is the identity
      for (const char* role : {"attn_output", "ffn_down"}) {
        const std::string n = fmt::format("blk.{}.{}.weight", l, role);
        std::vector<int64_t> all((*zeroed)->tensor(n)->ne[0]);
        std::iota(all.begin(), all.end(), 0);
        zero_columns(zeroed->get(), n, all);
      }
    for (size_t i = 0; i < kept_layers.size(); ++i) {
      const int l = kept_layers[i];
      const LayerConfig& lc = cfg.layers[l];
      const std::string o_name = fmt::format("blk.{}.attn_output.weight", l);
      zero_columns(zeroed->get(), o_name, removed(rep.kept_heads[i], lc.n_head, cfg.head_dim_v));
      zero_columns(zeroed->get(), fmt::format("blk.{}.ffn_down.weight", l), removed(rep.kept_channels[i], lc.n_ff, 1));
      EXPECT_EQ(pruned.value()->config().layers[i].n_head, static_cast<int>(rep.kept_heads[i].size()));
      EXPECT_EQ(pruned.value()->config().layers[i].n_head_kv, static_cast<int>(rep.kept_groups[i].size()));
      EXPECT_EQ(pruned.value()->config().layers[i].n_ff, static_cast<int>(rep.kept_channels[i].size()));
      EXPECT_EQ(pruned.value()->config().layers[i].sliding_window, cfg.layers[l].sliding_window);
    }
    auto ref = Model::from_file(std::move(zeroed.value()));
    EXPECT_TRUE(ref.is_ok());
    const std::vector<int32_t> t = tokens(n_tok);
    const std::vector<float> a = logits(**ref, t), b = logits(**pruned, t);
    double scale = 0, err = 0;
    for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::fabs(double(a[i])));
    for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(double(a[i]) - b[i]));
    EXPECT_LT(err, 2e-5 * scale) << "max logit difference " << err << " of " << scale;
    // And the pruning changed the model (the zeroed parts mattered).
    auto src2 = Model::load(path);
    const std::vector<float> c = logits(**src2, t);
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(double(a[i]) - c[i]));
    EXPECT_GT(diff, 1e-3 * scale);
    return rep;
  }

  ThreadPool pool_{2};
  fs::path dir_;
};

TEST_F(StructuredTest, FfnChannelsHeadsAndGroupsAreTheZeroedModel) {
  const std::string llama = gen("llama", 3);
  StructuredPruneOptions o;
  o.ffn = 0.5, o.ffn_multiple = 32;
  StructuredPruneReport r = check_equivalent(llama, o);
  EXPECT_EQ(r.n_ff, (std::vector<int>{128, 128, 128}));
  EXPECT_TRUE(r.llama_cpp);
  o = {};
  o.heads = 0.5;  // one of the two query heads of each KV group
  r = check_equivalent(llama, o);
  EXPECT_EQ(r.n_head, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(r.n_head_kv, (std::vector<int>{2, 2, 2}));
  for (const auto& h : r.kept_heads) EXPECT_NE(h[0] / 2, h[1] / 2);  // one per group
  o = {};
  o.kv_groups = 0.5;  // a whole group: its K / V rows and both its query heads
  r = check_equivalent(llama, o);
  EXPECT_EQ(r.n_head, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(r.n_head_kv, (std::vector<int>{1, 1, 1}));
  o = {};
  o.ffn = 0.4, o.ffn_multiple = 32, o.global = true;  // per-layer widths
  r = check_equivalent(llama, o);
  int total = 0;
  for (int w : r.n_ff) total += w;
  EXPECT_NEAR(total, 0.6 * 3 * 256, 3 * 32);
}

TEST_F(StructuredTest, LayersRemovedByEitherMetric) {
  const std::string llama = gen("llama", 4);
  for (LayerMetric m : {LayerMetric::kBlockInfluence, LayerMetric::kKl}) {
    StructuredPruneOptions o;
    o.drop_layers = 2;
    o.layer_metric = m;
    const StructuredPruneReport r = check_equivalent(llama, o);
    ASSERT_EQ(r.dropped.size(), 2u);
    ASSERT_EQ(r.layer_scores.size(), 4u);
    for (int d : r.dropped)  // the lowest scores went
      for (int l = 0; l < 4; ++l)
        if (std::find(r.dropped.begin(), r.dropped.end(), l) == r.dropped.end()) {
          EXPECT_LE(r.layer_scores[d], r.layer_scores[l]);
        }
  }
  // Gemma 3 with a 4-token window (every 6th layer global): its windows
  // follow the remaining layers (one flag per layer), with the heads and
  // FFN cut at the same time.
  const std::string gemma = gen("gemma3", 7, 4);
  StructuredPruneOptions o;
  o.drop_layers = 3, o.heads = 0.5, o.ffn = 0.25, o.ffn_multiple = 32;
  check_equivalent(gemma, o, 24);
}

TEST_F(StructuredTest, TrimmedVocabularyGivesTheOthersProbabilityZero) {
  for (bool tied : {false, true}) {
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 1, s.n_embd = 64, s.n_ff = 128, s.n_head = 2, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 128;
    s.tied_embeddings = tied;
    GenModelOptions go;
    go.type = DType::kF32;
    const std::string path = (dir_ / (tied ? "tied.gguf" : "untied.gguf")).string();
    ASSERT_TRUE(write_random_model(s, go, path, pool_).is_ok());
    auto src = Model::load(path);
    const int V = src.value()->config().n_vocab;
    StructuredPruneOptions o;
    for (int t = 0; t < V; t += 3) o.vocab.push_back(t);
    StructuredPruneReport rep;
    auto out = prune_structured(std::move(open_model_file(path).value()), {}, o, pool_, &rep);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_FALSE(rep.llama_cpp);
    ASSERT_NE((*out)->tensor("output.weight"), nullptr);
    EXPECT_EQ((*out)->tensor("output.weight")->ne[1], static_cast<int64_t>(o.vocab.size()));
    EXPECT_EQ((*out)->tensor("token_embd.weight")->ne[1], V);  // the input embedding stays whole
    // Through a GGUF file and back.
    const std::string trimmed = (dir_ / "trimmed.gguf").string();
    GgufWriter w;
    for (const auto& [k, v] : (*out)->metadata.entries()) w.add(k, v);
    for (const auto& [n, t] : (*out)->tensors)
      ASSERT_TRUE(w.add_tensor_ref(n, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes).is_ok());
    ASSERT_TRUE(w.write(trimmed).is_ok());
    auto m = Model::load(trimmed);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ(m.value()->config().output_tokens, o.vocab);
    const std::vector<int32_t> t = tokens(20);
    const std::vector<float> a = logits(**src, t), b = logits(**m, t);
    for (size_t r = 0; r < t.size(); ++r)
      for (int v = 0; v < V; ++v) {
        if (v % 3 == 0) {
          ASSERT_NEAR(b[r * V + v], a[r * V + v], 1e-5f * (1 + std::fabs(a[r * V + v])));
        } else {
          ASSERT_EQ(b[r * V + v], -INFINITY);
        }
      }
    // The comparison: KL over the kept tokens 0, the lost mass reported.
    auto c = compare_models(**src, **m, t, pool_);
    ASSERT_TRUE(c.is_ok());
    EXPECT_LT(c->kl_mean, 1e-6);
    EXPECT_GT(c->lost_mass, 0.3);
    EXPECT_LT(c->lost_mass, 0.9);
    // KL(trimmed || source) of a pure trim is the mean of -log(1 - lost_p),
    // at least -log(1 - mean lost) (Jensen), and finite.
    EXPECT_GE(c->kl_reverse_mean, -std::log(1 - c->lost_mass) - 1e-9);
    EXPECT_LT(c->kl_reverse_mean, 10.0);
    int64_t unreachable = 0;
    for (size_t p = 1; p < t.size(); ++p) unreachable += t[p] % 3 != 0;
    EXPECT_EQ(c->n_unreachable, unreachable);
  }
}

TEST_F(StructuredTest, BadOptions) {
  const std::string llama = gen("llama", 2);
  auto run = [&](StructuredPruneOptions o, std::vector<int32_t> t) {
    o.window = 32;
    return prune_structured(std::move(open_model_file(llama).value()), t, o, pool_, nullptr).status();
  };
  StructuredPruneOptions o;
  o.drop_layers = 2;  // every layer
  EXPECT_FALSE(run(o, tokens(64)).is_ok());
  o = {};
  o.ffn = 1.0;
  EXPECT_FALSE(run(o, tokens(64)).is_ok());
  o = {};
  o.heads = -0.1;
  EXPECT_FALSE(run(o, tokens(64)).is_ok());
  o = {};
  o.ffn = 0.5;
  EXPECT_FALSE(run(o, tokens(10)).is_ok());  // no whole window
  o = {};
  o.vocab = {5, 3};  // out of order
  EXPECT_FALSE(run(o, {}).is_ok());
  o.vocab = {1, 100000};  // out of range
  EXPECT_FALSE(run(o, {}).is_ok());
}

}  // namespace
}  // namespace ember
