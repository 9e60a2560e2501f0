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
  return Status::errorf("unknown KV cache dtype '{}' (f32, f16, bf16, q8, q4)", s);
}

Status kv_type_check(KvType t, int64_t head_dim) {
  if ((t == KvType::kQ8 || t == KvType::kQ4) && head_dim % kKvGroup != 0)
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
  }
}

}  // namespace ember
