// Small helpers shared by the scalar quantizers, dequantizers and reference
// dot products: llama.cpp-compatible rounding and the packed 6-bit scale
// layouts of the k-quants. Header-only so SIMD kernels can reuse them.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"

namespace ember::quant {

// Round to nearest, ties to even, exactly like llama.cpp's nearest_int (adds
// 1.5 * 2^23 and reads the mantissa). Meaningful for |f| < 2^22; outside that
// range it returns the same deterministic value llama.cpp does.
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// C's float -> int conversion as x86 performs it (cvttss2si): truncation
// toward zero, INT32_MIN for NaN and out-of-range values. Well defined, unlike
// a plain cast, and identical to what llama.cpp's casts compile to.
inline int32_t trunc_to_i32(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(v);
}

// Q4_K / Q5_K: 8 sub-block scales and mins, 6 bits each, packed in 12 bytes.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: 16 sub-block scales, 6 bits each (stored biased by 32), in 12 bytes.
// Returns the signed scale (-32..31) of sub-block j.
inline int q3_K_scale(const uint8_t* scales, int j) {
  const int lo = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Integer levels of one k-quant super-block, element order (q[e] is the
// quant of element e; the value is scale(e/16 or e/32) * q[e] - min term).
// Used by the reference dot products and by tests of SIMD kernels.
inline void unpack_q2_K(const BlockQ2_K& b, int8_t* q) {  // 0..3
  for (int e = 0; e < kQK_K; ++e)
    q[e] = static_cast<int8_t>((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
}
inline void unpack_q3_K(const BlockQ3_K& b, int8_t* q) {  // -4..3
  for (int e = 0; e < kQK_K; ++e) {
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int hi = (b.hmask[e % 32] >> (e / 32)) & 1;
    q[e] = static_cast<int8_t>(lo - (hi ? 0 : 4));
  }
}
inline void unpack_q4_K(const BlockQ4_K& b, int8_t* q) {  // 0..15
  for (int e = 0; e < kQK_K; ++e)
    q[e] = static_cast<int8_t>((b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xF);
}
inline void unpack_q5_K(const BlockQ5_K& b, int8_t* q) {  // 0..31
  for (int e = 0; e < kQK_K; ++e) {
    const int lo = (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xF;
    const int hi = (b.qh[e % 32] >> (e / 32)) & 1;
    q[e] = static_cast<int8_t>(lo | (hi << 4));
  }
}
inline void unpack_q6_K(const BlockQ6_K& b, int8_t* q) {  // -32..31
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;  // half, 32-chunk in half, lane
    const int lo = (b.ql[64 * h + 32 * (c & 1) + l] >> (4 * (c >> 1))) & 0xF;
    const int hi = (b.qh[32 * h + l] >> (2 * c)) & 3;
    q[e] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

}  // namespace ember::quant
