// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition /
// presence / frequency penalties, seeded RNG (same seed, same output). No
// rollback: speculative verification samples only the tokens it keeps
// (engine/speculative/).
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ember {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: disabled
  float top_p = 0.95f;       // >= 1: disabled
  float min_p = 0.05f;       // <= 0: disabled
  float repetition_penalty = 1.0f;  // 1: disabled (llama.cpp/HF style: divide positive logits)
  float presence_penalty = 0.0f;    // OpenAI style: subtract once per seen token
  float frequency_penalty = 0.0f;   // OpenAI style: subtract per occurrence
  int penalty_last_n = 64;          // window of recent tokens for penalties (-1: all)
  uint64_t seed = 0xE3BE5EEDull;

  // Checks ranges; error names the field.
  Status validate() const;
};

// Per-call working memory of sampling (two vocabulary-sized arrays). A
// sampler owns one; many samplers used from one thread (the serving engine)
// can share one instead, so a sequence costs no vocabulary-sized memory.
struct SamplerScratch {
  std::vector<int32_t> idx;  // candidate indices
  std::vector<float> probs;  // candidate probabilities
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  // Uses `s` (outliving this sampler, not used concurrently) instead of its own.
  void use_scratch(SamplerScratch* s) { sc_ = s; }

  // Samples a token from logits [n_vocab] (modified in place).
  int32_t sample(float* logits, int n_vocab);
  // The distribution sample() would draw from for these logits (modified in
  // place: penalties), as probabilities p [n_vocab] summing to 1 (0 outside
  // the top-k / top-p / min-p set; greedy: one-hot at the argmax). Draws
  // nothing. Speculative decoding's p and q (speculative/rejection.h).
  void distribution(float* logits, int n_vocab, float* p);
  // A uniform draw in [0, 1) from this sampler's seeded RNG (the rejection
  // rule's coins).
  double uniform();
  // Records a token as part of the context (prompt or generated) for penalties.
  void accept(int32_t token);
  void reset();

 private:
  void apply_penalties(float* logits, int n_vocab);
  int32_t sample_unsorted(const float* logits, int n_vocab, float inv_t);
  size_t candidates(const float* logits, int n_vocab, float inv_t, double* kept);
  float dense_probs(const float* logits, int n_vocab, float inv_t, double* kept);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  SamplerScratch own_;
  SamplerScratch* sc_ = &own_;
  double top_p_total_ = 0.0;    // softmax denominator over the whole vocabulary (no top-k)
  std::unordered_map<int32_t, int> counts_;  // reused
};

// Index of the largest logit (lowest index on ties).
int32_t argmax(const float* logits, int n);

}  // namespace ember
