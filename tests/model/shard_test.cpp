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
#include "model/layer_cost.h"
#include "model/model.h"
#include "model/shard.h"
#include "quant/blocks.h"
#include "quant/sparse.h"
#include "transform/quant_plan.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

const char* kTinyLlama = EMBER_SOURCE_DIR "/tests/data/model/hf_llama_sharded";
const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";
const char* kTinyGemma = EMBER_SOURCE_DIR "/tests/data/model/hf_gemma3";
const char* kTinyQwenMoe = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2moe";    // per-expert matrices, shared expert
const char* kTinyOlmoeFused = EMBER_SOURCE_DIR "/tests/data/model/hf_olmoe_fused";  // fused gate|up experts
const char* kTinyGptossMxfp4 = EMBER_SOURCE_DIR "/tests/data/model/hf_gptoss_mxfp4";  // MXFP4 experts of width 32

// A tiny random model of a known shape's architecture and settings.
std::string tiny_model(const std::string& shape, DType type, const std::string& name, int n_ff_exp = 0) {
  GenModelShape s = gen_model_shape(shape).value();
  s.n_layer = 1;
  s.n_embd = 64;
  s.n_ff = 128;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 16;
  s.n_vocab = 512;
  if (n_ff_exp > 0) {
    s.n_expert = 4;
    s.n_expert_used = 2;
    s.n_ff_exp = n_ff_exp;
  }
  GenModelOptions go;
  go.type = type;
  ThreadPool pool(1);
  const std::string path = testing::TempDir() + "/" + name;
  const auto st = write_random_model(s, go, path, pool);
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  return path;
}

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

// A sparse (`--format sparse`) FFN down matrix cut by its input columns:
// each rank's part is re-packed (masks, scales, kept values of its blocks),
// not byte-sliced, in the capacity its own densest row needs: here the
// first half of every row keeps 60 of 64 values, the second 4, so rank 0's
// part needs more than the whole row's capacity and rank 1's far less. The
// parts' products add up to the whole's, and the parts dequantize to the
// whole's columns exactly.
TEST(ModelShard, SparseColumnShardsRepackTheirPart) {
  GenModelShape s;
  s.arch = "llama";
  s.n_layer = 1;
  s.n_embd = 256;
  s.n_ff = 512;
  s.n_head = 2;
  s.n_head_kv = 2;
  s.n_vocab = 300;
  GenModelOptions go;
  go.type = DType::kQ8_0;
  ThreadPool pool(1);
  const std::string path = testing::TempDir() + "/shard_sparse.gguf";
  ASSERT_TRUE(write_random_model(s, go, path, pool).is_ok());
  const std::string name = "blk.0.ffn_down.weight";  // [256, 512]
  auto sparsify = [&](Opened& o) {
    const TensorView t = *o.file->tensor(name);
    const int64_t n = t.ne[0], rows = t.nrows();
    std::vector<uint8_t> q(t.nbytes);
    std::memcpy(q.data(), t.data, t.nbytes);
    std::mt19937 rng(7);
    for (int64_t r = 0; r < rows; ++r) {
      auto* blk = reinterpret_cast<BlockQ8_0*>(q.data() + r * t.row_bytes());
      for (int64_t i = 0; i < n; ++i) {
        const bool first = i < n / 2;
        const bool keep = static_cast<int>(rng() % 64) < (first ? 60 : 4);
        int8_t& v = blk[i / kQK].qs[i % kQK];
        v = keep ? static_cast<int8_t>(v == 0 || v == -128 ? 1 : v) : 0;
      }
    }
    const DType st = sparse_type_for(DType::kQ8_0, q.data(), rows, n).value();
    const size_t rb = dtype_row_size(st, n);
    std::shared_ptr<uint8_t[]> buf(new uint8_t[rb * rows]);
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_TRUE(sparse_from_dense_row(st, q.data() + r * t.row_bytes(), buf.get() + r * rb, n).is_ok());
    replace_tensor(o.file.get(), name, st, std::move(buf), rb * rows);
  };
  Opened whole = open(path);
  sparsify(whole);
  const TensorView& w = *whole.file->tensor(name);
  ASSERT_TRUE(dtype_is_sq8(w.type));
  const int whole_cap = dtype_sparse_capacity(w.type);
  std::vector<Opened> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(open(path));
    sparsify(ranks.back());
    ModelShard sh;
    sh.tp_rank = r;
    sh.tp_size = 2;
    const Status st = shard_model_file(ranks.back().file.get(), &ranks.back().cfg, &sh);
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
  const TensorView& p0 = *ranks[0].file->tensor(name);
  const TensorView& p1 = *ranks[1].file->tensor(name);
  ASSERT_EQ(p0.ne[0], 256);
  ASSERT_EQ(p1.ne[0], 256);
  EXPECT_GT(dtype_sparse_capacity(p0.type), whole_cap) << dtype_name(p0.type) << " of " << dtype_name(w.type);
  EXPECT_LT(dtype_sparse_capacity(p1.type), whole_cap / 2) << dtype_name(p1.type) << " of " << dtype_name(w.type);
  std::vector<float> full(512), part(256);
  for (int64_t r = 0; r < w.nrows(); ++r) {
    dequantize_row_sq8_ref(w.row(r), full.data(), 512);
    dequantize_row_sq8_ref(p0.row(r), part.data(), 256);
    ASSERT_EQ(0, std::memcmp(part.data(), full.data(), 256 * sizeof(float))) << "row " << r;
    dequantize_row_sq8_ref(p1.row(r), part.data(), 256);
    ASSERT_EQ(0, std::memcmp(part.data(), full.data() + 256, 256 * sizeof(float))) << "row " << r;
  }
  // Decode (1 token), the lanes (5) and the tile (40) paths.
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto be = make_cpu_backend(pool);
  for (int T : {1, 5, 40}) {
    std::vector<float> x(512 * T);
    for (float& v : x) v = nd(rng);
    std::vector<float> y(256 * T), y0(256 * T), y1(256 * T);
    be->matmul(w, x.data(), 512, y.data(), 256, T);
    be->matmul(p0, x.data(), 512, y0.data(), 256, T);
    be->matmul(p1, x.data() + 256, 512, y1.data(), 256, T);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double d = std::fabs(double(y0[i]) + y1[i] - y[i]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      scale = std::max(scale, std::fabs(double(y[i])));
    }
    EXPECT_LT(worst, 1e-5 * scale + 1e-6) << T << " tokens: " << worst << " of " << scale;
  }
  std::remove(path.c_str());
}

