// Sliding-window perplexity: window bookkeeping (every token after the first
// scored exactly once, with at least ctx - stride tokens of context),
// agreement with an independent full-window computation (ForwardContext
// logits + log-softmax in double), the logits file round trip, KL of a model
// with itself (0, top-1 100%) and of f32 vs q8_0 (small but > 0), and a run
// on the default model and through the CLI (skipped when it is absent).
#include "eval/perplexity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "transform/convert.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

const std::string kTinyModel = EMBER_SOURCE_DIR "/tests/data/model/hf_llama_sharded";
const std::string kDefaultModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
const std::string kText = EMBER_SOURCE_DIR "/data/persuasion.txt";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ember_ppl_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

TEST(PerplexityWindows, EveryTokenAfterTheFirstScoredOnce) {
  for (int64_t n : {2, 3, 10, 100, 257, 1000}) {
    for (int64_t ctx : {3, 8, 64, 512}) {
      for (bool bos : {false, true}) {
        const int64_t w = bos ? ctx - 1 : ctx;
        for (int64_t stride : {int64_t{1}, ctx / 2, bos ? w : w - 1}) {
          if (stride < 1) continue;
          PerplexityOptions o;
          o.n_ctx = ctx;
          o.stride = stride;
          o.bos_id = bos ? 0 : -1;
          auto plan = plan_perplexity_windows(n, o);
          ASSERT_TRUE(plan.is_ok()) << plan.status().message();
          std::vector<int> count(n, 0);
          for (size_t k = 0; k < plan->size(); ++k) {
            const PplWindow& win = (*plan)[k];
            EXPECT_EQ(win.begin, static_cast<int64_t>(k) * stride);
            EXPECT_LE(win.end - win.begin, w);
            EXPECT_LE(win.end, n);
            // Each scored token has a predecessor inside the window (or BOS).
            EXPECT_GE(win.score_begin, win.begin + (bos ? 0 : 1));
            if (k > 0) {
              EXPECT_GE(win.score_begin - win.begin, w - stride) << "context of window " << k;
            }
            for (int64_t j = win.score_begin; j < win.end; ++j) count[j]++;
          }
          EXPECT_EQ(count[0], 0);
          for (int64_t j = 1; j < n; ++j)
            ASSERT_EQ(count[j], 1) << "token " << j << " n=" << n << " ctx=" << ctx << " stride=" << stride;
        }
      }
    }
  }
}

TEST(PerplexityWindows, ChunksAndInvalidOptions) {
  PerplexityOptions o;
  o.n_ctx = 16;
  o.max_windows = 3;
  auto plan = plan_perplexity_windows(1000, o);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->size(), 3u);
  EXPECT_EQ((*plan)[1].begin, 8);  // default stride ctx/2

  auto bad = [](int64_t n, int64_t ctx, int64_t stride, int32_t bos) {
    PerplexityOptions b;
    b.n_ctx = ctx;
    b.stride = stride;
    b.bos_id = bos;
    return !plan_perplexity_windows(n, b).is_ok();
  };
  EXPECT_TRUE(bad(1, 16, 8, -1));    // too short
  EXPECT_TRUE(bad(100, 16, 16, -1)); // stride == W without BOS: first token unscorable
  EXPECT_FALSE(bad(100, 16, 15, 1)); // stride == W with BOS is fine
  EXPECT_TRUE(bad(100, 16, 16, 1));  // stride > W
  EXPECT_TRUE(bad(100, 1, 1, -1));   // context too small
  EXPECT_TRUE(bad(100, 16, -2, -1));
}

// NLL of each scored token computed independently: every window is run
// whole through ForwardContext and the log-softmax is taken in double.
struct Reference {
  double nll_sum = 0;
  int64_t n = 0;
  std::vector<int64_t> index;
  std::vector<std::vector<double>> rows;  // log-softmax rows, in order
};

Reference reference_nll(const Model& m, const std::vector<int32_t>& toks, int64_t ctx, int64_t stride, int32_t bos) {
  Reference ref;
  ThreadPool pool(1);
  ForwardContext fc(m, pool, 64);
  const int64_t V = m.config().n_vocab, N = static_cast<int64_t>(toks.size());
  const int64_t w = bos >= 0 ? ctx - 1 : ctx;
  int64_t done = 1;
  for (int64_t begin = 0; done < N; begin += stride) {
    const int64_t end = std::min(begin + w, N);
    std::vector<int32_t> seq;
    seq.reserve(static_cast<size_t>(end - begin + 1));
    if (bos >= 0) seq.push_back(bos);
    for (int64_t i = begin; i < end; ++i) seq.push_back(toks[static_cast<size_t>(i)]);
    const int64_t L = static_cast<int64_t>(seq.size());
    ContiguousKvCache cache(m.config(), L);
    std::vector<float> all(L * V);
    EXPECT_TRUE(fc.forward(seq.data(), L, 0, cache, nullptr, all.data()).is_ok());
    const int64_t off = bos >= 0 ? 1 : 0;
    for (int64_t j = done; j < end; ++j) {
      const float* row = all.data() + (j - begin + off - 1) * V;
      double mx = row[0];
      for (int64_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(row[i]));
      double s = 0;
      for (int64_t i = 0; i < V; ++i) s += std::exp(row[i] - mx);
      std::vector<double> lp(V);
      for (int64_t i = 0; i < V; ++i) lp[i] = row[i] - mx - std::log(s);
      ref.nll_sum -= lp[toks[j]];
      ref.n++;
      ref.index.push_back(j);
      ref.rows.push_back(std::move(lp));
    }
    done = end;
  }
  return ref;
}

