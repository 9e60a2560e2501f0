// Scalar twins of the activation-sparse column kernels (contract in
// kernels/act_sparse.h): row by row over the active entries, the integer
// sums then the scales of the contract. FMA contraction is off: every float
// step is the one written (the fma calls are explicit).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/act_sparse.h"
#include "quant/blocks.h"

namespace ember::ref {

namespace {

constexpr int R = kColPanelRows;

// Level of row r (0..127) of channel c (within its block) of a block's levels.
inline int level8(const uint8_t* levels, int c, int r) {
  return levels[static_cast<size_t>(c) * R + 64 * (r / 64) + act_cols_byte(r)];
}
inline int level4(const uint8_t* levels, int c, int r) {
  const uint8_t b = levels[static_cast<size_t>(c) * (R / 2) + act_cols_byte(r)];
  return r < 64 ? (b & 0x0F) : (b >> 4);
}
inline float f16_at(const uint8_t* p, int r) {
  uint16_t h;
  std::memcpy(&h, p + 2 * r, 2);
  return f16_to_f32(h);
}

// Sum over the active entries of group g of level(channel) * val, minus
// off * (the group's sum of val): the exact dot of the signed weight quants.
template <typename Level>
int32_t group_dot(const ColActive& a, int64_t g, int64_t c0, int off, Level level) {
  int32_t s = 0;
  for (int32_t e = a.start[g]; e < a.start[g + 1]; ++e) s += level(static_cast<int>(a.idx[e] - c0)) * a.val[e];
  return s - off * a.gsum[g];
}

template <ColContract C>
void cols(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  const uint8_t* base = w.panel(panel);
  float* acc = state;
  float* acc_m = state + R;
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* blk = base + static_cast<size_t>(b) * w.block_bytes;
    if (w.type == DType::kQ8_0) {
      const auto* xb = static_cast<const BlockQ8_0*>(a.xq) + b;
      const float dx = f16_to_f32(xb->d);
      const uint8_t* levels = blk + 2 * R;
      for (int r = 0; r < R; ++r) {
        int32_t isum = 0;
        for (int64_t g = 2 * b; g < 2 * b + 2; ++g)
          isum += group_dot(a, g, 32 * b, 128, [&](int c) { return level8(levels, c, r); });
        const float scale = f16_at(blk, r) * dx;
        if constexpr (C == ColContract::kRef)
          acc[r] = acc[r] + scale * static_cast<float>(isum);
        else
          acc[r] = std::fma(static_cast<float>(isum), scale, acc[r]);
      }
    } else if (w.type == DType::kQ4_K) {
      const auto* xb = static_cast<const BlockQ8_K*>(a.xq) + b;
      const uint8_t* sc = blk + 4 * R;
      const uint8_t* m = sc + 8 * R;
      const uint8_t* levels = m + 8 * R;
      for (int r = 0; r < R; ++r) {
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t isum = 0;
          for (int64_t g = 16 * b + 2 * j; g < 16 * b + 2 * j + 2; ++g)
            isum += group_dot(a, g, 256 * b, 0, [&](int c) { return level4(levels, c, r); });
          sumi += sc[j * R + r] * isum;
          summ += m[j * R + r] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
        }
        const float d = f16_at(blk, r) * xb->d;
        const float dmin = f16_at(blk + 2 * R, r) * xb->d;
        if constexpr (C == ColContract::kRef) {
          acc[r] = acc[r] + (d * static_cast<float>(sumi) - dmin * static_cast<float>(summ));
        } else {
          acc[r] = std::fma(static_cast<float>(sumi), d, acc[r]);
          acc_m[r] = std::fma(static_cast<float>(summ), dmin, acc_m[r]);
        }
      }
    } else {  // Q6_K
      const auto* xb = static_cast<const BlockQ8_K*>(a.xq) + b;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 2 * R);
      const uint8_t* levels = blk + 18 * R;
      for (int r = 0; r < R; ++r) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; ++j)
          sumi += sc[j * R + r] * group_dot(a, 16 * b + j, 256 * b, 32, [&](int c) { return level8(levels, c, r); });
        const float d = f16_at(blk, r) * xb->d;
        if constexpr (C == ColContract::kRef)
          acc[r] = acc[r] + d * static_cast<float>(sumi);
        else
          acc[r] = std::fma(static_cast<float>(sumi), d, acc[r]);
      }
    }
  }
}

}  // namespace

void act_cols_ref(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  cols<ColContract::kRef>(w, panel, a, b0, b1, state);
}
void act_cols_lanes(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  cols<ColContract::kLanes>(w, panel, a, b0, b1, state);
}

}  // namespace ember::ref
