// Scalar reference dot products. The arithmetic contract is documented in
// dot.h; FMA contraction is disabled so every formula is evaluated
// exactly as written.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/ref/dot.h"

#include <cstring>

#include "quant/block_utils.h"
#include "quant/blocks.h"

namespace ember::ref {
namespace {

// Low nibble of element j of a 32-element block (j < 16: low half of
// byte j, else high half of byte j - 16), as in Q4_0/Q4_1/Q5_0/Q5_1.
inline int nibble(const uint8_t* qs, int j) {
  return j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4);
}

inline int fifth_bit(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, sizeof(h));
  return static_cast<int>((h >> j) & 1u) << 4;
}

}  // namespace

// ---------------------------------------------------------------- float weights

void f32_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  *s = static_cast<float>(sum);
}

void f16_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const f16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(f16_to_f32(a[i])) * static_cast<double>(b[i]);
  *s = static_cast<float>(sum);
}

void bf16_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const bf16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_f32(a[i])) * static_cast<double>(b[i]);
  *s = static_cast<float>(sum);
}

// ---------------------------------------------------------------- legacy x Q8_0 / Q8_1

void q4_0_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += (nibble(a[i].qs, j) - 8) * b[i].qs[j];
    sumf += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi);
  }
  *s = sumf;
}

void mxfp4_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockMXFP4*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kMxfp4Values[a[i].qs[j] & 0x0F] * b[i].qs[j];
      sumi += kMxfp4Values[a[i].qs[j] >> 4] * b[i].qs[j + kQK / 2];
    }
    sumf += (mxfp4_half_scale(a[i].e) * f16_to_f32(b[i].d)) * static_cast<float>(sumi);
  }
  *s = sumf;
}

void q4_1_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += nibble(a[i].qs, j) * b[i].qs[j];
    sumf += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi) +
            f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
  }
  *s = sumf;
}

void q5_0_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += ((nibble(a[i].qs, j) | fifth_bit(a[i].qh, j)) - 16) * b[i].qs[j];
    sumf += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi);
  }
  *s = sumf;
}

void q5_1_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += (nibble(a[i].qs, j) | fifth_bit(a[i].qh, j)) * b[i].qs[j];
    sumf += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi) +
            f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
  }
  *s = sumf;
}

void q8_0_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    sumf += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi);
  }
  *s = sumf;
}

// ---------------------------------------------------------------- k-quants x Q8_K

namespace {

// sum over elements [first, first+len) of q[e] * y.qs[e].
inline int32_t dot_span(const int8_t* q, const BlockQ8_K& y, int first, int len) {
  int32_t sum = 0;
  for (int e = first; e < first + len; ++e) sum += q[e] * y.qs[e];
  return sum;
}

}  // namespace

void q2_K_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ2_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant::unpack_q2_K(a[i], q);
    int32_t sumi = 0, summ = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      sumi += (a[i].scales[g] & 0xF) * dot_span(q, b[i], 16 * g, 16);
      summ += (a[i].scales[g] >> 4) * b[i].bsums[g];
    }
    const float d = f16_to_f32(a[i].d) * b[i].d;
    const float dmin = f16_to_f32(a[i].dmin) * b[i].d;
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  *s = sumf;
}

void q3_K_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ3_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant::unpack_q3_K(a[i], q);
    int32_t sumi = 0;
    for (int g = 0; g < kQK_K / 16; ++g) sumi += quant::q3_K_scale(a[i].scales, g) * dot_span(q, b[i], 16 * g, 16);
    const float d = f16_to_f32(a[i].d) * b[i].d;
    sumf += d * static_cast<float>(sumi);
  }
  *s = sumf;
}

namespace {

// Q4_K and Q5_K share scales/mins layout; q holds the unpacked levels.
template <typename Block>
inline void accumulate_k4(const Block& a, const BlockQ8_K& b, const int8_t* q, float* sumf) {
  int32_t sumi = 0, summ = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    quant::get_scale_min_k4(j, a.scales, &sc, &m);
    sumi += sc * dot_span(q, b, 32 * j, 32);
    summ += m * (b.bsums[2 * j] + b.bsums[2 * j + 1]);
  }
  const float d = f16_to_f32(a.d) * b.d;
  const float dmin = f16_to_f32(a.dmin) * b.d;
  *sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
}

}  // namespace

void q4_K_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant::unpack_q4_K(a[i], q);
    accumulate_k4(a[i], b[i], q, &sumf);
  }
  *s = sumf;
}

void q5_K_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant::unpack_q5_K(a[i], q);
    accumulate_k4(a[i], b[i], q, &sumf);
  }
  *s = sumf;
}

void q6_K_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant::unpack_q6_K(a[i], q);
    int32_t sumi = 0;
    for (int g = 0; g < kQK_K / 16; ++g) sumi += a[i].scales[g] * dot_span(q, b[i], 16 * g, 16);
    const float d = f16_to_f32(a[i].d) * b[i].d;
    sumf += d * static_cast<float>(sumi);
  }
  *s = sumf;
}

void q8_K_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ8_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t sumi = 0;
    for (int e = 0; e < kQK_K; ++e) sumi += a[i].qs[e] * b[i].qs[e];
    sumf += (a[i].d * b[i].d) * static_cast<float>(sumi);
  }
  *s = sumf;
}

}  // namespace ember::ref
