// Ragged multi-sequence forward over the paged KV cache: every sequence's
// logits are bit-identical to running it alone on a contiguous cache,
// whatever the batch composition and chunking.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "engine/kv/block_manager.h"
#include "engine/kv/kv_pool.h"
#include "model/model.h"

namespace ember {
namespace {

std::vector<float> logits_alone(const Model& m, ThreadPool& pool, const std::vector<int32_t>& toks) {
  ForwardContext ctx(m, pool, 64);
  ContiguousKvCache cache(m.config(), static_cast<int64_t>(toks.size()));
  std::vector<float> all(toks.size() * m.config().n_vocab);
  EXPECT_TRUE(ctx.forward(toks.data(), static_cast<int64_t>(toks.size()), 0, cache, nullptr, all.data()).is_ok());
  return all;
}

void check_model(const std::string& path, int n_seqs, int max_len, int block_size) {
  auto mr = Model::load(path);
  ASSERT_TRUE(mr.is_ok()) << mr.status().message();
  const Model& m = *mr.value();
  const int V = m.config().n_vocab;
  ThreadPool pool(2);
  std::mt19937 rng(42);
  std::vector<std::vector<int32_t>> toks(n_seqs);
  std::vector<std::vector<float>> ref(n_seqs);
  for (int i = 0; i < n_seqs; ++i) {
    const int len = 1 + static_cast<int>(rng() % max_len);
    for (int j = 0; j < len; ++j) toks[i].push_back(static_cast<int32_t>(rng() % V));
    ref[i] = logits_alone(m, pool, toks[i]);
  }
  auto kv = KvBlockPool::create(m.config(), block_size, 0, 4096 / block_size + 8);
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  BlockManager bm(kv.value()->n_blocks(), block_size, false);
  std::vector<std::vector<std::vector<int32_t>>> tables(n_seqs, std::vector<std::vector<int32_t>>(1));
  std::vector<std::unique_ptr<PagedKvCache>> caches;
  for (int i = 0; i < n_seqs; ++i) caches.push_back(std::make_unique<PagedKvCache>(*kv.value(), tables[i]));
  std::vector<int64_t> done(n_seqs, 0);
  const int max_batch = 48;
  ForwardContext ctx(m, pool, max_batch);
  std::vector<float> logits(static_cast<size_t>(n_seqs) * V);
  int n_checked = 0;
  for (int step = 0; step < 10000; ++step) {
    std::vector<SeqBatch> batch;
    std::vector<int> who;
    int64_t budget = max_batch;
    for (int i = 0; i < n_seqs && budget > 0; ++i) {
      const int64_t left = static_cast<int64_t>(toks[i].size()) - done[i];
      if (left == 0 || rng() % 3 == 0) continue;  // randomly sit out a step
      const int64_t n = std::min<int64_t>({left, budget, 1 + static_cast<int64_t>(rng() % 20)});
      const int64_t need = (done[i] + n + block_size - 1) / block_size - static_cast<int64_t>(tables[i][0].size());
      ASSERT_TRUE(bm.allocate(tables[i][0], static_cast<int>(std::max<int64_t>(0, need))));
      caches[i]->sync();
      const bool last = done[i] + n == static_cast<int64_t>(toks[i].size());
      batch.push_back(SeqBatch{toks[i].data() + done[i], n, done[i], caches[i].get(), last || rng() % 4 != 0});
      who.push_back(i);
      budget -= n;
    }
    if (batch.empty()) {
      bool all_done = true;
      for (int i = 0; i < n_seqs; ++i) all_done &= done[i] == static_cast<int64_t>(toks[i].size());
      if (all_done) break;
      continue;
    }
    ASSERT_TRUE(ctx.forward_ragged(batch.data(), static_cast<int>(batch.size()), logits.data()).is_ok());
    int row = 0;
    for (size_t k = 0; k < batch.size(); ++k) {
      const int i = who[k];
      done[i] += batch[k].n;
      if (!batch[k].want_logits) continue;
      const float* want = ref[i].data() + static_cast<size_t>(done[i] - 1) * V;
      ASSERT_EQ(0, std::memcmp(want, logits.data() + static_cast<size_t>(row) * V, V * sizeof(float)))
          << "sequence " << i << " position " << done[i] - 1;
      ++row;
      ++n_checked;
    }
  }
  EXPECT_GE(n_checked, n_seqs);
  for (auto& t : tables) bm.free(t[0]);
  EXPECT_EQ(bm.n_free(), bm.n_blocks());
}

TEST(RaggedForward, TinyGemma3BitIdenticalToAlone) {
  // Sliding window 16 and global layers; sequences longer than the window.
  check_model(EMBER_SOURCE_DIR "/tests/data/model/hf_gemma3", 6, 90, 16);
}

TEST(RaggedForward, TinyQwen2BitIdenticalToAlone) {
  check_model(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2", 5, 100, 4);
}

TEST(RaggedForward, DefaultModelBitIdenticalToAlone) {
  const std::string path = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not present";
  check_model(path, 3, 28, 16);
}

TEST(RaggedForward, RejectsBadInput) {
  auto mr = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2");
  ASSERT_TRUE(mr.is_ok());
  const Model& m = *mr.value();
  ThreadPool pool(1);
  ForwardContext ctx(m, pool, 8);
  ContiguousKvCache cache(m.config(), 16);
  std::vector<int32_t> toks(10, 1);
  std::vector<float> logits(m.config().n_vocab);
  SeqBatch b{toks.data(), 10, 0, &cache, true};
  EXPECT_FALSE(ctx.forward_ragged(&b, 1, logits.data()).is_ok());  // over max_batch
  b.n = 4;
  b.pos0 = 14;
  EXPECT_FALSE(ctx.forward_ragged(&b, 1, logits.data()).is_ok());  // past capacity
  b.pos0 = 0;
  toks[1] = -3;
  EXPECT_FALSE(ctx.forward_ragged(&b, 1, logits.data()).is_ok());  // bad token
  EXPECT_FALSE(ctx.forward_ragged(&b, 0, logits.data()).is_ok());
  toks[1] = 2;
  EXPECT_TRUE(ctx.forward_ragged(&b, 1, logits.data()).is_ok());
}

}  // namespace
}  // namespace ember
