// The Hadamard rotation of the KV cache (KvTypes::rot_k / rot_v,
// model/layers/attention.cpp) on the tiny models of every architecture:
// it cancels (Q and K rotated alike, the attention output rotated back), so
// an f32 cache gives the same logits within float rounding; the cache really
// holds H k and H v; and in a ragged batch each sequence follows its own
// cache's rotation, with the bits it gets alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/hadamard.h"
#include "model/tiny_layered_model.h"

namespace ember {
namespace {

constexpr KvTypes kRotated{KvType::kF32, KvType::kF32, KvRotation::kHadamard, KvRotation::kHadamard};

std::vector<int32_t> tokens(int n_vocab, int n, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 29 + seed * 7 + 3) % n_vocab);
  return t;
}

std::vector<float> all_logits(const Model& m, ThreadPool& pool, const std::vector<int32_t>& t, KvCache& cache) {
  ForwardContext ctx(m, pool, 8);  // several steps: rotated rows are read back from the cache
  std::vector<float> out(t.size() * m.config().n_vocab);
  EXPECT_TRUE(ctx.forward(t.data(), static_cast<int64_t>(t.size()), 0, cache, nullptr, out.data()).is_ok());
  return out;
}

class KvRotationModel : public ::testing::TestWithParam<int> {};  // head dim

TEST_P(KvRotationModel, CancelsWithAFloatCacheAndStoresRotatedRows) {
  for (test::TinySpec spec : test::tiny_specs()) {
    spec.head_dim = GetParam();
    SCOPED_TRACE(spec.arch);
    std::unique_ptr<Model> m = test::load_tiny(spec);
    ASSERT_TRUE(m);
    const ModelConfig& cfg = m->config();
    ThreadPool pool(2);
    const std::vector<int32_t> t = tokens(cfg.n_vocab, 21, 1);
    ContiguousKvCache plain(cfg, 21), rot(cfg, 21, kRotated);
    const std::vector<float> a = all_logits(*m, pool, t, plain), b = all_logits(*m, pool, t, rot);
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(a[i]) * a[i];
    EXPECT_LT(std::sqrt(num / den), 2e-5);  // the same function; only float rounding differs
    // Layer by layer the cache holds H k and H v of the unrotated rows.
    for (int il = 0; il < cfg.n_layer; ++il) {
      const int nkv = cfg.layers[il].n_head_kv, hd = cfg.head_dim;
      for (int64_t p : {0, 9, 20}) {
        for (bool v : {false, true}) {
          std::vector<float> want(static_cast<size_t>(nkv) * hd), got(want.size());
          std::memcpy(want.data(), v ? plain.v_row(il, p) : plain.k_row(il, p), want.size() * 4);
          std::memcpy(got.data(), v ? rot.v_row(il, p) : rot.k_row(il, p), got.size() * 4);
          double scale = 0;
          for (int h = 0; h < nkv; ++h) hadamard_row(want.data() + h * hd, hd, false);
          for (float x : want) scale = std::max(scale, std::fabs(double(x)));
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-4 * scale) << "layer " << il << " pos " << p << (v ? " V" : " K");
        }
      }
    }
  }
}

TEST_P(KvRotationModel, RaggedBatchFollowsEachSequencesCache) {
  test::TinySpec spec = test::tiny_specs().back();  // gemma3: windows, softcaps, QK-norm
  spec.head_dim = GetParam();
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  const ModelConfig& cfg = m->config();
  const int V = cfg.n_vocab;
  ThreadPool pool(2);
  const std::vector<int32_t> t0 = tokens(V, 7, 2), t1 = tokens(V, 5, 3), t2 = tokens(V, 6, 4);
  // Alone: each sequence with its own cache type.
  const KvTypes types[3] = {kRotated, {}, {KvType::kF32, KvType::kF32, KvRotation::kHadamard, KvRotation::kNone}};
  const std::vector<int32_t>* seqs[3] = {&t0, &t1, &t2};
  std::vector<std::vector<float>> alone(3);
  for (int s = 0; s < 3; ++s) {
    ContiguousKvCache c(cfg, 8, types[s]);
    alone[s].resize(V);
    ForwardContext ctx(*m, pool, 64);
    ASSERT_TRUE(ctx.forward(seqs[s]->data(), static_cast<int64_t>(seqs[s]->size()), 0, c, alone[s].data()).is_ok());
  }
  // Together in one ragged step.
  ContiguousKvCache c0(cfg, 8, types[0]), c1(cfg, 8, types[1]), c2(cfg, 8, types[2]);
  KvCache* caches[3] = {&c0, &c1, &c2};
  SeqBatch b[3];
  for (int s = 0; s < 3; ++s) {
    b[s].tokens = seqs[s]->data();
    b[s].n = static_cast<int64_t>(seqs[s]->size());
    b[s].cache = caches[s];
    b[s].want_logits = true;
  }
  ForwardContext ctx(*m, pool, 64);
  std::vector<float> together(3 * static_cast<size_t>(V));
  ASSERT_TRUE(ctx.forward_ragged(b, 3, together.data()).is_ok());
  for (int s = 0; s < 3; ++s)
    EXPECT_EQ(std::memcmp(together.data() + s * V, alone[s].data(), V * sizeof(float)), 0) << "sequence " << s;
}

INSTANTIATE_TEST_SUITE_P(HeadDims, KvRotationModel, ::testing::Values(8, 12, 32));

}  // namespace
}  // namespace ember
