// The arithmetic of the CUDA decode mat-vec (kernels/cuda/rows.cu), written
// once for the device and the host twin (kernels/cuda/twins.h rows_host):
// y[t, r] = dot(weight row r, activation row t), weights in their GGUF
// blocks, activations in the act rows of kernels/cuda/act_format.h (F16 /
// BF16 weights: f32 activations).
//
// Work split (launch geometry in kernels/cuda/geometry.h): one warp per
// weight row; the row is read in chunks of kRowsChunk = 1024 elements, and
// in each chunk lane l owns one 32-element "unit":
//   Q4_0 / Q5_0 / Q8_0   block l of the chunk
//   Q4_K / Q6_K          sub-block l % 8 of super-block l / 8
//   F16 / BF16           elements 8l + 256i .. +7, i = 0..3 (four units of 8)
//
// Arithmetic contract (what the tests hold the device to):
// * Quantized types: each block's (super-block's) term is bit-identical to
//   the one kernels/ref/dot.cpp adds for that block, with the activations
//   of act_format.h (the same values as the CPU's Q8_0 / Q8_K rows):
//     Q4_0/Q5_0/Q8_0   term = (dw * dx) * sumi            (sumi exact: dp4a on the levels,
//                                                          minus offset * the block's sum)
//     Q4_K             term = (dw * dx) * sumi - (dminw * dx) * summ   (super-block; the 8
//                                                          lanes' integer sums added exactly)
//     Q6_K             term = (dw * dx) * sumi             (super-block)
//   each product and difference rounded once (no FMA). The terms are then
//   summed in float in a fixed order that differs from the reference's:
//   each lane adds its terms chunk by chunk (K-quants: the super-block's
//   term in its first lane), then a butterfly over the 32 lanes (xor 16, 8,
//   4, 2, 1).
// * F16 / BF16: each lane accumulates w * x with fma in float over its
//   elements in order, chunk by chunk; then the same butterfly.
// The order depends only on the row length, never on the number of tokens
// or rows: batch-invariant, and bit-identical to rows_host on the CPU.
#pragma once

#include <cstdint>

#include "kernels/cuda/act_format.h"
#include "kernels/cuda/hd.h"