// Fused Q|K|V and gate|up (Phi-3, here with LongRoPE): each part cut by its
// own rows (its heads, its FFN width), the parts in order.
TEST(ModelShard, FusedMatricesAreCutPartByPart) {
  const std::string path = tiny_model("phi-3.5-mini", DType::kF32, "shard_phi3.gguf");
  Opened whole = open(path);
  ASSERT_TRUE(whole.cfg.rope_longrope);
  const TensorView qkv = *whole.file->tensor("blk.0.attn_qkv.weight");  // Q 64 | K 32 | V 32 rows
  const TensorView up = *whole.file->tensor("blk.0.ffn_up.weight");     // gate 128 | up 128 rows
  ASSERT_EQ(qkv.ne[1], 128);
  ASSERT_EQ(up.ne[1], 256);
  for (int rank = 0; rank < 2; ++rank) {
    Opened o = open(path);
    ModelShard sh{rank, 2};
    ASSERT_TRUE(shard_model_file(o.file.get(), &o.cfg, &sh).is_ok());
    const TensorView& q2 = *o.file->tensor("blk.0.attn_qkv.weight");
    ASSERT_EQ(q2.ne[1], 64);
    const size_t rb = qkv.row_bytes();
    auto rows_equal = [&](const TensorView& a, int64_t a0, const TensorView& b, int64_t b0, int64_t n) {
      return std::memcmp(a.row(a0), b.row(b0), static_cast<size_t>(n) * rb) == 0;
    };
    EXPECT_TRUE(rows_equal(q2, 0, qkv, 32 * rank, 32));        // its 2 query heads
    EXPECT_TRUE(rows_equal(q2, 32, qkv, 64 + 16 * rank, 16));  // its KV head's K
    EXPECT_TRUE(rows_equal(q2, 48, qkv, 96 + 16 * rank, 16));  // and V
    const TensorView& u2 = *o.file->tensor("blk.0.ffn_up.weight");
    ASSERT_EQ(u2.ne[1], 128);
    EXPECT_TRUE(rows_equal(u2, 0, up, 64 * rank, 64));          // gate
    EXPECT_TRUE(rows_equal(u2, 64, up, 128 + 64 * rank, 64));   // up
    EXPECT_EQ(o.cfg.layers[0].n_head, 2);
    EXPECT_EQ(o.cfg.layers[0].n_ff, 64);
    auto m = Model::load(path, ModelShard{rank, 2});
    EXPECT_TRUE(m.is_ok()) << m.status().message();
  }
  std::remove(path.c_str());
}

