// Loading Mixture-of-Experts models: the GGUF keys into LayerConfig (expert
// counts, widths one value or one per layer, renormalisation and gating,
// each MoE architecture's defaults as llama.cpp's loader assumes them), and
// clear errors for malformed expert tensors and keys: a wrong expert count,
// a truncated payload (in memory and as a file cut short), a 3-D tensor
// where a matrix belongs and a matrix where the 3-D experts belong, a
// missing or extra per-expert matrix, experts of mixed types, more experts
// used than there are.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "format_test_util.h"
#include "model/archs/archs.h"
#include "logits_compare.h"
#include "model/model.h"
#include "kernels/interleave.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

// A tiny MoE file of `arch` (f32, 2 layers, 4 experts, 2 used).
std::string write_moe(const std::string& arch, const test::TempDir& dir, DType type = DType::kF32) {
  GenModelShape s = *gen_model_arch_defaults(arch);
  s.n_layer = 2, s.n_embd = 64, s.n_ff = 96, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300;
  s.n_expert = 4, s.n_expert_used = 2;
  if (find_arch(arch)->gen.expert_ff_key) s.n_ff_exp = 32;
  if (arch == "qwen2moe") s.n_ff_shexp = 48;
  GenModelOptions o;
  o.type = type;
  ThreadPool pool(2);
  const std::string path = (dir.path() / (arch + ".gguf")).string();
  auto st = write_random_model(s, o, path, pool);
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  return path;
}

std::unique_ptr<ModelFile> open_ok(const std::string& path) {
  auto r = open_model_file(path);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r.value()) : nullptr;
}

// m without `key`.
Metadata without(const Metadata& m, const std::string& key) {
  Metadata out;
  for (const auto& [k, v] : m.entries())
    if (k != key) out.set(k, v);
  return out;
}

// The error loading `f` gives ("" when it loads).
std::string load_error(const ModelFile& f) {
  auto m = Model::from_file(std::make_unique<ModelFile>(f));
  return m ? "" : m.status().message();
}

TEST(MoeLoad, GgufKeysAndDefaults) {
  test::TempDir dir("moe");
  struct Want {
    const char* arch;
    int ff_exp, ff_shexp;
    bool norm;
  };
  for (const Want& w : {Want{"qwen3moe", 32, 0, true}, Want{"qwen2moe", 32, 48, false}, Want{"olmoe", 96, 0, false},
                        Want{"llama", 96, 0, true}}) {
    SCOPED_TRACE(w.arch);
    auto f = open_ok(write_moe(w.arch, dir));
    ASSERT_TRUE(f);
    auto m = Model::from_file(std::make_unique<ModelFile>(*f));
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    for (const LayerConfig& l : (*m)->config().layers) {
      EXPECT_EQ(l.ffn_kind, FfnKind::kMoe);
      EXPECT_EQ(l.n_expert, 4);
      EXPECT_EQ(l.n_expert_used, 2);
      EXPECT_EQ(l.n_ff_exp, w.ff_exp);
      EXPECT_EQ(l.n_ff_shexp, w.ff_shexp);
      EXPECT_EQ(l.moe_norm_topk, w.norm);
    }
    // The file's keys override the defaults.
    ModelFile g = *f;
    const std::string a = w.arch;
    g.metadata.set(a + ".expert_weights_norm", Metadata::make_bool(!w.norm));
    g.metadata.set(a + ".expert_gating_func", Metadata::make_int(3, GgufType::kUint32));
    g.metadata.set(a + ".expert_weights_scale", Metadata::make_float(2.5));
    auto cfg = config_from_metadata(g.metadata);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    EXPECT_EQ(cfg->layers[1].moe_norm_topk, !w.norm);
    EXPECT_EQ(cfg->layers[1].moe_gating, MoeGating::kSoftmaxTopK);
    EXPECT_EQ(cfg->layers[1].moe_weights_scale, 2.5f);
  }
  // qwen3moe without expert_feed_forward_length: n_ff / n_expert_used (llama.cpp).
  auto f = open_ok(write_moe("qwen3moe", dir));
  f->metadata = without(f->metadata, "qwen3moe.expert_feed_forward_length");
  auto cfg = config_from_metadata(f->metadata);
  ASSERT_TRUE(cfg.is_ok());
  EXPECT_EQ(cfg->layers[0].n_ff_exp, 96 / 2);
  // One width per layer.
  f->metadata.set("qwen3moe.expert_feed_forward_length", Metadata::make_int_array({32, 16}));
  cfg = config_from_metadata(f->metadata);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  EXPECT_EQ(cfg->layers[0].n_ff_exp, 32);
  EXPECT_EQ(cfg->layers[1].n_ff_exp, 16);
  EXPECT_EQ(cfg->max_moe_ff_per_token(), 64);
}

