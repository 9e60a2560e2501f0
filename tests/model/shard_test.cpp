// Sharding a model for tensor and pipeline parallelism (model/shard.h): row
// shards are views into the file's bytes (no copy), column shards hold
// exactly the columns, shapes that cannot be split give an error naming the
// layer and tensor, a pipeline stage holds only its layers (renamed from 0),
// and the stage balance minimizes the largest stage. The numerics of the
// sharded forward pass against one rank run over real MPI ranks
// (tests/dist/parallel_test.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include <cmath>
#include <random>

#include "kernels/backend.h"
#include "model/io/model_file.h"
#include "model/model.h"
#include "model/shard.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

const char* kTinyLlama = EMBER_SOURCE_DIR "/tests/data/model/hf_llama_sharded";
const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";
const char* kTinyGemma = EMBER_SOURCE_DIR "/tests/data/model/hf_gemma3";

struct Opened {
  std::unique_ptr<ModelFile> file;
  ModelConfig cfg;
};

Opened open(const std::string& path) {
  Opened o;
  auto f = open_model_file(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  o.file = std::move(f.value());
  auto c = config_from_metadata(o.file->metadata);
  EXPECT_TRUE(c.is_ok());
  o.cfg = c.value();
  return o;
}

TEST(ModelShard, RowShardsAreViewsColumnShardsAreTheColumns) {
  for (int rank = 0; rank < 2; ++rank) {
    Opened o = open(kTinyLlama);  // 4 heads of 8, 2 KV heads, FFN 64, untied head
    const TensorView q = *o.file->tensor("blk.1.attn_q.weight");
    const TensorView down = *o.file->tensor("blk.1.ffn_down.weight");
    const TensorView out = *o.file->tensor("output.weight");
    ModelShard sh;
    sh.tp_rank = rank;
    sh.tp_size = 2;
    ASSERT_TRUE(shard_model_file(o.file.get(), &o.cfg, &sh).is_ok());
    const TensorView& q2 = *o.file->tensor("blk.1.attn_q.weight");
    EXPECT_EQ(q2.ne[1], q.ne[1] / 2);
    EXPECT_EQ(q2.data, static_cast<const uint8_t*>(q.data) + rank * (q.ne[1] / 2) * q.row_bytes());  // a view
    const TensorView& k2 = *o.file->tensor("blk.1.attn_k.weight");
    EXPECT_EQ(k2.ne[1], 8);  // one of the two KV heads
    const TensorView& d2 = *o.file->tensor("blk.1.ffn_down.weight");
    ASSERT_EQ(d2.ne[0], 32);
    ASSERT_EQ(d2.ne[1], down.ne[1]);
    const auto* src = static_cast<const uint8_t*>(down.data);
    const auto* dst = static_cast<const uint8_t*>(d2.data);
    const size_t half = dtype_row_size(down.type, 32);
    for (int64_t r = 0; r < down.ne[1]; ++r)
      ASSERT_EQ(0, std::memcmp(dst + r * half, src + r * down.row_bytes() + rank * half, half)) << r;
    const TensorView& out2 = *o.file->tensor("output.weight");
    EXPECT_EQ(out2.ne[1], 32);  // vocabulary rows [32 rank, 32 rank + 32)
    EXPECT_EQ(sh.vocab_begin, 32 * rank);
    EXPECT_EQ(out2.data, static_cast<const uint8_t*>(out.data) + rank * 32 * out.row_bytes());
    EXPECT_EQ(o.cfg.layers[1].n_head, 2);
    EXPECT_EQ(o.cfg.layers[1].n_head_kv, 1);
    EXPECT_EQ(o.cfg.layers[1].n_ff, 32);
    EXPECT_EQ(o.cfg.n_vocab, 64);
  }
}

TEST(ModelShard, FewerKvHeadsThanRanksAreReplicated) {
  for (int rank = 0; rank < 4; ++rank) {
    Opened o = open(kTinyQwen);  // 4 heads, 1 KV head, Q/K/V biases
    const TensorView k = *o.file->tensor("blk.0.attn_k.weight");
    ModelShard sh;
    sh.tp_rank = rank;
    sh.tp_size = 4;
    ASSERT_TRUE(shard_model_file(o.file.get(), &o.cfg, &sh).is_ok());
    EXPECT_EQ(o.file->tensor("blk.0.attn_k.weight")->data, k.data);  // the one KV head, on every rank
    EXPECT_EQ(o.file->tensor("blk.0.attn_q.bias")->ne[0], o.cfg.head_dim);
    EXPECT_EQ(o.cfg.layers[0].n_head, 1);
    EXPECT_EQ(o.cfg.layers[0].n_head_kv, 1);
  }
}

TEST(ModelShard, ShapesThatCannotBeSplitAreErrors) {
  {
    Opened o = open(kTinyQwen);
    ModelShard sh;
    sh.tp_size = 3;
    const Status st = shard_model_file(o.file.get(), &o.cfg, &sh);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("4 attention heads, not a multiple of 3"), std::string::npos) << st.message();
  }
  {
    Opened o = open(kTinyQwen);
    o.cfg.layers[1].n_ff = 50;
    ModelShard sh;
    sh.tp_size = 4;
    const Status st = shard_model_file(o.file.get(), &o.cfg, &sh);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("layer 1 has an FFN width of 50"), std::string::npos) << st.message();
  }
  {
    // Q4_K down rows of 768 columns: halves of 384 would cut 256-element blocks.
    GenModelShape s;
    s.arch = "llama";
    s.n_layer = 1;
    s.n_embd = 512;
    s.n_ff = 768;
    s.n_head = 2;
    s.n_head_kv = 2;
    s.n_vocab = 300;
    GenModelOptions go;
    go.type = DType::kQ4_K;
    ThreadPool pool(1);
    const std::string path = testing::TempDir() + "/shard_q4k.gguf";
    ASSERT_TRUE(write_random_model(s, go, path, pool).is_ok());
    auto m = Model::load(path, ModelShard{0, 2});
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.status().message().find("layer 0 ffn_down: its 768 input columns split into parts of 384 do not "
                                        "fall on q4_K's 256-element blocks"),
              std::string::npos)
        << m.status().message();
    auto whole = Model::load(path, ModelShard{0, 3});  // 3 does not divide the 2 heads
    EXPECT_FALSE(whole.is_ok());
    std::remove(path.c_str());
  }
}

