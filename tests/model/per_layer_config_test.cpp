// Per-layer sizes from GGUF: <arch>.attention.head_count, .head_count_kv and
// .feed_forward_length given as arrays of n_layer integers (as llama.cpp
// writes them for models whose layers differ) fill LayerConfig per layer;
// weights bind with each layer's own shapes, and a tensor with another
// layer's shape is refused with its name. Bad arrays are refused with the key.
#include <gtest/gtest.h>

#include "format_test_util.h"
#include "model/config.h"
#include "model/io/gguf.h"
#include "model/io/model_file.h"
#include "model/weights.h"

namespace ember {
namespace {

// A 3-layer llama whose layers differ: heads 4 / 2 / 4, KV heads 2 / 1 / 1,
// FFN 64 / 32 / 48; n_embd 32, head size 8.
struct Layers {
  std::vector<int32_t> head = {4, 2, 4};
  std::vector<int32_t> head_kv = {2, 1, 1};
  std::vector<int32_t> ff = {64, 32, 48};
};
constexpr int kEmbd = 32, kHeadDim = 8, kVocab = 16;

// Writes the model; `shapes` may override a tensor's shape (GGML order).
std::string write_model(const test::TempDir& dir, const Layers& L,
                        const std::map<std::string, std::vector<int64_t>>& shapes = {}) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 3);
  w.add_uint32("llama.embedding_length", kEmbd);
  w.add_int32_array("llama.feed_forward_length", L.ff);
  w.add_int32_array("llama.attention.head_count", L.head);
  w.add_int32_array("llama.attention.head_count_kv", L.head_kv);
  w.add_uint32("llama.attention.key_length", kHeadDim);
  w.add_uint32("llama.attention.value_length", kHeadDim);
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"token_embd.weight", {kEmbd, kVocab}}, {"output_norm.weight", {kEmbd}}};
  for (int il = 0; il < 3; ++il) {
    const int64_t q = L.head[il] * kHeadDim, kv = L.head_kv[il] * kHeadDim, ff = L.ff[il];
    const std::string b = "blk." + std::to_string(il) + ".";
    tensors.insert(tensors.end(), {{b + "attn_norm.weight", {kEmbd}},
                                   {b + "attn_q.weight", {kEmbd, q}},
                                   {b + "attn_k.weight", {kEmbd, kv}},
                                   {b + "attn_v.weight", {kEmbd, kv}},
                                   {b + "attn_q.bias", {q}},
                                   {b + "attn_output.weight", {q, kEmbd}},
                                   {b + "ffn_norm.weight", {kEmbd}},
                                   {b + "ffn_gate.weight", {kEmbd, ff}},
                                   {b + "ffn_up.weight", {kEmbd, ff}},
                                   {b + "ffn_down.weight", {ff, kEmbd}}});
  }
  for (auto& [name, ne] : tensors) {
    if (auto it = shapes.find(name); it != shapes.end()) ne = it->second;
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> data(static_cast<size_t>(n), 0.25f);
    EXPECT_TRUE(w.add_tensor(name, DType::kF32, ne, data.data(), data.size() * 4).is_ok()) << name;
  }
  const std::string path = (dir.path() / "layers.gguf").string();
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

TEST(PerLayerConfig, ArraysFillEachLayerAndBindItsShapes) {
  test::TempDir dir("per_layer");
  auto f = open_model_file(write_model(dir, Layers{}));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto cfg = config_from_metadata((*f)->metadata);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  const ModelConfig& c = *cfg;
  // Model-wide values are the largest of the layers'.
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.n_ff, 64);
  EXPECT_EQ(c.head_dim, kHeadDim);
  ASSERT_EQ(c.layers.size(), 3u);
  const int head[] = {4, 2, 4}, head_kv[] = {2, 1, 1}, ff[] = {64, 32, 48};
  for (int il = 0; il < 3; ++il) {
    EXPECT_EQ(c.layers[il].n_head, head[il]) << il;
    EXPECT_EQ(c.layers[il].n_head_kv, head_kv[il]) << il;
    EXPECT_EQ(c.layers[il].n_ff, ff[il]) << il;
    EXPECT_EQ(c.layers[il].rope_base, 10000.f);  // the architecture's filler still ran
  }
  EXPECT_EQ(c.max_n_head(), 4);
  EXPECT_EQ(c.max_n_ff(), 64);

  ModelConfig bound = c;
  auto w = bind_weights(**f, &bound);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  const auto& L = (*w)->layers;
  for (int il = 0; il < 3; ++il) {
    SCOPED_TRACE(il);
    EXPECT_EQ(L[il].q.n_out(), head[il] * kHeadDim);
    EXPECT_EQ(L[il].k.n_out(), head_kv[il] * kHeadDim);
    EXPECT_EQ(L[il].v.n_out(), head_kv[il] * kHeadDim);
    EXPECT_EQ(L[il].o.n_in(), head[il] * kHeadDim);
    EXPECT_EQ(L[il].gate.n_out(), ff[il]);
    EXPECT_EQ(L[il].down.n_in(), ff[il]);
    ASSERT_NE(L[il].q.bias, nullptr);
    EXPECT_EQ(L[il].q.bias[head[il] * kHeadDim - 1], 0.25f);
  }
}

