// Sampling settings shared by the engine tests: greedy, and seeded
// sampling from the full distribution (no truncation).
#pragma once

#include <cstdint>

#include "engine/sampler.h"

namespace ember::test {

inline SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.f;
  return p;
}

inline SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.f;
  p.seed = seed;
  return p;
}

}  // namespace ember::test