namespace ember::cuda {

// Weight types of the CUDA mat-vec (a subset of core/dtype.h's DType).
enum class WType : uint8_t { kQ4_0, kQ5_0, kQ8_0, kQ4_K, kQ6_K, kF16, kBF16 };
constexpr int kWTypeCount = 7;

constexpr int kRowsChunk = 1024;  // elements per chunk of a row

EMBER_HD constexpr int wtype_block(WType t) {
  return t == WType::kQ4_K || t == WType::kQ6_K ? 256 : (t == WType::kF16 || t == WType::kBF16 ? 1 : 32);
}
EMBER_HD constexpr int wtype_block_bytes(WType t) {
  switch (t) {
    case WType::kQ4_0: return 18;
    case WType::kQ5_0: return 22;
    case WType::kQ8_0: return 34;
    case WType::kQ4_K: return 144;
    case WType::kQ6_K: return 210;
    default: return 2;
  }
}
EMBER_HD constexpr bool wtype_is_float(WType t) { return t == WType::kF16 || t == WType::kBF16; }
EMBER_HD constexpr bool wtype_is_kquant(WType t) { return t == WType::kQ4_K || t == WType::kQ6_K; }
EMBER_HD constexpr ActKind wtype_act(WType t) { return wtype_is_kquant(t) ? ActKind::kQ8_K : ActKind::kQ8_0; }
// Bytes of one full chunk of a row, and of a row of n elements.
EMBER_HD constexpr int64_t wtype_chunk_bytes(WType t) {
  return static_cast<int64_t>(kRowsChunk / wtype_block(t)) * wtype_block_bytes(t);
}
EMBER_HD constexpr int64_t wtype_row_bytes(WType t, int64_t n) { return n / wtype_block(t) * wtype_block_bytes(t); }

// One lane's 32 weight levels, four to an int (byte b of w[k] is element
// 4k + b of the unit), and the block's scales.
struct Unit {
  int w[8];
  float d = 0.f;     // the block's (super-block's) f16 scale
  float dmin = 0.f;  // Q4_K: the super-block's f16 min scale
  int sc0 = 0;       // Q4_K: the sub-block's 6-bit scale; Q6_K: the first 16's int8 scale
  int sc1 = 0;       // Q4_K: the sub-block's 6-bit min;   Q6_K: the second 16's scale
};

// Unpacks the unit of lane `lane` of a chunk from `blocks` (the chunk's
// first block, in GGUF layout; 2-byte aligned, Q4_K 4-byte aligned).
template <WType T>
EMBER_HD void unpack_unit(const uint8_t* blocks, int lane, Unit* u) {
  if constexpr (T == WType::kQ4_0) {
    const uint8_t* b = blocks + lane * 18;
    u->d = half_to_float(load_u16(b));
    for (int i = 0; i < 4; ++i) {
      const int q = load_i32_a2(b + 2 + 4 * i);  // bytes 4i..4i+3: elements 4i.. (low), 16 + 4i.. (high)
      u->w[i] = q & 0x0F0F0F0F;
      u->w[4 + i] = (q >> 4) & 0x0F0F0F0F;
    }
  } else if constexpr (T == WType::kQ5_0) {
    const uint8_t* b = blocks + lane * 22;
    u->d = half_to_float(load_u16(b));
    const uint32_t qh = static_cast<uint32_t>(load_i32_a2(b + 2));  // bit j: bit 4 of element j
    for (int i = 0; i < 4; ++i) {
      const int q = load_i32_a2(b + 6 + 4 * i);
      const uint32_t hl = qh >> (4 * i), hh = qh >> (16 + 4 * i);
      const uint32_t bl = ((hl << 4) & 0x10u) | ((hl << 11) & 0x1000u) | ((hl << 18) & 0x100000u) |
                          ((hl << 25) & 0x10000000u);
      const uint32_t bh = ((hh << 4) & 0x10u) | ((hh << 11) & 0x1000u) | ((hh << 18) & 0x100000u) |
                          ((hh << 25) & 0x10000000u);
      u->w[i] = static_cast<int>((static_cast<uint32_t>(q) & 0x0F0F0F0Fu) | bl);
      u->w[4 + i] = static_cast<int>(((static_cast<uint32_t>(q) >> 4) & 0x0F0F0F0Fu) | bh);
    }
  } else if constexpr (T == WType::kQ8_0) {
    const uint8_t* b = blocks + lane * 34;
    u->d = half_to_float(load_u16(b));
    for (int k = 0; k < 8; ++k) u->w[k] = load_i32_a2(b + 2 + 4 * k);
  } else if constexpr (T == WType::kQ4_K) {
    const uint8_t* b = blocks + (lane >> 3) * 144;
    const int j = lane & 7;
    u->d = half_to_float(load_u16(b));
    u->dmin = half_to_float(load_u16(b + 2));
    const uint8_t* s = b + 4;  // 12 bytes of 6-bit scales and mins (quant/block_utils.h get_scale_min_k4)
    if (j < 4) {
      u->sc0 = s[j] & 63;
      u->sc1 = s[j + 4] & 63;
    } else {
      u->sc0 = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      u->sc1 = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const uint8_t* qs = b + 16 + 32 * (j >> 1);  // sub-block j: nibble j % 2 of 32 bytes
    const int shift = 4 * (j & 1);
    for (int k = 0; k < 8; ++k) u->w[k] = (load_i32_a4(qs + 4 * k) >> shift) & 0x0F0F0F0F;
  } else if constexpr (T == WType::kQ6_K) {
    const uint8_t* b = blocks + (lane >> 3) * 210;
    const int j = lane & 7, h = j >> 2, c = j & 3;  // 128-element half, 32-element quarter in it
    u->d = half_to_float(load_u16(b + 208));
    u->sc0 = static_cast<int8_t>(b[192 + 2 * j]);
    u->sc1 = static_cast<int8_t>(b[192 + 2 * j + 1]);
    const uint8_t* ql = b + 64 * h + 32 * (c & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int sl = 4 * (c >> 1), sh = 2 * c;
    for (int k = 0; k < 8; ++k) {
      const int lo = (load_i32_a2(ql + 4 * k) >> sl) & 0x0F0F0F0F;
      const int hi = (load_i32_a2(qh + 4 * k) >> sh) & 0x03030303;
      u->w[k] = lo | (hi << 4);  // 0..63: the level + 32
    }
  }
}

// The unit's exact integer sums against one activation row's 32 values
// (a[k]: elements 4k..4k+3) and their two 16-sums bs0, bs1. Returns sumi
// (Q4_K: the sub-block's sc * sum; Q6_K: both 16s' scaled sums); *summ:
// Q4_K's m * (bs0 + bs1), else 0.
template <WType T>
EMBER_HD int unit_sums(const Unit& u, const int* a, int bs0, int bs1, int* summ) {
  int lo = 0, hi = 0;
  for (int k = 0; k < 4; ++k) lo = dp4a(u.w[k], a[k], lo);
  for (int k = 4; k < 8; ++k) hi = dp4a(u.w[k], a[k], hi);
  *summ = 0;
  if constexpr (T == WType::kQ4_0) return lo + hi - 8 * (bs0 + bs1);
  if constexpr (T == WType::kQ5_0) return lo + hi - 16 * (bs0 + bs1);
  if constexpr (T == WType::kQ8_0) return lo + hi;
  if constexpr (T == WType::kQ4_K) {
    *summ = u.sc1 * (bs0 + bs1);
    return u.sc0 * (lo + hi);
  }
  if constexpr (T == WType::kQ6_K) return u.sc0 * (lo - 32 * bs0) + u.sc1 * (hi - 32 * bs1);
  return 0;
}

// A block's (super-block's) float term from its exact sums and the
// activation scale dx (kernels/ref/dot.cpp's expressions, rounded alike).
template <WType T>
EMBER_HD float block_term(const Unit& u, float dx, int sumi, int summ) {
  if constexpr (T == WType::kQ4_K)
    return sub_rn(mul_rn(mul_rn(u.d, dx), static_cast<float>(sumi)), mul_rn(mul_rn(u.dmin, dx), static_cast<float>(summ)));
  return mul_rn(mul_rn(u.d, dx), static_cast<float>(sumi));
}

// Float weights: lane `lane`'s fma chain over its units of a chunk of
// `elems` elements (a multiple of 32) starting at element e0 of the row;
// w: the chunk's first element (16-byte aligned); x: the activation row.
template <WType T>
EMBER_HD float float_unit_dot(const uint8_t* w, const float* x, int lane, int elems, int64_t e0, float acc) {
  for (int i = 0; i < 4; ++i) {
    const int e = 8 * lane + 256 * i;
    if (e >= elems) break;
    for (int b = 0; b < 8; ++b) {
      const uint16_t h = load_u16(w + 2 * (e + b));
      const float wf = T == WType::kF16 ? half_to_float(h) : bf16_to_float(h);
      acc = fma_rn(wf, x[e0 + e + b], acc);
    }
  }
  return acc;
}

// Dequantization (prefill tiles, embedding rows): element e (0..31) of an
// unpacked unit, with quant/'s reference expressions rounded alike, so the
// values are bit-identical to dequantize_row_<type>_ref's.
template <WType T>
EMBER_HD float unit_value(const Unit& u, int e) {
  const int lvl = static_cast<int8_t>(static_cast<uint32_t>(u.w[e >> 2]) >> (8 * (e & 3)));
  if constexpr (T == WType::kQ4_0) return mul_rn(u.d, static_cast<float>(lvl - 8));
  if constexpr (T == WType::kQ5_0) return mul_rn(u.d, static_cast<float>(lvl - 16));
  if constexpr (T == WType::kQ8_0) return mul_rn(static_cast<float>(lvl), u.d);
  if constexpr (T == WType::kQ4_K)
    return sub_rn(mul_rn(mul_rn(u.d, static_cast<float>(u.sc0)), static_cast<float>(lvl)),
                  mul_rn(u.dmin, static_cast<float>(u.sc1)));
  if constexpr (T == WType::kQ6_K)
    return mul_rn(mul_rn(u.d, static_cast<float>(e < 16 ? u.sc0 : u.sc1)), static_cast<float>(lvl - 32));
  return 0.f;
}
// Unit `unit` (32 elements, counted from the row's start) of a quantized row.
template <WType T>
EMBER_HD void unpack_row_unit(const uint8_t* row, int64_t unit, Unit* u) {
  if constexpr (wtype_is_kquant(T))
    unpack_unit<T>(row + unit / 8 * wtype_block_bytes(T), static_cast<int>(unit % 8), u);
  else
    unpack_unit<T>(row + unit * wtype_block_bytes(T), 0, u);
}

// Number of lanes with a unit in a chunk of `elems` elements.
EMBER_HD constexpr int chunk_lanes(WType t, int elems) { return wtype_is_float(t) ? 32 : elems / 32; }

}  // namespace ember::cuda
