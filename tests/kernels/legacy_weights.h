// Test helper for the legacy-block kernel tests: weight rows of a
// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 type (f16 d first in each 32-element
// block, then f16 m for Q4_1 / Q5_1). Even rows
// are quantized gaussians of varying magnitude (every 5th all zero); odd rows
// are raw random bytes (so Q8_0's -128 occurs) with small scales.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {

inline std::vector<uint8_t> make_legacy_weights(DType t, int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const size_t rb = dtype_row_size(t, n);
  const size_t block_bytes = dtype_row_size(t, kQK);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.data() + rb * static_cast<size_t>(r);
    if (r % 2 == 0) {
      const float mag = r % 5 == 4 ? 0.0f : std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
      for (auto& v : f) v = gauss(rng) * mag;
      quantize_row_ref(t, f.data(), row, n);
      continue;
    }
    for (size_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(rng());
    const bool has_min = t == DType::kQ4_1 || t == DType::kQ5_1;  // f16 m right after d
    for (int64_t b = 0; b < n / kQK; ++b) {
      const uint16_t d = f32_to_f16(uni(rng) * 0.05f);
      std::memcpy(row + block_bytes * static_cast<size_t>(b), &d, sizeof(d));
      if (has_min) {
        const uint16_t m = f32_to_f16(uni(rng) * 0.5f);
        std::memcpy(row + block_bytes * static_cast<size_t>(b) + 2, &m, sizeof(m));
      }
    }
  }
  return w;
}

}  // namespace ember