// Experts (and the shared expert) split by their FFN width: gate / up rows,
// down columns, in every expert; the router whole on every rank.
TEST(ModelShard, ExpertsAreSplitByTheirWidth) {
  for (const char* path : {kTinyQwenMoe, kTinyOlmoeFused}) {
    auto whole = Model::load(path);
    ASSERT_TRUE(whole.is_ok()) << whole.status().message();
    const LayerConfig& lw = (*whole)->config().layers[0];
    const MoeWeights& mw = (*whole)->weights().layers[0].moe;
    for (int rank = 0; rank < 2; ++rank) {
      auto m = Model::load(path, ModelShard{rank, 2});
      ASSERT_TRUE(m.is_ok()) << path << ": " << m.status().message();
      const LayerConfig& lc = (*m)->config().layers[0];
      EXPECT_EQ(lc.n_ff_exp * 2, lw.n_ff_exp) << path;
      EXPECT_EQ(lc.n_ff_shexp * 2, lw.n_ff_shexp) << path;
      const MoeWeights& me = (*m)->weights().layers[0].moe;
      for (size_t e = 0; e < mw.gate.size(); ++e) {
        const TensorView &g = *me.up[e].weight, &gw = *mw.up[e].weight;
        ASSERT_EQ(g.ne[1] * 2, gw.ne[1]);
        EXPECT_EQ(0, std::memcmp(g.row(0), gw.row(rank * g.ne[1]), static_cast<size_t>(g.ne[1]) * g.row_bytes()))
            << path << " expert " << e;
        const TensorView &d = *me.down[e].weight, &dw = *mw.down[e].weight;
        ASSERT_EQ(d.ne[0] * 2, dw.ne[0]);
        for (int64_t i = 0; i < d.ne[1]; ++i)
          ASSERT_EQ(0, std::memcmp(d.row(i), dw.row(i) + dtype_row_size(dw.type, rank * d.ne[0]), d.row_bytes()))
              << path << " expert " << e << " row " << i;
      }
      const TensorView &r = *me.router.weight, &rw = *mw.router.weight;
      ASSERT_EQ(r.nbytes, rw.nbytes);
      EXPECT_EQ(0, std::memcmp(r.data, rw.data, r.nbytes));
    }
  }
}

// Quantized experts split only on whole blocks: MXFP4 experts of width 64
// split into halves of 32 (one block), width 32 does not.
TEST(ModelShard, QuantizedExpertsSplitOnBlockBoundaries) {
  const std::string path = tiny_model("gpt-oss-20b-6l", DType::kMXFP4, "shard_mxfp4.gguf", 64);
  Opened whole = open(path);
  const TensorView down = *whole.file->tensor("blk.0.ffn_down_exps.weight");  // [64, 64, 4]
  ASSERT_EQ(down.type, DType::kMXFP4);
  for (int rank = 0; rank < 2; ++rank) {
    Opened o = open(path);
    ModelShard sh{rank, 2};
    const Status st = shard_model_file(o.file.get(), &o.cfg, &sh);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const TensorView& d2 = *o.file->tensor("blk.0.ffn_down_exps.weight");
    ASSERT_EQ(d2.ne[0], 32);
    for (int64_t i = 0; i < down.nrows(); ++i)
      ASSERT_EQ(0, std::memcmp(d2.row(i), down.row(i) + rank * d2.row_bytes(), d2.row_bytes())) << i;
    EXPECT_EQ(o.file->tensor("blk.0.attn_sinks.weight")->ne[0], 2);  // its 2 heads' sinks
    auto m = Model::load(path, ModelShard{rank, 2});
    EXPECT_TRUE(m.is_ok()) << m.status().message();
  }
  std::remove(path.c_str());
  auto m = Model::load(kTinyGptossMxfp4, ModelShard{0, 2});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("do not fall on mxfp4's 32-element blocks"), std::string::npos)
      << m.status().message();
}

// --pipeline-balance measured: one positive time per layer (the head's on
// the last), stages from them valid; a later stage cannot be timed alone.
TEST(LayerCost, EveryLayerTimed) {
  auto m = Model::load(kTinyGemma);
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  auto c = measure_layer_seconds(**m, pool, 4, 3);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(static_cast<int>(c->size()), (*m)->config().n_layer);
  for (double v : c.value()) EXPECT_GT(v, 0);
  const std::vector<int> b = balance_stages(c.value(), 2);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], 0);
  EXPECT_LT(b[0], b[1]);
  EXPECT_LT(b[1], b[2]);
  EXPECT_EQ(b[2], 3);
  ModelShard later;
  later.layer_begin = 1;
  auto s = Model::load(kTinyGemma, later);
  ASSERT_TRUE(s.is_ok());
  EXPECT_FALSE(measure_layer_seconds(**s, pool).is_ok());
}

TEST(ModelShard, BalancedStages) {
  EXPECT_EQ(balance_stages({1, 1, 1, 1}, 2), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(balance_stages({1, 1, 1, 1, 10, 1}, 2), (std::vector<int>{0, 4, 6}));
  EXPECT_EQ(balance_stages({5, 1, 1, 1, 1, 1}, 2), (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(balance_stages({1, 2, 3}, 3), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace ember
