// Truncated draft head (--draft-vocab): the token ranking (text counts, then
// the tokenizer's scores, control/unused tokens out, end tokens always in),
// and the draft view's head: it holds only the chosen rows (fewer bytes
// read per draft step) and its logits are, bit for bit, the full head's
// logits of those tokens. Exactness of speculation with such a draft is in
// speculative_draft_test.cpp (GreedyIdentical*WithTruncatedHead,
// SampledMatchesPlainDistributionTruncatedDraftHead). An interleaved
// target head gives an interleaved draft head where the rows allow.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/speculative/draft_head.h"
#include "engine/speculative/layerskip.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "kernels/interleave.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";

Metadata vocab_md(const std::vector<double>& scores, const std::vector<int32_t>& types, int eos) {
  Metadata md;
  GgufValue s;
  s.type = GgufType::kArray;
  s.elem_type = GgufType::kFloat32;
  s.count = scores.size();
  s.nums = scores;
  md.set("tokenizer.ggml.scores", s);
  md.set("tokenizer.ggml.token_type", Metadata::make_int_array(types));
  md.set("tokenizer.ggml.eos_token_id", Metadata::make_int(eos));
  return md;
}

TEST(DraftHead, RanksByTextCountThenScoreAndKeepsEndTokens) {
  // 8 tokens: 0 control (unknown-ish), 1 EOS (control), 2-7 normal; scores
  // rise with the id except token 3.
  const Metadata md = vocab_md({0, 0, -6, 0, -4, -3, -2, -1}, {3, 3, 1, 1, 1, 1, 1, 1}, 1);
  // No text: EOS, then by score: 3 (0), 7 (-1), 6 (-2).
  EXPECT_EQ(rank_head_tokens(md, 8, {}, 4).value(), (std::vector<int32_t>{1, 3, 6, 7}));
  // Text counts come first: 2 (x3), 4 (x2), then scores: 3.
  EXPECT_EQ(rank_head_tokens(md, 8, {2, 4, 2, 4, 2, 0}, 4).value(), (std::vector<int32_t>{1, 2, 3, 4}));
  // Control token 0 only after every other token.
  EXPECT_EQ(rank_head_tokens(md, 8, {0, 0, 0}, 7).value(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(rank_head_tokens(md, 8, {}, 8).value().size(), 8u);
  // Without metadata: ids in order.
  EXPECT_EQ(rank_head_tokens(Metadata(), 8, {}, 3).value(), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(rank_head_tokens(md, 8, {}, 0).is_ok());
  EXPECT_FALSE(rank_head_tokens(md, 8, {}, 9).is_ok());
  EXPECT_FALSE(rank_head_tokens(md, 8, {8}, 2).is_ok());
}

TEST(DraftHead, ViewReadsOnlyTheChosenRowsAndGivesTheirExactLogits) {
  auto m = Model::load(kTinyQwen);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const Model& full = *m.value();
  const int V = full.config().n_vocab;
  const std::vector<int32_t> head = {0, 3, 4, 17, 40, 63};
  auto d = make_draft_view(full, {}, head);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  const Model& part = *d.value();
  EXPECT_EQ(part.config().n_vocab, V);  // input tokens: the whole vocabulary
  EXPECT_EQ(part.config().n_logits(), 6);
  const TensorView& w = *part.weights().output.weight;
  const TensorView& wf = *full.weights().output.weight;
  EXPECT_EQ(w.ne[1], 6);
  EXPECT_EQ(w.nbytes, 6 * wf.row_bytes());  // what a draft step's head reads
  EXPECT_NE(w.data, wf.data);
  // Logits of every position (the ragged batch's all_logits) for tokens
  // that include ids outside the head: the head's entries are the full
  // model's entries of those tokens, bit for bit.
  ThreadPool pool(1);
  ForwardContext ff(full, pool, 8), fp(part, pool, 8);
  const std::vector<int32_t> toks = {3, 62, 4, 1, 50};
  ContiguousKvCache ka(full.config(), 16), kb(part.config(), 16);
  std::vector<float> a(5 * V), b(5 * head.size());
  ASSERT_TRUE(ff.forward(toks.data(), 5, 0, ka, nullptr, a.data()).is_ok());
  ASSERT_TRUE(fp.forward(toks.data(), 5, 0, kb, nullptr, b.data()).is_ok());
  for (int r = 0; r < 5; ++r)
    for (size_t j = 0; j < head.size(); ++j)
      EXPECT_EQ(b[r * head.size() + j], a[static_cast<size_t>(r) * V + head[j]]) << "row " << r << " token " << head[j];
  // A truncated view cannot be truncated again, nor take bad rows.
  EXPECT_FALSE(make_draft_view(part, {}, {1, 2}).is_ok());
  EXPECT_FALSE(make_draft_view(full, {}, {4, 3}).is_ok());
  EXPECT_FALSE(make_draft_view(full, {}, {0, V}).is_ok());
}

// An interleaved (kernels/interleave.h) Q8_0 head gives its rows back in
// the base type; the draft head is interleaved again when its row count
// allows (32 rows here), plain otherwise (24), and its logits stay the full
// head's entries, bit for bit.
TEST(DraftHead, InterleavedLikeTheTargetsHead) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ember_draft_head_" + std::to_string(getpid()) + ".gguf")).string();
  ThreadPool pool(2);
  GenModelShape s;
  s.arch = "llama";
  s.n_layer = 1;
  s.n_embd = 128;
  s.n_ff = 256;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.n_vocab = 320;
  GenModelOptions o;
  o.type = DType::kQ8_0;
  o.seed = 5;
  o.weight_std = 0.05f;
  ASSERT_TRUE(write_random_model(s, o, path, pool).is_ok());
  auto m = Model::load(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  Model& full = *m.value();
  const bool native = interleave_pays(DType::kQ8_0, 320);
  EXPECT_EQ(full.interleave_weights(2) > 0, native);
  const int V = full.config().n_vocab;
  for (int n : {32, 24}) {
    std::vector<int32_t> head;
    for (int i = 0; i < n; ++i) head.push_back(i * 9 + 2);
    auto d = make_draft_view(full, {}, head);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    const TensorView& w = *d.value()->weights().output.weight;
    EXPECT_EQ(w.type, native && n % 16 == 0 ? DType::kQ8_0_R16 : DType::kQ8_0) << n;
    ForwardContext ff(full, pool, 8), fp(*d.value(), pool, 8);
    const std::vector<int32_t> toks = {3, 62, 4, 1, 50};
    ContiguousKvCache ka(full.config(), 16), kb(d.value()->config(), 16);
    std::vector<float> a(5 * V), b(5 * head.size());
    ASSERT_TRUE(ff.forward(toks.data(), 5, 0, ka, nullptr, a.data()).is_ok());
    ASSERT_TRUE(fp.forward(toks.data(), 5, 0, kb, nullptr, b.data()).is_ok());
    for (int r = 0; r < 5; ++r)
      for (size_t j = 0; j < head.size(); ++j)
        ASSERT_EQ(b[r * head.size() + j], a[static_cast<size_t>(r) * V + head[j]]) << n << " row " << r;
  }
}

}  // namespace
}  // namespace ember