TEST(MoeLoad, BadKeysAreErrors) {
  test::TempDir dir("moe");
  auto f = open_ok(write_moe("qwen3moe", dir));
  ASSERT_TRUE(f);
  auto err = [&](const std::string& key, GgufValue v) {
    Metadata m = f->metadata;
    m.set(key, std::move(v));
    auto c = config_from_metadata(m);
    return c ? std::string() : c.status().message();
  };
  EXPECT_EQ(err("qwen3moe.expert_used_count", Metadata::make_int(5, GgufType::kUint32)),
            "metadata key 'qwen3moe.expert_used_count' has invalid value 5");
  EXPECT_EQ(err("qwen3moe.expert_count", Metadata::make_int(0, GgufType::kUint32)),
            "metadata key 'qwen3moe.expert_count' is missing or 0: qwen3moe is a Mixture-of-Experts architecture");
  EXPECT_EQ(err("qwen3moe.expert_feed_forward_length", Metadata::make_int_array({32, 32, 32})),
            "metadata key 'qwen3moe.expert_feed_forward_length' must be one integer or one per layer (2)");
  EXPECT_EQ(err("qwen3moe.expert_gating_func", Metadata::make_int(2, GgufType::kUint32)),
            "metadata key 'qwen3moe.expert_gating_func' = 2: only softmax (1) and softmax over the top k (3) are "
            "supported");
  EXPECT_EQ(err("qwen3moe.expert_weights_norm", Metadata::make_int(1, GgufType::kUint32)),
            "metadata key 'qwen3moe.expert_weights_norm' must be a boolean");
}

TEST(MoeLoad, MalformedExpertTensorsAreClearErrors) {
  test::TempDir dir("moe");
  auto f = open_ok(write_moe("qwen2moe", dir));
  ASSERT_TRUE(f);
  ASSERT_EQ(load_error(*f), "");
  const std::string gate = "blk.1.ffn_gate_exps.weight";
  auto with = [&](const std::string& name, auto edit) {
    ModelFile g = *f;
    edit(g.tensors.at(name));
    return load_error(g);
  };
  // Wrong expert count.
  EXPECT_EQ(with(gate,
                 [](TensorView& t) {
                   t.ne[2] = 3;
                   t.nbytes = t.row_bytes() * t.nrows();
                 }),
            "tensor 'blk.1.ffn_gate_exps.weight' has shape [64, 32, 3], expected [64, 32, 4] (4 experts of [32, 64])");
  // Truncated payload.
  EXPECT_EQ(with(gate, [](TensorView& t) { t.nbytes -= 4; }),
            "tensor 'blk.1.ffn_gate_exps.weight' is truncated: 32764 bytes of 32768");
  // A matrix where the 3-D experts belong.
  EXPECT_EQ(with("blk.0.ffn_down_exps.weight",
                 [](TensorView& t) {
                   t.n_dims = 2;
                   t.ne[1] *= t.ne[2];
                   t.ne[2] = 1;
                 }),
            "tensor 'blk.0.ffn_down_exps.weight' has shape [32, 256], expected [32, 64, 4] (4 experts of [64, 32])");
  // 3-D where a matrix belongs: the router, a shared expert, attention.
  for (const std::string name : {"blk.0.ffn_gate_inp.weight", "blk.0.ffn_up_shexp.weight", "blk.0.attn_q.weight"}) {
    const std::string e = with(name, [](TensorView& t) {
      t.n_dims = 3;
      t.ne[2] = t.ne[1];
      t.ne[1] = 1;
    });
    EXPECT_NE(e.find("tensor '" + name + "' has shape ["), std::string::npos) << e;
    EXPECT_NE(e.find(", 1, "), std::string::npos) << e;
  }
  // Missing experts entirely.
  ModelFile g = *f;
  g.tensors.erase("blk.1.ffn_up_exps.weight");
  EXPECT_EQ(load_error(g), "missing tensor 'blk.1.ffn_up_exps.weight'");
}

// The same model as one matrix per expert (how Hugging Face checkpoints
// store them): loads with the same bits; a missing, extra or differently
// typed expert is an error naming it.
TEST(MoeLoad, PerExpertMatrices) {
  test::TempDir dir("moe");
  auto f = open_ok(write_moe("qwen3moe", dir, DType::kQ8_0));
  ASSERT_TRUE(f);
  ModelFile per = *f;
  for (int il = 0; il < 2; ++il)
    for (TensorRole r : {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps, TensorRole::kFfnDownExps}) {
      const std::string name = gguf_tensor_name(r, il);
      const TensorView t = per.tensors.at(name);
      per.tensors.erase(name);
      for (int e = 0; e < 4; ++e) {
        TensorView v = t;
        v.name = gguf_expert_tensor_name(r, il, e);
        v.n_dims = 2;
        v.ne[2] = 1;
        v.data = t.row(e * t.ne[1]);
        v.nbytes = t.row_bytes() * t.ne[1];
        per.tensors[v.name] = v;
      }
    }
  auto a = Model::from_file(std::make_unique<ModelFile>(*f));
  auto b = Model::from_file(std::make_unique<ModelFile>(per));
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << (b ? "" : b.status().message());
  ThreadPool pool(2);
  const std::vector<int32_t> toks = {1, 7, 200, 33, 5, 5, 90};
  const std::vector<float> la = prefill_logits(**a, pool, toks, 64);
  ASSERT_FALSE(la.empty());
  EXPECT_EQ(la, prefill_logits(**b, pool, toks, 64));
  {
    ModelFile g = per;
    g.tensors.erase("blk.0.ffn_gate.2.weight");
    EXPECT_EQ(load_error(g), "missing tensor 'blk.0.ffn_gate.2.weight'");
  }
  {
    ModelFile g = per;
    TensorView extra = g.tensors.at("blk.0.ffn_gate.3.weight");
    extra.name = "blk.0.ffn_gate.4.weight";
    g.tensors[extra.name] = extra;
    EXPECT_EQ(load_error(g), "tensor 'blk.0.ffn_gate.4.weight' is beyond the 4 experts of the config");
  }
  {
    ModelFile g = per;
    TensorView& t = g.tensors.at("blk.1.ffn_down.1.weight");
    t.type = DType::kQ4_0;
    t.nbytes = t.row_bytes() * t.ne[1];
    EXPECT_EQ(load_error(g), "tensor 'blk.1.ffn_down.1.weight' has type q4_0, expert 0 q8_0: the experts of a layer "
                             "share one type");
  }
}