// Both kinds at once: the held layers, renamed from 0, each split by heads.
TEST(ModelShard, TensorShardOfAPipelineStage) {
  ModelShard sh;
  sh.tp_rank = 1;
  sh.tp_size = 2;
  sh.layer_begin = 1;
  sh.layer_end = 2;
  auto m = Model::load(kTinyQwen, sh);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  auto whole = Model::load(kTinyQwen);
  ASSERT_TRUE(whole.is_ok());
  const ModelConfig& c = (*m)->config();
  const LayerConfig& lw = (*whole)->config().layers[1];
  ASSERT_EQ(c.n_layer, 1);
  EXPECT_EQ(c.layers[0].n_head, lw.n_head / 2);
  EXPECT_EQ(c.layers[0].n_ff, lw.n_ff / 2);
  // Its Q rows are the second half of the model's layer 1 Q rows.
  const TensorView& q = *(*m)->weights().layers[0].q.weight;
  const TensorView& qw = *(*whole)->weights().layers[1].q.weight;
  ASSERT_EQ(q.nbytes * 2, qw.nbytes);
  EXPECT_EQ(0, std::memcmp(q.data, static_cast<const uint8_t*>(qw.data) + q.nbytes, q.nbytes));
  EXPECT_FALSE((*m)->shard().embeds());
  EXPECT_TRUE((*m)->shard().has_head());
  EXPECT_TRUE((*m)->shard().tensor_parallel());
}

