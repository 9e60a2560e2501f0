// Test helper for the kernel tests of every weight family: a weight matrix
// [rows, n] of any supported type (float, legacy blocks, K-quants), rows
// quantized from gaussians of varying magnitude plus, for block types, every
// other row raw random quant bytes with small sane f16 scales.
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

// n gaussians of standard deviation `scale`, none zero (a zero draw becomes
// scale * 1e-3), so an op that skips or drops an element cannot pass.
inline std::vector<float> nonzero_gaussians(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = g(rng);
    if (x == 0.0f) x = scale * 1e-3f;
  }
  return v;
}

inline uint16_t small_f16(std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  return f32_to_f16(uni(rng) * 0.05f);
}

// A weight matrix [rows, n] of type t: rows quantized from gaussian floats
// with varying magnitudes (some all-zero), then for block types every other
// row replaced by raw random quant bytes with sane scales, covering quant
// values the quantizers never emit (Q8_0 -128, extreme K-quant scales).
inline std::vector<uint8_t> make_weights(DType t, int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const size_t rb = dtype_row_size(t, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = r % 5 == 4 ? 0.0f : std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    for (auto& v : f) v = gauss(rng) * mag;
    uint8_t* row = w.data() + rb * static_cast<size_t>(r);
    if (t == DType::kF32) {
      std::memcpy(row, f.data(), rb);
    } else {
      quantize_row_ref(t, f.data(), row, n);
    }
    if (r % 2 == 0 || dtype_block_size(t) == 1) continue;
    for (size_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(rng());
    const int64_t nb = n / dtype_block_size(t);
    for (int64_t b = 0; b < nb; ++b) {
      switch (t) {
        case DType::kQ4_0:
          reinterpret_cast<BlockQ4_0*>(row)[b].d = small_f16(rng);
          break;
        case DType::kQ4_1:
          reinterpret_cast<BlockQ4_1*>(row)[b].d = small_f16(rng);
          reinterpret_cast<BlockQ4_1*>(row)[b].m = small_f16(rng);
          break;
        case DType::kQ5_0:
          reinterpret_cast<BlockQ5_0*>(row)[b].d = small_f16(rng);
          break;
        case DType::kQ5_1:
          reinterpret_cast<BlockQ5_1*>(row)[b].d = small_f16(rng);
          reinterpret_cast<BlockQ5_1*>(row)[b].m = small_f16(rng);
          break;
        case DType::kQ8_0:
          reinterpret_cast<BlockQ8_0*>(row)[b].d = small_f16(rng);
          break;
        case DType::kMXFP4:  // scales 2^-10 .. 2^-1 (as small_f16's)
          reinterpret_cast<BlockMXFP4*>(row)[b].e = static_cast<uint8_t>(117 + rng() % 10);
          break;
        case DType::kQ2_K:
          reinterpret_cast<BlockQ2_K*>(row)[b].d = small_f16(rng);
          reinterpret_cast<BlockQ2_K*>(row)[b].dmin = small_f16(rng);
          break;
        case DType::kQ3_K:
          reinterpret_cast<BlockQ3_K*>(row)[b].d = small_f16(rng);
          break;
        case DType::kQ4_K:
          reinterpret_cast<BlockQ4_K*>(row)[b].d = small_f16(rng);
          reinterpret_cast<BlockQ4_K*>(row)[b].dmin = small_f16(rng);
          break;
        case DType::kQ5_K:
          reinterpret_cast<BlockQ5_K*>(row)[b].d = small_f16(rng);
          reinterpret_cast<BlockQ5_K*>(row)[b].dmin = small_f16(rng);
          break;
        case DType::kQ6_K:
          reinterpret_cast<BlockQ6_K*>(row)[b].d = small_f16(rng);
          break;
        default:
          break;
      }
    }
  }
  return w;
}

// Blocks at the extremes of the integer sums, [rows, n] of Q4_0 / Q5_0 /
// Q8_0 / Q4_K / Q5_K / Q6_K: row r's scale grows with r, and by r % 3 (Q6_K
// also r % 4, Q5_K's qh by r % 4) its quant and scale bytes are all 0xFF, the
// type's other extreme (Q8_0 -128, Q6_K scale -128 / quants 0) or random.
inline std::vector<uint8_t> extreme_weights(DType t, int64_t rows, int64_t n, uint32_t seed) {
  const size_t rb = dtype_row_size(t, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  auto fill = [&](void* p, size_t bytes, int extreme) {
    if (extreme >= 0) std::memset(p, extreme, bytes);
    else for (size_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(rng());
  };
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t d = f32_to_f16(0.0123f * static_cast<float>(r + 1));
    uint8_t* row = w.data() + rb * static_cast<size_t>(r);
    for (int64_t i = 0; i < n / dtype_block_size(t); ++i) {
      if (t == DType::kQ4_0 || t == DType::kQ5_0 || t == DType::kQ8_0) {
        const size_t bs = dtype_type_size(t);
        uint8_t* blk = row + static_cast<size_t>(i) * bs;
        std::memcpy(blk, &d, 2);
        fill(blk + 2, bs - 2, r % 3 == 0 ? 0xFF : r % 3 == 1 ? (t == DType::kQ8_0 ? 0x80 : 0x00) : -1);
      } else if (t == DType::kQ4_K || t == DType::kQ5_K) {
        auto scale_min = [&](auto& b) {  // the fields Q4_K and Q5_K share
          b.d = d;
          b.dmin = f32_to_f16(0.0071f);
          fill(b.scales, sizeof(b.scales), r % 3 == 0 ? 0xFF : -1);
          fill(b.qs, sizeof(b.qs), r % 2 == 0 ? 0xFF : -1);
        };
        if (t == DType::kQ4_K) {
          scale_min(reinterpret_cast<BlockQ4_K*>(row)[i]);
        } else {
          auto& b = reinterpret_cast<BlockQ5_K*>(row)[i];
          scale_min(b);
          fill(b.qh, sizeof(b.qh), r % 4 < 2 ? 0xFF : -1);
        }
      } else {
        auto& b = reinterpret_cast<BlockQ6_K*>(row)[i];
        b.d = d;
        fill(b.scales, sizeof(b.scales), r % 3 == 0 ? 0x80 : r % 3 == 1 ? 0x7F : -1);
        const int q = r % 4 == 0 ? 0x00 : r % 4 == 1 ? 0xFF : -1;
        fill(b.ql, sizeof(b.ql), q);
        fill(b.qh, sizeof(b.qh), q);
      }
    }
  }
  return w;
}

}  // namespace ember