TEST(Perplexity, MatchesIndependentComputation) {
  auto model = Model::load(kTinyModel);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const Model& m = **model;
  const int V = m.config().n_vocab;
  const std::vector<int32_t> toks = random_tokens(150, V, 7);
  ThreadPool pool(1);
  struct Case {
    int64_t ctx, stride;
    int32_t bos;
    int batch;
  };
  for (const Case& c : {Case{200, 0, 1, 32}, Case{48, 16, 1, 5}, Case{40, 13, -1, 32}, Case{33, 32, 1, 7}}) {
    const Reference ref = reference_nll(m, toks, c.ctx, c.stride ? c.stride : c.ctx / 2, c.bos);
    PerplexityOptions o;
    o.n_ctx = c.ctx;
    o.stride = c.stride;
    o.bos_id = c.bos;
    o.logits_batch = c.batch;
    size_t row = 0;
    double max_err = 0;
    auto res = compute_perplexity(m, pool, toks, o, [&](int64_t index, int32_t target, const float* lp) -> Status {
      EXPECT_LT(row, ref.rows.size());
      if (row >= ref.rows.size()) return Status::error("too many rows");
      EXPECT_EQ(index, ref.index[row]);
      EXPECT_EQ(target, toks[index]);
      for (int i = 0; i < V; ++i) max_err = std::max(max_err, std::abs(lp[i] - ref.rows[row][i]));
      ++row;
      return Status::ok();
    });
    ASSERT_TRUE(res.is_ok()) << res.status().message();
    EXPECT_EQ(res->n_scored, 149);
    EXPECT_EQ(res->n_scored, ref.n);
    EXPECT_EQ(row, ref.rows.size());
    EXPECT_LT(max_err, 2e-4) << "ctx " << c.ctx;
    const double want = ref.nll_sum / ref.n;
    EXPECT_NEAR(res->nll_mean, want, 1e-5 * std::abs(want)) << "ctx " << c.ctx << " stride " << c.stride;
    EXPECT_NEAR(res->ppl, std::exp(want), 1e-4 * std::exp(want));
    EXPECT_GT(res->ppl_err, 0);
    // Random weights on random tokens: perplexity near the vocabulary size.
    EXPECT_GT(res->ppl, V / 4.0);
    EXPECT_LT(res->ppl, V * 4.0);
  }
  // Out-of-vocabulary tokens are rejected.
  std::vector<int32_t> bad = toks;
  bad[5] = V;
  EXPECT_FALSE(compute_perplexity(m, pool, bad, PerplexityOptions{}).is_ok());
}

// Runs the tiny model (converted to `type`) and returns its result; rows go
// to `on_row`.
Result<PerplexityResult> run_converted(DType type, const std::vector<int32_t>& toks, const ScoredRowFn& on_row) {
  auto file = open_model_file(kTinyModel);
  if (!file) return file.status();
  ThreadPool pool(1);
  ConvertOptions co;
  co.type = type;
  auto conv = convert_model(std::move(file.value()), co, pool);
  if (!conv) return conv.status();
  auto model = Model::from_file(std::move(conv.value()));
  if (!model) return model.status();
  PerplexityOptions o;
  o.n_ctx = 40;
  o.stride = 16;
  o.bos_id = 1;
  return compute_perplexity(**model, pool, toks, o, on_row);
}

