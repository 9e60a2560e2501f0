// Importance-weighted quantizers; see quantize_imatrix.h. A port of
// llama.cpp's quantize_row_*_impl (ggml-quants.c) with the same float
// evaluation order; FMA contraction is disabled for this file, as in
// quantize_k.cpp, so every product and sum is rounded separately.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant/quantize_imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/block_utils.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {

using quant::get_scale_min_k4;
using quant::nearest_int;

namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Symmetric x ~ scale * l, l in [-nmax, nmax-1], weights qw: 19 candidate
// scales around -nmax/max (max: the element of largest magnitude), keeping
// the one maximising sum(w x l)^2 / sum(w l^2) (llama.cpp make_qx_quants,
// rmse_type 1). L receives l + nmax. Returns the scale.
float make_qx_quants_w(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = qw[i], fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      const float w = qw[i], fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Asymmetric x ~ scale * l - the_min, l in [0, nmax], weights w (llama.cpp
// make_qkx3_quants): the min/max fit, then nstep + 1 scales each followed by
// a weighted least-squares fit of scale and min, keeping the lowest weighted
// squared error. Returns the scale; *the_min >= 0.
float make_qkx3_quants_w(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                         uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max <= min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_mad = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = diff * diff;
    best_mad += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i], fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        mad += weights[i] * diff;
      }
      if (mad < best_mad) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Non-negative x ~ scale * l, l in [0, nmax], weights qw (llama.cpp
// make_qp_quants): the best of 9 scales by weighted error, then up to 5
// rounds of coordinate descent on the levels. For the super-block scales of
// the k-quants. Returns the scale.
float make_qp_quants_w(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    const float w = qw[i], fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i], fL = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * fL;
      float sl2 = suml2 - w * fL * fL;
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          const float fn = static_cast<float>(new_l);
          slx += w * x[i] * fn;
          sl2 += w * fn * fn;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

float sum_sq(const float* x, int64_t n) {
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s;
}

void q2_K_row(const float* x, BlockQ2_K* y, int64_t n, const float* qw_row) {
  uint8_t L[kQK_K], Laux[16], Ls[kQK_K / 16], Lm[kQK_K / 16];
  float mins[kQK_K / 16], scales[kQK_K / 16], sw[kQK_K / 16], weight[16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    std::memset(sw, 0, sizeof(sw));
    const float sigma2 = sum_sq(x, kQK_K) / kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float* qw = qw_row + kQK_K * i + 16 * j;
      for (int l = 0; l < 16; ++l) weight[l] = qw[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      for (int l = 0; l < kQK_K / 16; ++l) sw[j] += weight[l];
      scales[j] = make_qkx3_quants_w(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
    }
    float dm = make_qp_quants_w(kQK_K / 16, 15, scales, Ls, sw);
    float mm = make_qp_quants_w(kQK_K / 16, 15, mins, Lm, sw);
    y[i].d = f32_to_f16(dm);
    y[i].dmin = f32_to_f16(mm);
    dm = f16_to_f32(y[i].d);
    mm = f16_to_f32(y[i].dmin);
    for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = dm * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float m = mm * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, nearest_int((x[16 * j + ii] + m) / d))));
    }
    pack_2bit(L, y[i].qs);
  }
}

void q3_K_row(const float* x, BlockQ3_K* y, int64_t n, const float* qw_row) {
  int8_t L[kQK_K], Ls[kQK_K / 16];
  float scales[kQK_K / 16], weight[16], sw[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    const float sigma2 = 2 * sum_sq(x, kQK_K) / kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float* qw = qw_row + kQK_K * i + 16 * j;
      for (int l = 0; l < 16; ++l) weight[l] = qw[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = make_qx_quants_w(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    std::memset(y[i].scales, 0, 12);
    const float d_block = make_qx_quants_w(kQK_K / 16, 32, scales, Ls, sw);
    for (int j = 0; j < kQK_K / 16; ++j) {
      int l = Ls[j];
      if (j < 8) y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
      else y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      l >>= 4;
      y[i].scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
    }
    y[i].d = f32_to_f16(d_block);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * static_cast<float>(quant::q3_K_scale(y[i].scales, j));
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, nearest_int(x[16 * j + ii] / d))) + 4);
    }
    std::memset(y[i].hmask, 0, kQK_K / 8);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] |= hm;
        L[j] -= 4;
      }
      if (++m == kQK_K / 8) {
        m = 0;
        hm = static_cast<uint8_t>(hm << 1);
      }
    }
    pack_2bit(reinterpret_cast<const uint8_t*>(L), y[i].qs);
  }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32 with 6-bit scales