TEST(PerLayerConfig, AnotherLayersShapeIsRefused) {
  test::TempDir dir("per_layer");
  // Layer 1 with layer 0's Q and FFN widths.
  for (const auto& [name, ne, want] :
       {std::tuple{"blk.1.attn_q.weight", std::vector<int64_t>{kEmbd, 32},
                   "tensor 'blk.1.attn_q.weight' has shape [32, 32], expected [32, 16]"},
        std::tuple{"blk.1.ffn_down.weight", std::vector<int64_t>{64, kEmbd},
                   "tensor 'blk.1.ffn_down.weight' has shape [64, 32], expected [32, 32]"},
        std::tuple{"blk.2.attn_q.bias", std::vector<int64_t>{16}, "tensor 'blk.2.attn_q.bias' has 16 elements, expected 32"}}) {
    auto f = open_model_file(write_model(dir, Layers{}, {{name, ne}}));
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    auto cfg = config_from_metadata((*f)->metadata);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    auto w = bind_weights(**f, &*cfg);
    ASSERT_FALSE(w.is_ok()) << name;
    EXPECT_EQ(w.status().message(), want);
  }
}

GgufValue int_array(std::vector<int64_t> v, GgufType t = GgufType::kUint32) { return test::int_array(t, std::move(v)); }

Metadata base_metadata() {
  Metadata m;
  m.set("general.architecture", Metadata::make_string("qwen2"));
  m.set("qwen2.block_count", Metadata::make_int(3, GgufType::kUint32));
  m.set("qwen2.embedding_length", Metadata::make_int(64, GgufType::kUint32));
  m.set("qwen2.feed_forward_length", Metadata::make_int(128, GgufType::kUint32));
  m.set("qwen2.attention.head_count", Metadata::make_int(4, GgufType::kUint32));
  return m;
}

std::string config_error(const Metadata& m) {
  auto c = config_from_metadata(m);
  return c.is_ok() ? "(no error)" : c.status().message();
}

TEST(PerLayerConfig, MixedScalarsAndArrays) {
  Metadata m = base_metadata();
  m.set("qwen2.attention.head_count_kv", int_array({2, 1, 4}));
  auto c = config_from_metadata(m);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->n_head, 4);
  EXPECT_EQ(c->n_head_kv, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->layers[1].n_head, 4);
  EXPECT_EQ(c->layers[1].n_head_kv, 1);
  EXPECT_EQ(c->layers[2].n_ff, 128);
  // Without head_count_kv, each layer's KV heads are its heads; the default
  // head size is n_embd over layer 0's head count.
  Metadata h = base_metadata();
  h.set("qwen2.attention.head_count", int_array({2, 8, 4}, GgufType::kInt32));
  auto d = config_from_metadata(h);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->n_head, 8);
  EXPECT_EQ(d->layers[1].n_head_kv, 8);
  EXPECT_EQ(d->head_dim, 32);
  // Single values: every layer the same.
  auto s = config_from_metadata(base_metadata());
  ASSERT_TRUE(s.is_ok());
  for (const LayerConfig& l : s->layers) {
    EXPECT_EQ(l.n_head, 4);
    EXPECT_EQ(l.n_head_kv, 4);
    EXPECT_EQ(l.n_ff, 128);
  }
}

TEST(PerLayerConfig, BadArraysAreRefusedWithTheKey) {
  auto with = [](const std::string& key, GgufValue v) {
    Metadata m = base_metadata();
    m.set(key, std::move(v));
    return config_error(m);
  };
  EXPECT_EQ(with("qwen2.feed_forward_length", int_array({128, 64})),
            "metadata key 'qwen2.feed_forward_length' has 2 values, expected one per layer (3)");
  EXPECT_EQ(with("qwen2.attention.head_count", int_array({4, 0, 4})),
            "metadata key 'qwen2.attention.head_count' has invalid value 0 for layer 1");
  EXPECT_EQ(with("qwen2.attention.head_count_kv", int_array({2, -1, 2}, GgufType::kInt32)),
            "metadata key 'qwen2.attention.head_count_kv' has invalid value -1 for layer 1");
  EXPECT_EQ(with("qwen2.attention.head_count_kv", int_array({2, 3, 2})),
            "layer 1: head_count 4 is not a multiple of head_count_kv 3");
  GgufValue strings;
  strings.type = GgufType::kArray;
  strings.elem_type = GgufType::kString;
  strings.count = 3;
  strings.strings = {"a", "b", "c"};
  EXPECT_EQ(with("qwen2.feed_forward_length", strings),
            "metadata key 'qwen2.feed_forward_length' is an array of string, expected integers");
  EXPECT_EQ(with("qwen2.attention.head_count", int_array({1, 1, 1}, GgufType::kBool)),
            "metadata key 'qwen2.attention.head_count' is an array of bool, expected integers");
  // A scalar head count that does not divide by the KV heads, as before.
  EXPECT_EQ(with("qwen2.attention.head_count_kv", Metadata::make_int(3, GgufType::kUint32)),
            "head_count 4 is not a multiple of head_count_kv 3");
}

}  // namespace
}  // namespace ember
