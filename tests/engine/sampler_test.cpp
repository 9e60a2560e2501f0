// Sampler tests: greedy, seeding, filters, penalties, and that sampling
// follows the softmax distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include <cmath>
#include <vector>

namespace ember {
namespace {

std::vector<float> logits_of(std::vector<float> p) {
  for (float& x : p) x = std::log(x);
  return p;
}

int32_t draw(Sampler& s, std::vector<float> l) { return s.sample(l.data(), static_cast<int>(l.size())); }

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  EXPECT_EQ(draw(s, {0.1f, 3.f, 2.f, 3.f}), 1);
}

// The vectorized argmax returns what the plain scalar rule (first strict
// maximum) returns: random rows of every length mod 8, ties, -inf.
TEST(Sampler, ArgmaxMatchesScalarRule) {
  std::mt19937 rng(9);
  for (int n : {1, 2, 7, 8, 9, 15, 16, 17, 100, 262144}) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<float> x(n);
      for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 50)) - 25.f;  // many ties
      if (rep == 1) x.assign(n, -std::numeric_limits<float>::infinity());
      if (rep == 2) x[rng() % n] = 1e9f;
      int32_t want = 0;
      for (int i = 1; i < n; ++i)
        if (x[i] > x[want]) want = i;
      EXPECT_EQ(argmax(x.data(), n), want) << "n " << n << " rep " << rep;
    }
  }
}

TEST(Sampler, SameSeedSameSequence) {
  SamplingParams p;
  p.temperature = 1.f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.seed = 42;
  std::vector<float> l = logits_of({0.2f, 0.3f, 0.1f, 0.4f});
  Sampler a(p), b(p);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(draw(a, l));
    sb.push_back(draw(b, l));
  }
  EXPECT_EQ(sa, sb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> sc;
  for (int i = 0; i < 200; ++i) sc.push_back(draw(c, l));
  EXPECT_NE(sa, sc);
}

TEST(Sampler, FollowsSoftmax) {
  SamplingParams p;
  p.temperature = 1.f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f};
  Sampler s(p);
  std::vector<int> hist(4);
  const int n = 20000;
  for (int i = 0; i < n; ++i) hist[draw(s, logits_of(probs))]++;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(hist[i] / double(n), probs[i], 0.015) << i;
}

TEST(Sampler, TemperatureSharpens) {
  SamplingParams p;
  p.temperature = 0.25f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  Sampler s(p);
  int top = 0;
  for (int i = 0; i < 2000; ++i) top += draw(s, logits_of({0.3f, 0.7f})) == 1;
  // p(1) = 0.7^4 / (0.7^4 + 0.3^4) = 0.967
  EXPECT_NEAR(top / 2000.0, 0.967, 0.015);
}

TEST(Sampler, TopKTopPMinPRestrictCandidates) {
  const std::vector<float> probs = {0.05f, 0.5f, 0.3f, 0.15f};
  SamplingParams p;
  p.temperature = 1.f;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.top_k = 2;
  Sampler k(p);
  for (int i = 0; i < 500; ++i) {
    int t = draw(k, logits_of(probs));
    EXPECT_TRUE(t == 1 || t == 2);
  }
  p.top_k = 0;
  p.top_p = 0.75f;  // 0.5 + 0.3 reaches 0.75
  Sampler tp(p);
  for (int i = 0; i < 500; ++i) {
    int t = draw(tp, logits_of(probs));
    EXPECT_TRUE(t == 1 || t == 2);
  }
  p.top_p = 1.f;
  p.min_p = 0.5f;  // keep p >= 0.25
  Sampler mp(p);
  for (int i = 0; i < 500; ++i) {
    int t = draw(mp, logits_of(probs));
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

TEST(Sampler, TopPOverLargeVocabulary) {
  // Without top-k the candidate prefix must grow until it covers top_p:
  // 50000 equal logits, top_p 0.9 -> the 45000 lowest ids (ties by id).
  std::vector<float> l(50000, 0.f);
  SamplingParams p;
  p.temperature = 1.f;
  p.top_k = 0;
  p.top_p = 0.9f;
  p.min_p = 0.f;
  Sampler s(p);
  int beyond_first_candidates = 0;
  for (int i = 0; i < 300; ++i) {
    const int32_t t = draw(s, l);
    EXPECT_LT(t, 45000);
    beyond_first_candidates += t >= 1024;
  }
  EXPECT_GT(beyond_first_candidates, 200);
}

TEST(Sampler, Penalties) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.f;
  Sampler s(p);
  s.accept(1);
  EXPECT_EQ(draw(s, {1.0f, 1.5f, 0.9f}), 0);  // 1.5 / 2 = 0.75 < 1.0
  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 0.3f;
  Sampler sf(f);
  sf.accept(1);
  sf.accept(1);
  EXPECT_EQ(draw(sf, {1.0f, 1.5f}), 0);  // 1.5 - 0.6 = 0.9
  SamplingParams pr;
  pr.temperature = 0;
  pr.presence_penalty = 0.4f;
  Sampler sp(pr);
  sp.accept(1);
  sp.accept(1);
  EXPECT_EQ(draw(sp, {1.0f, 1.3f}), 0);  // 1.3 - 0.4 = 0.9
}

TEST(Sampler, ValidateRejectsBadValues) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_FALSE(p.validate().is_ok());
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_FALSE(p.validate().is_ok());
  p = SamplingParams();
  p.top_p = NAN;
  EXPECT_FALSE(p.validate().is_ok());
  EXPECT_TRUE(SamplingParams().validate().is_ok());
}

}  // namespace
}  // namespace ember