// and mins; fills d, dmin, scales and the levels L[0:256].
template <typename Block>
void k4_superblock(const float* x, const float* qw_sb, int nmax, Block* y, uint8_t* L) {
  uint8_t Laux[32], Ls[kQK_K / 32], Lm[kQK_K / 32];
  float weights[32], sw[kQK_K / 32], mins[kQK_K / 32], scales[kQK_K / 32];
  const float sigma2 = 2 * sum_sq(x, kQK_K) / kQK_K;
  for (int j = 0; j < kQK_K / 32; ++j) {
    const float* qw = qw_sb + 32 * j;
    for (int l = 0; l < 32; ++l) weights[l] = qw[l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = make_qkx3_quants_w(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
  }
  const float d_block = make_qp_quants_w(kQK_K / 32, 63, scales, Ls, sw);
  const float m_block = make_qp_quants_w(kQK_K / 32, 63, mins, Lm, sw);
  for (int j = 0; j < kQK_K / 32; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, Ls[j]), lm = std::min<uint8_t>(63, Lm[j]);
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y->scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y->scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y->d = f32_to_f16(d_block);
  y->dmin = f32_to_f16(m_block);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, y->scales, &sc, &m);
    const float d = f16_to_f32(y->d) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(y->dmin) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int((x[32 * j + ii] + dm) / d))));
  }
}

