// Scalar reference (de)quantizers for the float types (F16, BF16) and the
// 32-element "legacy" block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
//
// Bit-exactness rules (see quantize.h): every float expression is evaluated in
// the same order as llama.cpp's quantize_row_*_ref / gguf-py's dequantizers,
// and contraction into FMA is disabled for this file so `d*q + m` stays two
// rounded operations, as in the references.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/block_utils.h"
#include "quant/quantize.h"

namespace ember {

using quant::trunc_to_i32;

// ---------------------------------------------------------------- F16 / BF16

void dequantize_row_f16_ref(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const f16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}

void quantize_row_f16_ref(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<f16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}

void dequantize_row_bf16_ref(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void quantize_row_bf16_ref(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<bf16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

// ---------------------------------------------------------------- helpers

namespace {

// Value of largest magnitude in x[0:n] (first one on ties), and its magnitude.
inline float signed_absmax(const float* x, int n, float* amax_out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  *amax_out = amax;
  return max;
}

inline void min_max(const float* x, int n, float* min_out, float* max_out) {
  float min = 3.402823466e+38f, max = -3.402823466e+38f;  // +-FLT_MAX
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  *min_out = min;
  *max_out = max;
}

// Low 4 bits of element j (0..15) or j+16 (16..31) of a 32-element block.
inline int nibble(const uint8_t* qs, int j) {
  return j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4);
}

}  // namespace

// ---------------------------------------------------------------- Q4_0

void quantize_row_q4_0_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax;
    const float max = signed_absmax(x, kQK, &amax);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQK / 2 + j] * id;
      const int q0 = std::min<int>(15, static_cast<int8_t>(trunc_to_i32(x0 + 8.5f)));
      const int q1 = std::min<int>(15, static_cast<int8_t>(trunc_to_i32(x1 + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(q0) | (static_cast<uint8_t>(q1) << 4));
    }
  }
}

void dequantize_row_q4_0_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(nibble(x[i].qs, j) - 8);
  }
}

// ---------------------------------------------------------------- Q4_1

void quantize_row_q4_1_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK / 2 + j] - min) * id;
      const int q0 = std::min<int>(15, static_cast<int8_t>(trunc_to_i32(x0 + 0.5f)));
      const int q1 = std::min<int>(15, static_cast<int8_t>(trunc_to_i32(x1 + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(q0) | (static_cast<uint8_t>(q1) << 4));
    }
  }
}

void dequantize_row_q4_1_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(nibble(x[i].qs, j)) + m;
  }
}

// ---------------------------------------------------------------- Q5_0

void quantize_row_q5_0_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax;
    const float max = signed_absmax(x, kQK, &amax);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQK / 2 + j] * id;
      const auto q0 = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(trunc_to_i32(x0 + 16.5f))));
      const auto q1 = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(trunc_to_i32(x1 + 16.5f))));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= ((q0 & 0x10u) >> 4) << j;
      qh |= ((q1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void dequantize_row_q5_0_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = f16_to_f32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(x[i].qs, j) | static_cast<int>(((qh >> j) & 1u) << 4);
      dst[j] = d * static_cast<float>(q - 16);
    }
  }
}

// ---------------------------------------------------------------- Q5_1

void quantize_row_q5_1_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK / 2 + j] - min) * id;
      const auto q0 = static_cast<uint8_t>(trunc_to_i32(x0 + 0.5f));
      const auto q1 = static_cast<uint8_t>(trunc_to_i32(x1 + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= ((q0 & 0x10u) >> 4) << j;
      qh |= ((q1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void dequantize_row_q5_1_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(x[i].qs, j) | static_cast<int>(((qh >> j) & 1u) << 4);
      dst[j] = d * static_cast<float>(q) + m;
    }
  }
}

// ---------------------------------------------------------------- Q8_0 / Q8_1

namespace {

// Shared by Q8_0 and Q8_1: scale amax/127 and round half away from zero.
// Returns d; writes the quants.
inline float quantize_block_q8(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) qs[j] = static_cast<int8_t>(trunc_to_i32(std::round(x[j] * id)));
  return d;
}

}  // namespace

void quantize_row_q8_0_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) y[i].d = f32_to_f16(quantize_block_q8(x, y[i].qs));
}

void quantize_row_q8_0_int4_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 7.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::clamp(trunc_to_i32(std::round(x[j] * id)), -7, 7));
    y[i].d = f32_to_f16(d);
  }
}

void dequantize_row_q8_0_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void quantize_row_q8_1_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = quantize_block_q8(x, y[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += y[i].qs[j];
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

void dequantize_row_q8_1_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

}  // namespace ember
