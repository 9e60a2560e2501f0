// Helpers for code compiled both for the device (nvcc) and for the host
// (g++): the arithmetic of the CUDA kernels is written once, in functions
// marked EMBER_HD, and the host twins of kernels/cuda/twins.h run the very
// same functions on the CPU, where CI (no GPU) tests them against the
// scalar references of kernels/ref/ and quant/.
//
// Rounding: mul_rn / add_rn / sub_rn are single IEEE float operations,
// never fused (the device's __fmul_rn / __fadd_rn / __fsub_rn; on the host
// the room is compiled with -ffp-contract=off). dp4a is the device
// instruction (4 signed byte products added to an int) and its exact
// emulation on the host. Half / bfloat16 conversions are exact in both
// directions' meanings: widening is exact, narrowing rounds to nearest even
// (as core/fp16.h does). No state, no allocation.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/fp16.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define EMBER_HD __host__ __device__ __forceinline__
#else
#define EMBER_HD inline
#endif

namespace ember::cuda {

EMBER_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
EMBER_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
EMBER_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
// fma with one rounding (the device's fmaf; std::fma's meaning on the host).
EMBER_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// sum over the 4 bytes of a and b (signed) of a_i * b_i, plus c.
EMBER_HD int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i))) *
         static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i)));
  return c;
#endif
}

// Loads of little-endian fields from byte pointers of the given alignment.
EMBER_HD uint16_t load_u16(const uint8_t* p) {  // p 2-aligned
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
// A 32-bit word from a 2-aligned pointer (two 16-bit loads: GGUF blocks of
// 18, 22, 34 and 210 bytes are only 2-aligned).
EMBER_HD int load_i32_a2(const uint8_t* p) {
  return static_cast<int>(static_cast<uint32_t>(load_u16(p)) | (static_cast<uint32_t>(load_u16(p + 2)) << 16));
}
EMBER_HD int load_i32_a4(const uint8_t* p) {  // p 4-aligned
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const int*>(p);
#else
  int v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

EMBER_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return f16_to_f32(h);
#endif
}
EMBER_HD uint16_t float_to_half(float f) {  // round to nearest even
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return f32_to_f16(f);
#endif
}
// bf16 of f (round to nearest even; a NaN stays a quiet NaN): core/fp16.h's
// f32_to_bf16, the same integer steps on both sides.
EMBER_HD uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}
EMBER_HD float bf16_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
#else
  return bf16_to_f32(h);
#endif
}

EMBER_HD float abs_f(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return __builtin_fabsf(x);
#endif
}
// Round half away from zero (C's roundf), then to int (|x| < 2^31).
EMBER_HD int round_away(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<int>(roundf(x));
#else
  return static_cast<int>(__builtin_roundf(x));
#endif
}
// Round half to even (llama.cpp's nearest_int for |x| < 2^22).
EMBER_HD int round_even(float x) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(x);
#else
  return static_cast<int>(__builtin_nearbyintf(x));  // default rounding mode: to nearest even
#endif
}
EMBER_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace ember::cuda
