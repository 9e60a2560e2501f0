// Scalar twins of the activation-sparse column kernels (contract in
// kernels/act_sparse.h): row by row and token by token over the union's
// entries, the integer sums then the scales of the contract, block after
// block. FMA contraction is off: every float step is the one written (the
// fma calls are explicit).
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

inline float f16_at(const uint8_t* p, int64_t r) {
  uint16_t h;
  std::memcpy(&h, p + 2 * r, 2);
  return f16_to_f32(h);
}

// Sum over the entries of group g of level(channel) * token t's val, minus
// off * (the token's sum of val over the group): the exact dot of the
// signed weight quants.
struct Token {
  const int8_t* val;    // the token's row of val
  const int32_t* gsum;  // its row of gsum
};
template <typename Level>
int32_t group_dot(const ColActive& a, Token tk, int64_t g, int64_t c0, int off, Level level) {
  int32_t s = 0;
  for (int32_t e = a.start[g]; e < a.start[g + 1]; ++e) s += level(static_cast<int>(a.idx[e] - c0)) * tk.val[e];
  return s - off * tk.gsum[g];
}

// Row r of panel `panel`, token t: the contract's acc - acc_m.
template <ColContract C>
float row_dot(const ColumnWeights& w, int64_t panel, int64_t r, const ColActive& a, int t) {
  const int64_t P = w.panel_rows, groups = w.n_in / kColGroup;
  const uint8_t* base = w.panel(panel);
  const Token at{a.val + t * a.cap, a.gsum + t * groups};
  float acc = 0.0f, acc_m = 0.0f;
  const int64_t nb = w.n_in / col_block_inputs(w.type);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + static_cast<size_t>(b) * w.block_bytes;
    const uint8_t* xrow = a.xq + t * a.x_row_bytes;
    if (w.type == DType::kQ8_0) {
      const auto* xb = reinterpret_cast<const BlockQ8_0*>(xrow) + b;
      const uint8_t* levels = blk + 2 * P;
      auto level = [&](int c) { return static_cast<int>(levels[c * P + act_cols_byte8(r)]); };
      const int32_t isum = group_dot(a, at, 2 * b, 32 * b, 128, level) + group_dot(a, at, 2 * b + 1, 32 * b, 128, level);
      const float scale = f16_at(blk, r) * f16_to_f32(xb->d);
      if constexpr (C == ColContract::kRef)
        acc = acc + scale * static_cast<float>(isum);
      else
        acc = std::fma(static_cast<float>(isum), scale, acc);
    } else if (w.type == DType::kQ4_K) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(xrow) + b;
      const uint8_t* sc = blk + 4 * P;
      const uint8_t* m = sc + 8 * P;
      const uint8_t* levels = m + 8 * P;
      auto level = [&](int c) {
        const uint8_t byte = levels[c * (P / 2) + act_cols_byte4(r)];
        return act_cols_high4(r) ? byte >> 4 : byte & 0x0F;
      };
      int32_t sumi = 0, summ = 0;
      for (int j = 0; j < 8; ++j) {
        const int32_t isum = group_dot(a, at, 16 * b + 2 * j, 256 * b, 0, level) +
                             group_dot(a, at, 16 * b + 2 * j + 1, 256 * b, 0, level);
        sumi += sc[j * P + r] * isum;
        summ += m[j * P + r] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
      }
      const float d = f16_at(blk, r) * xb->d;
      const float dmin = f16_at(blk + 2 * P, r) * xb->d;
      if constexpr (C == ColContract::kRef) {
        acc = acc + (d * static_cast<float>(sumi) - dmin * static_cast<float>(summ));
      } else {
        acc = std::fma(static_cast<float>(sumi), d, acc);
        acc_m = std::fma(static_cast<float>(summ), dmin, acc_m);
      }
    } else {  // Q6_K
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(xrow) + b;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 2 * P);
      const uint8_t* levels = blk + 18 * P;
      auto level = [&](int c) { return static_cast<int>(levels[c * P + act_cols_byte8(r)]); };
      int32_t sumi = 0;
      for (int j = 0; j < 16; ++j) sumi += sc[j * P + r] * group_dot(a, at, 16 * b + j, 256 * b, 32, level);
      const float d = f16_at(blk, r) * xb->d;
      if constexpr (C == ColContract::kRef)
        acc = acc + d * static_cast<float>(sumi);
      else
        acc = std::fma(static_cast<float>(sumi), d, acc);
    }
  }
  return acc - acc_m;
}

template <ColContract C>
void cols(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y, int64_t ldy) {
  for (int64_t r = r0; r < r1 && panel * w.panel_rows + r < w.n_out; ++r)
    for (int t = 0; t < a.n_tok; ++t) y[t * ldy + panel * w.panel_rows + r] = row_dot<C>(w, panel, r, a, t);
}

}  // namespace

void act_cols_ref(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
                  int64_t ldy) {
  cols<ColContract::kRef>(w, panel, r0, r1, a, y, ldy);
}
void act_cols_lanes(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
                    int64_t ldy) {
  cols<ColContract::kLanes>(w, panel, r0, r1, a, y, ldy);
}

}  // namespace ember::ref
