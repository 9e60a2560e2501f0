// Levels and affine decoding of quantized blocks; see block_levels.h. The bit
// positions mirror the unpack_* helpers of block_utils.h and the
// dequantizers of quantize_legacy.cpp / quantize_k.cpp.
#include "quant/block_levels.h"

#include <cstring>

#include "core/fp16.h"
#include "quant/block_utils.h"
#include "quant/blocks.h"

namespace ember {
namespace {

using quant::get_scale_min_k4;

// Legacy 32-element blocks: nibble j of qs is element j (low) / j + 16 (high).
int legacy_nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4; }
int legacy_high_bit(const uint8_t* qh, int e) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return (h >> e) & 1;
}
void put_legacy(uint8_t* qs, uint8_t* qh, const int* L) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
    h |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
    h |= static_cast<uint32_t>((L[j + 16] >> 4) & 1) << (j + 16);
  }
  if (qh) std::memcpy(qh, &h, 4);
}

// k-quant 2-bit fields (Q2_K, Q3_K low bits): element e in byte
// 32 * (e / 128) + e % 32 at bit 2 * ((e % 128) / 32).
void put_2bit(uint8_t* qs, const int* u) {
  std::memset(qs, 0, kQK_K / 4);
  for (int e = 0; e < kQK_K; ++e)
    qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((u[e] & 3) << (2 * ((e % 128) / 32)));
}
// Q4_K / Q5_K nibbles: element e in byte 32 * (e / 64) + e % 32, nibble (e / 32) % 2.
void put_k4_nibbles(uint8_t* qs, const int* L) {
  std::memset(qs, 0, kQK_K / 2);
  for (int e = 0; e < kQK_K; ++e) qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>((L[e] & 0xF) << (4 * ((e / 32) % 2)));
}

// Q4_K / Q5_K: x = d * sc * q - dmin * m per sub-block of 32.
template <typename Block>
void k4_affine(const Block& y, float* a, float* b) {
  const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, y.scales, &sc, &m);
    for (int e = 32 * j; e < 32 * j + 32; ++e) a[e] = d * static_cast<float>(sc), b[e] = -(dmin * static_cast<float>(m));
  }
}

}  // namespace

bool has_block_levels(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return true;
    default: return false;
  }
}

void block_level_range(DType t, int* lo, int* hi) {
  *lo = 0;
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K: *hi = 15; break;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K: *hi = 31; break;
    case DType::kQ8_0: *lo = -127, *hi = 127; break;
    case DType::kQ2_K: *hi = 3; break;
    case DType::kQ3_K: *lo = -4, *hi = 3; break;
    case DType::kQ6_K: *lo = -32, *hi = 31; break;
    default: *hi = 0; break;
  }
}

void block_affine(DType t, const void* block, float* a, float* b) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0: {
      const float d = f16_to_f32(t == DType::kQ4_0 ? static_cast<const BlockQ4_0*>(block)->d
                                                   : static_cast<const BlockQ5_0*>(block)->d);
      const float off = t == DType::kQ4_0 ? -8.0f : -16.0f;
      for (int e = 0; e < kQK; ++e) a[e] = d, b[e] = d * off;
      break;
    }
    case DType::kQ4_1:
    case DType::kQ5_1: {
      const bool q4 = t == DType::kQ4_1;
      const float d = f16_to_f32(q4 ? static_cast<const BlockQ4_1*>(block)->d : static_cast<const BlockQ5_1*>(block)->d);
      const float m = f16_to_f32(q4 ? static_cast<const BlockQ4_1*>(block)->m : static_cast<const BlockQ5_1*>(block)->m);
      for (int e = 0; e < kQK; ++e) a[e] = d, b[e] = m;
      break;
    }
    case DType::kQ8_0: {
      const float d = f16_to_f32(static_cast<const BlockQ8_0*>(block)->d);
      for (int e = 0; e < kQK; ++e) a[e] = d, b[e] = 0;
      break;
    }
    case DType::kQ2_K: {
      const auto& y = *static_cast<const BlockQ2_K*>(block);
      const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
      for (int e = 0; e < kQK_K; ++e) {
        a[e] = d * static_cast<float>(y.scales[e / 16] & 0xF);
        b[e] = -(dmin * static_cast<float>(y.scales[e / 16] >> 4));
      }
      break;
    }
    case DType::kQ3_K: {
      const auto& y = *static_cast<const BlockQ3_K*>(block);
      const float d = f16_to_f32(y.d);
      for (int e = 0; e < kQK_K; ++e) a[e] = d * static_cast<float>(quant::q3_K_scale(y.scales, e / 16)), b[e] = 0;
      break;
    }
    case DType::kQ4_K: k4_affine(*static_cast<const BlockQ4_K*>(block), a, b); break;
    case DType::kQ5_K: k4_affine(*static_cast<const BlockQ5_K*>(block), a, b); break;
    case DType::kQ6_K: {
      const auto& y = *static_cast<const BlockQ6_K*>(block);
      const float d = f16_to_f32(y.d);
      for (int e = 0; e < kQK_K; ++e) a[e] = d * static_cast<float>(y.scales[e / 16]), b[e] = 0;
      break;
    }
    default: break;
  }
}

