// The KV row encoder and scalar decoder of kernels/kv_types.h.
#include "kernels/kv_types.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "core/fp16.h"

namespace ember {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kBF16: return "bf16";
    case KvType::kQ8: return "q8";
    case KvType::kQ4: return "q4";
    case KvType::kQ4C: return "q4c";
  }
  return "?";
}

Result<KvType> parse_kv_type(std::string_view s) {
  std::string l(s);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "f32") return KvType::kF32;
  if (l == "f16") return KvType::kF16;
  if (l == "bf16") return KvType::kBF16;
  if (l == "q8" || l == "q8_0") return KvType::kQ8;
  if (l == "q4" || l == "q4_0") return KvType::kQ4;
  if (l == "q4c" || l == "kivi") return KvType::kQ4C;
  return Status::errorf("unknown KV cache dtype '{}' (f32, f16, bf16, q8, q4, q4c)", s);
}

Status kv_type_check(KvType t, int64_t head_dim) {
  if ((t == KvType::kQ8 || t == KvType::kQ4 || t == KvType::kQ4C) && head_dim % kKvGroup != 0)
    return Status::errorf("KV cache dtype {} needs a head dimension that is a multiple of {} (the model has {})",
                          kv_type_name(t), kKvGroup, head_dim);
  if (t != KvType::kF32 && head_dim > 1024)
    return Status::errorf("KV cache dtype {} supports head dimensions up to 1024 (the model has {})", kv_type_name(t),
                          head_dim);
  return Status::ok();
}

namespace {

void store_q8(const float* x, uint8_t* b) {
  float amax = 0.f;
  for (int j = 0; j < kKvGroup; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = d > 0.f ? 1.f / d : 0.f;
  const f16_t dh = f32_to_f16(d);
  std::memcpy(b, &dh, 2);
  for (int j = 0; j < kKvGroup; ++j) {
    const int q = static_cast<int>(std::nearbyint(x[j] * id));
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127, 127)));
  }
}

void store_q4(const float* x, uint8_t* b) {
  float amax = 0.f, mx = 0.f;
  for (int j = 0; j < kKvGroup; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      mx = x[j];
    }
  const float d = mx / -8.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  const f16_t dh = f32_to_f16(d);
  std::memcpy(b, &dh, 2);
  for (int j = 0; j < kKvGroup / 2; ++j) {
    const int q0 = std::clamp(static_cast<int>(x[j] * id + 8.5f), 0, 15);
    const int q1 = std::clamp(static_cast<int>(x[j + kKvGroup / 2] * id + 8.5f), 0, 15);
    b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

void kv_store_row(KvType t, const float* src, int64_t n, uint8_t* dst) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const f16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const bf16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kQ8:
      for (int64_t g = 0; g < n / kKvGroup; ++g) store_q8(src + g * kKvGroup, dst + g * (2 + kKvGroup));
      return;
    case KvType::kQ4:
      for (int64_t g = 0; g < n / kKvGroup; ++g) store_q4(src + g * kKvGroup, dst + g * (2 + kKvGroup / 2));
      return;
    case KvType::kQ4C: return;  // a group format: kv_q4c_encode_group
  }
}

void kv_load_row(KvType t, const uint8_t* src, int64_t n, float* dst) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        f16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case KvType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        bf16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case KvType::kQ8:
      for (int64_t g = 0; g < n / kKvGroup; ++g) {
        const uint8_t* b = src + g * (2 + kKvGroup);
        f16_t dh;
        std::memcpy(&dh, b, 2);
        const float d = f16_to_f32(dh);
        for (int j = 0; j < kKvGroup; ++j) dst[g * kKvGroup + j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
      }
      return;
    case KvType::kQ4:
      for (int64_t g = 0; g < n / kKvGroup; ++g) {
        const uint8_t* b = src + g * (2 + kKvGroup / 2);
        f16_t dh;
        std::memcpy(&dh, b, 2);
        const float d = f16_to_f32(dh);
        for (int j = 0; j < kKvGroup / 2; ++j) {
          dst[g * kKvGroup + j] = d * static_cast<float>((b[2 + j] & 15) - 8);
          dst[g * kKvGroup + j + kKvGroup / 2] = d * static_cast<float>((b[2 + j] >> 4) - 8);
        }
      }
      return;
    case KvType::kQ4C: return;  // a group format: kv_q4c_load_row
  }
}

void kv_q4c_encode_group(const uint8_t* f16_rows, int64_t row_stride, int n_heads, int head_dim, uint8_t* dst) {
  const int hd = head_dim;
  auto x = [&](int r, int64_t i) {
    f16_t h;
    std::memcpy(&h, f16_rows + r * row_stride + 2 * i, 2);
    return f16_to_f32(h);
  };
  for (int h = 0; h < n_heads; ++h) {
    uint8_t* reg = dst + static_cast<int64_t>(h) * 12 * hd;
    uint8_t* nib = reg + 4 * hd;
    std::memset(nib, 0, static_cast<size_t>(kKvTokenGroup) * hd / 2);
    for (int c = 0; c < hd; ++c) {
      const int64_t i = static_cast<int64_t>(h) * hd + c;
      float lo = x(0, i), hi = lo;
      for (int r = 1; r < kKvTokenGroup; ++r) {
        lo = std::min(lo, x(r, i));
        hi = std::max(hi, x(r, i));
      }
      const f16_t dh = f32_to_f16((hi - lo) / 15.f), mh = f32_to_f16(lo);
      std::memcpy(reg + 2 * c, &dh, 2);
      std::memcpy(reg + 2 * hd + 2 * c, &mh, 2);
      const float d = f16_to_f32(dh), m = f16_to_f32(mh);
      const float id = d > 0.f ? 1.f / d : 0.f;
      // q4 order per 32 elements of a position row: elements 0-15 in the
      // low nibbles of its 16 bytes, 16-31 in the high ones.
      const int byte = c / kKvGroup * (kKvGroup / 2) + c % (kKvGroup / 2);
      const int shift = c % kKvGroup < kKvGroup / 2 ? 0 : 4;
      for (int r = 0; r < kKvTokenGroup; ++r) {
        const int q = std::clamp(static_cast<int>(std::nearbyint((x(r, i) - m) * id)), 0, 15);
        nib[r * (hd / 2) + byte] = static_cast<uint8_t>(nib[r * (hd / 2) + byte] | (q << shift));
      }
    }
  }
}

void kv_q4c_load_row(const uint8_t* head_region, int r, int head_dim, float* dst) {
  const int hd = head_dim;
  const uint8_t* nib = head_region + 4 * hd + r * (hd / 2);
  for (int c = 0; c < hd; ++c) {
    f16_t dh, mh;
    std::memcpy(&dh, head_region + 2 * c, 2);
    std::memcpy(&mh, head_region + 2 * hd + 2 * c, 2);
    const uint8_t b = nib[c / kKvGroup * (kKvGroup / 2) + c % (kKvGroup / 2)];
    const int q = c % kKvGroup < kKvGroup / 2 ? (b & 15) : (b >> 4);
    dst[c] = std::fma(f16_to_f32(dh), static_cast<float>(q), f16_to_f32(mh));
  }
}

}  // namespace ember