// A GGUF file cut inside the expert payload does not open.
TEST(MoeLoad, TruncatedFileIsAnError) {
  test::TempDir dir("moe");
  const std::string path = write_moe("olmoe", dir);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 1000);
  auto f = open_model_file(path);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Interleaving (kernels/interleave.h) covers the experts: each 3-D tensor is
// rewritten whole and its experts' views follow it; the logits keep their
// bits (the interleaved kernels' contract).
TEST(MoeLoad, InterleavedExpertsKeepTheBits) {
  test::TempDir dir("moe");
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(type));
    GenModelShape s = *gen_model_arch_defaults("qwen2moe");
    s.n_layer = 2, s.n_embd = 256, s.n_ff = 256, s.n_ff_exp = 256, s.n_ff_shexp = 256, s.n_head = 4, s.n_head_kv = 2;
    s.n_vocab = 300, s.n_expert = 4, s.n_expert_used = 2;
    GenModelOptions o;
    o.type = type;
    ThreadPool pool(2);
    const std::string path = (dir.path() / "il.gguf").string();
    ASSERT_TRUE(write_random_model(s, o, path, pool).is_ok());
    auto plain = Model::load(path);
    auto il = Model::load(path);
    ASSERT_TRUE(plain.is_ok() && il.is_ok());
    const int n = (*il)->interleave_weights(2);
    const std::vector<int32_t> toks = {1, 7, 200, 33, 5, 5, 90, 17, 250, 3, 3, 64, 128, 9, 11, 2, 8, 100};
    const std::vector<float> want = prefill_logits(**plain, pool, toks, 64);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(prefill_logits(**il, pool, toks, 64), want);
    EXPECT_EQ(prefill_logits(**il, pool, {toks.begin(), toks.begin() + 1}, 64),
              std::vector<float>(want.begin(), want.begin() + 300));
    if (n == 0) continue;  // no interleaved kernels at this level
    const MoeWeights& m = (*il)->weights().layers[1].moe;
    EXPECT_EQ(m.gate[2].weight->type, interleaved_type(type));
    EXPECT_EQ(m.down[3].weight->type, interleaved_type(type));
    EXPECT_EQ((*il)->file().tensor("blk.1.ffn_down_exps.weight")->type, interleaved_type(type));
    EXPECT_EQ(static_cast<const uint8_t*>(m.down[3].weight->data) -
                  static_cast<const uint8_t*>((*il)->file().tensor("blk.1.ffn_down_exps.weight")->data),
              3 * 256 * static_cast<int64_t>(m.down[3].weight->row_bytes()));
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// 4-bit activations reach the experts (not the router, which keeps
// full-precision inputs), and stay batch-invariant.
TEST(MoeLoad, FourBitActivationsInTheExperts) {
  test::TempDir dir("moe");
  const std::string path = write_moe("qwen3moe", dir, DType::kQ4_0);
  auto m = Model::load(path);
  auto m8 = Model::load(path);
  ASSERT_TRUE(m.is_ok() && m8.is_ok());
  ASSERT_TRUE((*m)->set_activation_bits(4).is_ok());
  const MoeWeights& w = (*m)->weights().layers[1].moe;
  EXPECT_EQ(w.gate[3].act_bits, 4);
  EXPECT_EQ(w.down[0].act_bits, 4);
  EXPECT_EQ((*m)->weights().layers[1].q.act_bits, 4);
  EXPECT_EQ(w.router.act_bits, 0);
  ThreadPool pool(2);
  const std::vector<int32_t> toks = {1, 7, 200, 33, 5, 5, 90, 17};
  const std::vector<float> a = prefill_logits(**m, pool, toks, 64);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(prefill_logits(**m, pool, toks, 3), a);
  EXPECT_NE(prefill_logits(**m8, pool, toks, 64), a);
}

}  // namespace
}  // namespace ember