void unpack_levels(DType t, const void* block, int* L) {
  int8_t q[kQK_K];
  switch (t) {
    case DType::kQ4_0: {
      const auto& y = *static_cast<const BlockQ4_0*>(block);
      for (int e = 0; e < kQK; ++e) L[e] = legacy_nibble(y.qs, e);
      break;
    }
    case DType::kQ4_1: {
      const auto& y = *static_cast<const BlockQ4_1*>(block);
      for (int e = 0; e < kQK; ++e) L[e] = legacy_nibble(y.qs, e);
      break;
    }
    case DType::kQ5_0: {
      const auto& y = *static_cast<const BlockQ5_0*>(block);
      for (int e = 0; e < kQK; ++e) L[e] = legacy_nibble(y.qs, e) | (legacy_high_bit(y.qh, e) << 4);
      break;
    }
    case DType::kQ5_1: {
      const auto& y = *static_cast<const BlockQ5_1*>(block);
      for (int e = 0; e < kQK; ++e) L[e] = legacy_nibble(y.qs, e) | (legacy_high_bit(y.qh, e) << 4);
      break;
    }
    case DType::kQ8_0: {
      const auto& y = *static_cast<const BlockQ8_0*>(block);
      for (int e = 0; e < kQK; ++e) L[e] = y.qs[e];
      break;
    }
    case DType::kQ2_K: quant::unpack_q2_K(*static_cast<const BlockQ2_K*>(block), q); break;
    case DType::kQ3_K: quant::unpack_q3_K(*static_cast<const BlockQ3_K*>(block), q); break;
    case DType::kQ4_K: quant::unpack_q4_K(*static_cast<const BlockQ4_K*>(block), q); break;
    case DType::kQ5_K: quant::unpack_q5_K(*static_cast<const BlockQ5_K*>(block), q); break;
    case DType::kQ6_K: quant::unpack_q6_K(*static_cast<const BlockQ6_K*>(block), q); break;
    default: return;
  }
  if (dtype_block_size(t) == kQK_K)
    for (int e = 0; e < kQK_K; ++e) L[e] = q[e];
}

void pack_levels(DType t, const int* L, void* block) {
  switch (t) {
    case DType::kQ4_0: put_legacy(static_cast<BlockQ4_0*>(block)->qs, nullptr, L); break;
    case DType::kQ4_1: put_legacy(static_cast<BlockQ4_1*>(block)->qs, nullptr, L); break;
    case DType::kQ5_0: {
      auto* y = static_cast<BlockQ5_0*>(block);
      put_legacy(y->qs, y->qh, L);
      break;
    }
    case DType::kQ5_1: {
      auto* y = static_cast<BlockQ5_1*>(block);
      put_legacy(y->qs, y->qh, L);
      break;
    }
    case DType::kQ8_0: {
      auto* y = static_cast<BlockQ8_0*>(block);
      for (int e = 0; e < kQK; ++e) y->qs[e] = static_cast<int8_t>(L[e]);
      break;
    }
    case DType::kQ2_K: put_2bit(static_cast<BlockQ2_K*>(block)->qs, L); break;
    case DType::kQ3_K: {
      auto* y = static_cast<BlockQ3_K*>(block);
      int u[kQK_K];
      std::memset(y->hmask, 0, sizeof(y->hmask));
      for (int e = 0; e < kQK_K; ++e) {
        u[e] = L[e] + 4;
        y->hmask[e % 32] |= static_cast<uint8_t>((u[e] >> 2) << (e / 32));
      }
      put_2bit(y->qs, u);
      break;
    }
    case DType::kQ4_K: put_k4_nibbles(static_cast<BlockQ4_K*>(block)->qs, L); break;
    case DType::kQ5_K: {
      auto* y = static_cast<BlockQ5_K*>(block);
      put_k4_nibbles(y->qs, L);
      std::memset(y->qh, 0, sizeof(y->qh));
      for (int e = 0; e < kQK_K; ++e) y->qh[e % 32] |= static_cast<uint8_t>(((L[e] >> 4) & 1) << (e / 32));
      break;
    }
    case DType::kQ6_K: {
      auto* y = static_cast<BlockQ6_K*>(block);
      std::memset(y->ql, 0, sizeof(y->ql));
      std::memset(y->qh, 0, sizeof(y->qh));
      for (int e = 0; e < kQK_K; ++e) {
        const int u = L[e] + 32, h = e / 128, c = (e % 128) / 32, l = e % 32;
        y->ql[64 * h + 32 * (c & 1) + l] |= static_cast<uint8_t>((u & 0xF) << (4 * (c >> 1)));
        y->qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * c));
      }
      break;
    }
    default: break;
  }
}

}  // namespace ember
