// Encoding speed: a benchmark (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='*Benchmark*') that prints MB/s
// for English text and the time for 1 MB pathological inputs, and a guard
// against quadratic behaviour on long whitespace runs and long words.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "tokenizer_test_util.h"

namespace ember {
namespace {

using namespace testing_tok;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string english_text(size_t bytes) {
  static const char* words[] = {"the", "of", "and", "to", "in", "is", "was", "he", "for", "it", "with",
                                "as", "his", "on", "be", "at", "by", "had", "tokenizer", "inference",
                                "quantization", "throughput", "Hello,", "world.", "performance",
                                "measurement", "(example)", "don't", "they'll", "1234"};
  std::mt19937 rng(1);
  std::string text;
  while (text.size() < bytes) {
    text += words[rng() % 30];
    text += (rng() % 12 == 0) ? "\n" : " ";
  }
  return text;
}

std::string long_word(size_t bytes) {
  std::mt19937 rng(2);
  std::string w;
  while (w.size() < bytes) w += static_cast<char>('a' + rng() % 26);
  return w;
}

std::vector<std::pair<const char*, const Tokenizer*>> all_tokenizers() {
  std::vector<std::pair<const char*, const Tokenizer*>> out;
  if (const Tokenizer* g = gemma_tokenizer()) out.push_back({"gemma3", g});
  if (const Tokenizer* l = hf_tokenizer("llama3")) out.push_back({"llama3", l});
  if (const Tokenizer* q = hf_tokenizer("qwen3")) out.push_back({"qwen3", q});
  return out;
}

TEST(TokenizerSpeed, DISABLED_Benchmark) {
  const std::string text = english_text(4u << 20);
  for (auto [name, tok] : all_tokenizers()) {
    auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, {false, false});
    const double cold = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    (void)tok->encode(text, {false, false});
    const double warm = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const std::string back = tok->decode(ids);
    const double dec = seconds_since(t0);
    std::printf("%s: encode English %.1f MB/s (first run %.1f MB/s), decode %.1f MB/s\n", name,
                text.size() / warm / 1e6, text.size() / cold / 1e6, back.size() / dec / 1e6);
    EXPECT_EQ(back, text);
    struct Input {
      const char* what;
      std::string s;
      bool special;
    };
    const Input inputs[] = {{"1 MB of spaces", std::string(1 << 20, ' '), false},
                            {"1 MB of newlines/tabs (special)", std::string(1 << 20, '\n'), true},
                            {"1 MB random word", long_word(1 << 20), false},
                            {"1 MB of 'a'", std::string(1 << 20, 'a'), false}};
    for (const Input& in : inputs) {
      t0 = std::chrono::steady_clock::now();
      const auto r = tok->encode(in.s, {false, in.special});
      std::printf("  %-34s %.3f s, %zu tokens\n", in.what, seconds_since(t0), r.size());
    }
  }
}

// Generous bounds: n log n code does these in a fraction of a second even on
// a loaded machine; quadratic code takes many minutes.
TEST(TokenizerSpeed, NoQuadraticBehaviour) {
  const std::string spaces = "x" + std::string(256 << 10, ' ') + "\n\n" + std::string(256 << 10, '\t') + "y";
  const std::string word = long_word(128 << 10);
  for (auto [name, tok] : all_tokenizers()) {
    for (const std::string* s : {&spaces, &word}) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = tok->encode(*s, {false, false});
      const double t = seconds_since(t0);
      EXPECT_LT(t, 10.0) << name << " took " << t << " s for " << s->size() << " bytes";
      EXPECT_EQ(tok->decode(ids), *s) << name;
    }
  }
}

}  // namespace
}  // namespace ember
