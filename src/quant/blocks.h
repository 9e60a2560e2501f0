// Quantized block layouts, byte-compatible with GGML/GGUF. Plain structs
// shared by every backend (scalar, SIMD, later CUDA).
#pragma once

#include <cstdint>

#include "core/fp16.h"

namespace ember {

constexpr int kQK = 32;        // elements per block, legacy types
constexpr int kQK_K = 256;     // elements per super-block, k-quants
constexpr int kKScaleSize = 12;

struct BlockQ4_0 {
  f16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  f16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  f16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  f16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  f16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {
  f16_t d;  // delta
  f16_t s;  // d * sum(qs)
  int8_t qs[kQK];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // 4-bit scales and mins
  uint8_t qs[kQK_K / 4];
  f16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];  // 6-bit scales
  f16_t d;
};
struct BlockQ4_K {
  f16_t d, dmin;
  uint8_t scales[kKScaleSize];  // 6-bit scales and mins
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  f16_t d, dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  f16_t d;
};
// MXFP4 (GGML type 39, as llama.cpp's block_mxfp4): e is an E8M0 exponent
// (scale 2^(e - 127)); qs holds 32 E2M1 codes, element j < 16 in the low
// nibble of byte j and element j + 16 in its high nibble. Like llama.cpp,
// ember works with the E2M1 values doubled (kMxfp4Values, integers) and the
// scale halved (mxfp4_half_scale): value = kMxfp4Values[code] * 2^(e - 128).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
// E2M1 code -> 2 x value: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) as llama.cpp's ggml_e8m0_to_fp32_half computes it (e = 0 and 1
// are the subnormals 2^-128 and 2^-127; e = 255 is not a valid scale).
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}
struct BlockQ8_K {  // activations for k-quant dot products
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of groups of 16
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace ember