TEST(ModelShard, PipelineStageHoldsItsLayers) {
  ModelShard sh;
  sh.layer_begin = 1;
  sh.layer_end = 3;
  auto m = Model::load(kTinyGemma, sh);  // 3 layers: sliding, global, sliding
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  auto whole = Model::load(kTinyGemma);
  ASSERT_TRUE(whole.is_ok());
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.layers[0].sliding_window, (*whole)->config().layers[1].sliding_window);
  EXPECT_EQ(c.layers[1].sliding_window, (*whole)->config().layers[2].sliding_window);
  const TensorView& q = *(*m)->weights().layers[0].q.weight;
  const TensorView& q_whole = *(*whole)->weights().layers[1].q.weight;
  ASSERT_EQ(q.nbytes, q_whole.nbytes);
  EXPECT_EQ(0, std::memcmp(q.data, q_whole.data, q.nbytes));  // its layer 0 is the model's layer 1
  EXPECT_FALSE((*m)->shard().embeds());
  EXPECT_TRUE((*m)->shard().has_head());
  EXPECT_EQ((*m)->file().tensor("blk.2.attn_q.weight"), nullptr);
  ModelShard first;
  first.layer_end = 1;
  auto m0 = Model::load(kTinyGemma, first);
  ASSERT_TRUE(m0.is_ok());
  EXPECT_FALSE((*m0)->weights().output);  // no head on the first stage
  EXPECT_EQ((*m0)->config().n_layer, 1);
}

// A row-parallel linear (O, down) on two ranks: the column shards' products
// add up to the whole matrix's product within f32 rounding, for each type
// whose blocks the split respects.
TEST(ModelShard, ColumnShardProductsAddUpToTheWhole) {
  for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    GenModelShape s;
    s.arch = "llama";
    s.n_layer = 1;
    s.n_embd = 512;
    s.n_ff = 1024;
    s.n_head = 2;
    s.n_head_kv = 2;
    s.n_vocab = 300;
    GenModelOptions go;
    go.type = type;
    ThreadPool pool(1);
    const std::string path = testing::TempDir() + "/shard_cols.gguf";
    ASSERT_TRUE(write_random_model(s, go, path, pool).is_ok());
    Opened whole = open(path);
    const TensorView& w = *whole.file->tensor("blk.0.ffn_down.weight");  // [512, 1024]
    std::vector<Opened> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(open(path));
      ModelShard sh;
      sh.tp_rank = r;
      sh.tp_size = 2;
      ASSERT_TRUE(shard_model_file(ranks.back().file.get(), &ranks.back().cfg, &sh).is_ok());
    }
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x(1024 * 3);
    for (float& v : x) v = nd(rng);
    auto be = make_cpu_backend(pool);
    std::vector<float> y(512 * 3), y0(512 * 3), y1(512 * 3);
    be->matmul(w, x.data(), 1024, y.data(), 512, 3);
    be->matmul(*ranks[0].file->tensor("blk.0.ffn_down.weight"), x.data(), 1024, y0.data(), 512, 3);
    be->matmul(*ranks[1].file->tensor("blk.0.ffn_down.weight"), x.data() + 512, 1024, y1.data(), 512, 3);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      worst = std::max(worst, std::fabs(double(y0[i]) + y1[i] - y[i]));
      scale = std::max(scale, std::fabs(double(y[i])));
    }
    EXPECT_LT(worst, 1e-5 * scale + 1e-6) << dtype_name(type) << ": " << worst << " of " << scale;
    std::remove(path.c_str());
  }
}

TEST(ModelShard, BalancedStages) {
  EXPECT_EQ(balance_stages({1, 1, 1, 1}, 2), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(balance_stages({1, 1, 1, 1, 10, 1}, 2), (std::vector<int>{0, 4, 6}));
  EXPECT_EQ(balance_stages({5, 1, 1, 1, 1, 1}, 2), (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(balance_stages({1, 2, 3}, 3), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace ember