TEST(Perplexity, LogitsFileAndKl) {
  const std::vector<int32_t> toks = random_tokens(120, 64, 11);
  const std::string path = temp_path("base.bin");
  LogitsFileHeader h;
  h.n_vocab = 64;
  h.n_ctx = 40;
  h.stride = 16;
  h.bos_id = 1;
  h.n_tokens = toks.size();
  h.tokens_hash = hash_tokens(toks);
  {
    auto w = LogitsWriter::create(path, h);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    auto res = run_converted(DType::kF32, toks, [&](int64_t i, int32_t t, const float* lp) { return (*w)->add(i, t, lp); });
    ASSERT_TRUE(res.is_ok()) << res.status().message();
    ASSERT_TRUE((*w)->finish().is_ok());
    EXPECT_EQ((*w)->rows(), 119u);
  }
  EXPECT_EQ(std::filesystem::file_size(path), kLogitsHeaderBytes + 119 * (8 + 2 * 64));

  // Self: KL exactly 0, top-1 100%.
  auto kl_against = [&](DType type) {
    auto r = LogitsReader::open(path);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ((*r)->header().n_rows, 119u);
    EXPECT_EQ((*r)->header().tokens_hash, hash_tokens(toks));
    EXPECT_EQ((*r)->header().stride, 16);
    EXPECT_EQ((*r)->header().bos_id, 1);
    KlAccumulator kl(64);
    std::vector<float> base(64);
    auto res = run_converted(type, toks, [&](int64_t i, int32_t t, const float* lp) -> Status {
      int64_t bi;
      int32_t bt;
      EMBER_RETURN_IF_ERROR((*r)->next(&bi, &bt, base.data()));
      EXPECT_EQ(bi, i);
      EXPECT_EQ(bt, t);
      if (type == DType::kF32) {  // f16 rounding of log-probabilities only
        for (int k = 0; k < 64; ++k) EXPECT_NEAR(base[k], lp[k], 1e-3 * std::abs(lp[k]) + 1e-6);
      }
      kl.add(base.data(), lp);
      return Status::ok();
    });
    EXPECT_TRUE(res.is_ok()) << res.status().message();
    int64_t i;
    int32_t t;
    EXPECT_FALSE((*r)->next(&i, &t, base.data()).is_ok());  // all rows used
    return kl.summary();
  };
  const KlAccumulator::Summary self = kl_against(DType::kF32);
  EXPECT_EQ(self.n, 119);
  EXPECT_EQ(self.mean, 0.0);
  EXPECT_EQ(self.max, 0.0);
  EXPECT_EQ(self.top1_agree, 1.0);

  const KlAccumulator::Summary q8 = kl_against(DType::kQ8_0);
  EXPECT_EQ(q8.n, 119);
  EXPECT_GT(q8.mean, 1e-9);
  EXPECT_LT(q8.mean, 1e-2);
  EXPECT_GE(q8.p99, q8.median);
  EXPECT_GE(q8.max, q8.p99);
  EXPECT_GT(q8.top1_agree, 0.8);

  // A truncated file is refused.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_FALSE(LogitsReader::open(path).is_ok());
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "not a logits file at all, but long enough to hold a header.............";
  }
  EXPECT_FALSE(LogitsReader::open(path).is_ok());
  std::remove(path.c_str());
  EXPECT_FALSE(LogitsReader::open(path).is_ok());
}

TEST(Perplexity, KlOfKnownDistributions) {
  // P = (0.5, 0.5), Q = (0.25, 0.75): KL = 0.5 ln 2 + 0.5 ln(2/3).
  const float p[2] = {std::log(0.5f), std::log(0.5f)};
  const float q[2] = {std::log(0.25f), std::log(0.75f)};
  KlAccumulator kl(2);
  kl.add(p, q);
  kl.add(q, q);
  const auto s = kl.summary();
  EXPECT_NEAR(s.max, 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 2e-3);
  EXPECT_EQ(s.n, 2);
  EXPECT_NEAR(s.mean, s.max / 2, 1e-12);
  EXPECT_DOUBLE_EQ(s.top1_agree, 0.5);  // ties resolve to the first index: 0 vs 1 disagree; q vs q agrees
}

TEST(Perplexity, DefaultModelOnShippedText) {
  if (!std::filesystem::exists(kDefaultModel)) GTEST_SKIP() << "default model not installed";
  std::ifstream in(kText, std::ios::binary);
  ASSERT_TRUE(in.good()) << kText;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 200000u);
  text.resize(4000);
  auto model = Model::load(kDefaultModel);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto tok = Tokenizer::from_metadata((*model)->file().metadata);
  ASSERT_TRUE(tok.is_ok());
  const std::vector<int32_t> toks = (*tok)->encode(text, {.add_bos = false});
  ThreadPool pool(2);
  PerplexityOptions o;
  o.n_ctx = 64;
  o.max_windows = 2;
  o.bos_id = (*tok)->bos_id();
  auto res = compute_perplexity(**model, pool, toks, o);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->n_windows, 2);
  EXPECT_EQ(res->n_scored, 62 + 32);
  // A real model on English prose: far below the vocabulary size.
  EXPECT_GT(res->ppl, 2);
  EXPECT_LT(res->ppl, 200);
}

TEST(Perplexity, CliSmoke) {
  const std::string ember = EMBER_BINARY_DIR "/ember";
  if (!std::filesystem::exists(kDefaultModel)) GTEST_SKIP() << "default model not installed";
  if (!std::filesystem::exists(ember)) GTEST_SKIP() << "ember binary not built";
  const std::string out = temp_path("cli.txt");
  const std::string cmd = ember + " perplexity -m " + kDefaultModel + " -f " + kText +
                          " --ctx 64 --chunks 2 -t 2 > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(s.find("perplexity: "), std::string::npos) << s;
  EXPECT_NE(s.find("over 94 tokens in 2 windows"), std::string::npos) << s;  // 62 + 32
  const std::string bad = ember + " perplexity -f " + kText + " --ctx 64 --stride 64 > /dev/null 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(bad.c_str())), 2);
  std::remove(out.c_str());
}

}  // namespace
}  // namespace ember
