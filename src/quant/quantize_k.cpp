// Scalar reference (de)quantizers for the 256-element k-quant super-blocks
// (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
//
// The quantizers reproduce llama.cpp's round-to-nearest quantize_row_*_ref
// byte for byte: the per-sub-block scale searches (make_qx_quants,
// make_q3_quants, make_qkx2_quants) run the same iterations with the same
// float evaluation order and the same rounding (nearest_int, ties to even).
// FMA contraction is disabled for this file: every product and sum is rounded
// separately, as in the reference C code. Dequantizers match gguf-py.
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

using quant::get_scale_min_k4;
using quant::nearest_int;

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all-zero

// Symmetric quantization of x[0:n] to integers in [-nmax, nmax-1] with
// weights w = x^2 (llama.cpp make_qx_quants with rmse_type 1 and no
// importance weights): tries 19 candidate scales around nmax/max and keeps the
// one maximising sum(w*x*l)^2 / sum(w*l^2). L receives l + nmax. Returns the
// scale.
float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L) {
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
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
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
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric quantization to [-nmax, nmax-1] with weights x^2, refined by up
// to 5 rounds of coordinate descent on the individual quants (llama.cpp
// make_q3_quants with do_rmse). L receives l + nmax. Returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
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
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantization x ~ scale*l - the_min with l in [0, nmax]
// (llama.cpp make_qkx2_quants): starts from the min/max fit, then tries
// nstep+1 scales (nmax + rmin + rdelta*is)/(max-min), each followed by a
// weighted least-squares fit of scale and min, keeping the lowest weighted
// error (absolute if use_mad, else squared). Returns the scale; *the_min >= 0.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
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
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
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
      const float w = weights[i];
      const float fl = static_cast<float>(l);
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
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Packs 2-bit values L[0:256] as Q2_K/Q3_K do: byte l of each 32-byte half
// holds elements l, l+32, l+64, l+96 of that half's 128.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

// Writes the 6-bit scale ls and min lm of sub-block j into the Q4_K/Q5_K
// 12-byte layout (inverse of get_scale_min_k4).
void put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
  if (j < 4) {
    scales[j] = ls;
    scales[j + 4] = lm;
  } else {
    scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// Shared Q4_K/Q5_K quantizer: 8 sub-blocks of 32 with 6-bit scales and mins.
// Fills d, dmin, scales and the per-element levels L[0:256] in [0, nmax].
void quantize_superblock_k4(const float* x, int nmax, float rmin, float rdelta, int nstep,
                            f16_t* d_out, f16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales_out, 0, kKScaleSize);
  for (int j = 0; j < kQK_K / 32; ++j) {
    const auto ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const auto lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    put_scale_min_k4(j, ls, lm, scales_out);
  }
  *d_out = f32_to_f16(max_scale / 63.f);
  *dmin_out = f32_to_f16(max_min / 63.f);
  // Requantize against the scales as stored. Sub-blocks whose scale rounds
  // to zero keep the levels of the search (as llama.cpp does).
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = f16_to_f32(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(*dmin_out) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- Q2_K

void quantize_row_q2_K_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  const int64_t nb = n / kQK_K;
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                   0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j)
        y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_f16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = f32_to_f16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j)
        y[i].scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = f32_to_f16(max_min / q4scale);
    } else {
      y[i].dmin = f32_to_f16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = f16_to_f32(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void dequantize_row_q2_K_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  const int64_t nb = n / kQK_K;
  int8_t q[kQK_K];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    quant::unpack_q2_K(x[i], q);
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sc = x[i].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = dmin * static_cast<float>(sc >> 4);
      *dst++ = dl * static_cast<float>(q[e]) - ml;
    }
  }
}

// ---------------------------------------------------------------- Q3_K

void quantize_row_q3_K_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  const int64_t nb = n / kQK_K;
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        auto l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        l = static_cast<int8_t>(l >> 4);
        y[i].scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
      }
      y[i].d = f32_to_f16(1 / iscale);
    } else {
      y[i].d = f32_to_f16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * static_cast<float>(quant::q3_K_scale(y[i].scales, j));
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    // High bit of element j goes to bit j/32 of hmask[j%32].
    std::memset(y[i].hmask, 0, kQK_K / 8);
    uint8_t L2[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      int l = L[j];
      if (l > 3) {
        y[i].hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
        l -= 4;
      }
      L2[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(L2, y[i].qs);
  }
}

void dequantize_row_q3_K_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  const int64_t nb = n / kQK_K;
  int8_t q[kQK_K];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    quant::unpack_q3_K(x[i], q);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(quant::q3_K_scale(x[i].scales, e / 16));
      *dst++ = dl * static_cast<float>(q[e]);
    }
  }
}

// ---------------------------------------------------------------- Q4_K

void quantize_row_q4_K_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  const int64_t nb = n / kQK_K;
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_superblock_k4(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    // Byte l of each 32-byte chunk c: element 64c+l (low) and 64c+32+l (high).
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Q4_K / Q5_K share the layout of scales and mins: x = d*sc*q - dmin*m per
// 32-element group; `unpack` gives the quants q of one block.
template <typename Block>
void dequantize_k4_blocks(const Block* x, int64_t nb, float* dst, void (*unpack)(const Block&, int8_t*)) {
  int8_t q[kQK_K];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    unpack(x[i], q);
    for (int e = 0; e < kQK_K; ++e) {
      uint8_t sc, m;
      get_scale_min_k4(e / 32, x[i].scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      *dst++ = dl * static_cast<float>(q[e]) - ml;
    }
  }
}

void dequantize_row_q4_K_ref(const void* src, float* dst, int64_t n) {
  dequantize_k4_blocks(static_cast<const BlockQ4_K*>(src), n / kQK_K, dst, quant::unpack_q4_K);
}

// ---------------------------------------------------------------- Q5_K

void quantize_row_q5_K_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  const int64_t nb = n / kQK_K;
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_superblock_k4(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    // Low nibbles as Q4_K; bit 4 of element 32j+l goes to bit j of qh[l].
    std::memset(y[i].qh, 0, kQK_K / 8);
    for (int e = 0; e < kQK_K; ++e)
      if (L[e] > 15) y[i].qh[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 2 + l] = static_cast<uint8_t>((L[j + l] & 0xF) | ((L[j + l + 32] & 0xF) << 4));
  }
}

void dequantize_row_q5_K_ref(const void* src, float* dst, int64_t n) {
  dequantize_k4_blocks(static_cast<const BlockQ5_K*>(src), n / kQK_K, dst, quant::unpack_q5_K);
}

// ---------------------------------------------------------------- Q6_K

void quantize_row_q6_K_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  const int64_t nb = n / kQK_K;
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = make_qx_quants_rmse1(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = f32_to_f16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    // Per 128-element half h: ql[64h + l] holds elements l (low) and l+64
    // (high nibble), ql[64h + 32 + l] holds l+32 and l+96; qh[32h + l] holds
    // the top 2 bits of elements l, l+32, l+64, l+96.
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
  }
}

void dequantize_row_q6_K_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  const int64_t nb = n / kQK_K;
  int8_t q[kQK_K];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    quant::unpack_q6_K(x[i], q);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(x[i].scales[e / 16]);
      *dst++ = dl * static_cast<float>(q[e]);
    }
  }
}

// ---------------------------------------------------------------- Q8_K

void quantize_row_q8_K_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[16 * j + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_row_q8_K_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i, dst += kQK_K)
    for (int j = 0; j < kQK_K; ++j) dst[j] = x[i].d * static_cast<float>(x[i].qs[j]);
}

}  // namespace ember