void q4_K_row(const float* x, BlockQ4_K* y, int64_t n, const float* qw_row) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    k4_superblock(x, qw_row + kQK_K * i, 15, &y[i], L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void q5_K_row(const float* x, BlockQ5_K* y, int64_t n, const float* qw_row) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    k4_superblock(x, qw_row + kQK_K * i, 31, &y[i], L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int nn = 0; nn < kQK_K; nn += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[nn + j], l2 = L[nn + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void q6_K_row(const float* x, BlockQ6_K* y, int64_t n, const float* qw_row) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = make_qx_quants_w(16, 32, x + 16 * ib, L + 16 * ib, qw_row + kQK_K * i + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = f32_to_f16(0.0f);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

// Q4_0 (nmax 8) / Q5_0 (nmax 16): symmetric blocks of 32.
template <typename Block>
void legacy_sym_row(const float* x, Block* y, int64_t n, const float* qw_row, int nmax) {
  float weight[kQK];
  int8_t L[kQK];
  const float sigma2 = sum_sq(x, n) / static_cast<float>(n);
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const float* xb = x + kQK * ib;
    const float* qw = qw_row + kQK * ib;
    for (int j = 0; j < kQK; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    y[ib].d = f32_to_f16(make_qx_quants_w(kQK, nmax, xb, L, weight));
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xi0 = static_cast<uint8_t>(L[j]), xi1 = static_cast<uint8_t>(L[j + kQK / 2]);
      y[ib].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << j;
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    if constexpr (sizeof(Block) == sizeof(BlockQ5_0)) std::memcpy(y[ib].qh, &qh, sizeof(qh));
  }
}

// Q4_1 (nmax 15) / Q5_1 (nmax 31): blocks of 32 with a min.
template <typename Block>
void legacy_asym_row(const float* x, Block* y, int64_t n, const float* qw_row, int nmax) {
  float weight[kQK];
  uint8_t L[kQK], Laux[kQK];
  const float sigma2 = sum_sq(x, n) / static_cast<float>(n);
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const float* xb = x + kQK * ib;
    const float* qw = qw_row + kQK * ib;
    for (int j = 0; j < kQK; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    float min;
    const float d = make_qkx3_quants_w(kQK, nmax, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36);
    y[ib].d = f32_to_f16(d);
    y[ib].m = f32_to_f16(-min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xi0 = L[j], xi1 = L[j + kQK / 2];
      y[ib].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << j;
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    if constexpr (sizeof(Block) == sizeof(BlockQ5_1)) std::memcpy(y[ib].qh, &qh, sizeof(qh));
  }
}

// Q8_0: each block's scale from 19 candidates amax/(127 + 0.1 k), k in
// [-9, 9] (k = 0 is round-to-nearest's scale), keeping the lowest
// sum_i qw_i (x_i - d q_i)^2 with d rounded to f16 as stored.
void q8_0_row(const float* x, BlockQ8_0* y, int64_t n, const float* qw_row) {
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const float* xb = x + kQK * ib;
    const float* qw = qw_row + kQK * ib;
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(xb[j]));
    float best_err = INFINITY;
    f16_t best_d = f32_to_f16(0.0f);
    for (int k = 0; k <= 18 && amax > 0; ++k) {
      const int kk = k == 0 ? 0 : (k <= 9 ? -k : k - 9);  // round-to-nearest's scale first
      const f16_t dh = f32_to_f16(amax / (127.0f + 0.1f * static_cast<float>(kk)));
      const float d = f16_to_f32(dh);
      if (d == 0.0f) continue;
      const float id = 1.0f / d;
      double err = 0;
      for (int j = 0; j < kQK; ++j) {
        const int q = std::max(-127, std::min(127, nearest_int(xb[j] * id)));
        const double e = static_cast<double>(xb[j]) - static_cast<double>(d) * q;
        err += static_cast<double>(qw[j]) * e * e;
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        best_d = dh;
      }
    }
    y[ib].d = best_d;
    const float d = f16_to_f32(best_d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j)
      y[ib].qs[j] = static_cast<int8_t>(std::max(-127, std::min(127, nearest_int(xb[j] * id))));
  }
}

}  // namespace

bool can_quantize_imatrix(DType t) {
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kMXFP4: return true;
    default: return false;
  }
}

void quantize_row_imatrix(DType t, const float* x, void* dst, int64_t n, const float* qw) {
  switch (t) {
    case DType::kQ2_K: q2_K_row(x, static_cast<BlockQ2_K*>(dst), n, qw); break;
    case DType::kQ3_K: q3_K_row(x, static_cast<BlockQ3_K*>(dst), n, qw); break;
    case DType::kQ4_K: q4_K_row(x, static_cast<BlockQ4_K*>(dst), n, qw); break;
    case DType::kQ5_K: q5_K_row(x, static_cast<BlockQ5_K*>(dst), n, qw); break;
    case DType::kQ6_K: q6_K_row(x, static_cast<BlockQ6_K*>(dst), n, qw); break;
    case DType::kQ4_0: legacy_sym_row(x, static_cast<BlockQ4_0*>(dst), n, qw, 8); break;
    case DType::kQ5_0: legacy_sym_row(x, static_cast<BlockQ5_0*>(dst), n, qw, 16); break;
    case DType::kQ4_1: legacy_asym_row(x, static_cast<BlockQ4_1*>(dst), n, qw, 15); break;
    case DType::kQ5_1: legacy_asym_row(x, static_cast<BlockQ5_1*>(dst), n, qw, 31); break;
    case DType::kQ8_0: q8_0_row(x, static_cast<BlockQ8_0*>(dst), n, qw); break;
    case DType::kMXFP4: quantize_row_mxfp4_imatrix(x, dst, n, qw); break;
    default: break;
  }
}

Status quantize_rows_imatrix(DType t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row,
                             const float* qw) {
  if (!can_quantize_imatrix(t)) return Status::errorf("no importance-weighted quantizer for {}", dtype_name(t));
  if (n_per_row % dtype_block_size(t) != 0)
    return Status::errorf("row length {} is not a multiple of {}'s block size", n_per_row, dtype_name(t));
  const size_t row = dtype_row_size(t, n_per_row);
  for (int64_t r = 0; r < n_rows; ++r)
    quantize_row_imatrix(t, src + r * n_per_row, static_cast<uint8_t*>(dst) + r * row, n_per_row, qw);
  return Status::ok();
}

}  // namespace ember
