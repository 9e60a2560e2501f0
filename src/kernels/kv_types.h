// Storage formats of the KV cache (--kv-cache-dtype): the element type of
// the K and V rows of a page, chosen per cache for K and V separately.
//
// A cache row of n floats (one position of one layer: n_head_kv heads of
// head_dim, head h at byte offset h * kv_row_bytes(type, head_dim)) is
// stored as
//   f32   n floats (the historical format; bit-identical outputs)
//   f16   n IEEE halves            bf16  n bfloat16 (round to nearest even)
//   q8    per group of kKvGroup elements along the head dimension: an f16
//         scale d then 32 int8 q, x = d * q (d = max|x| / 127): 34 bytes
//   q4    per group: an f16 scale d then 16 bytes of nibbles, element j in
//         the low nibble of byte j, element j + 16 in the high one,
//         x = d * (q - 8) (d = signed max / -8, llama.cpp's q4_0): 18 bytes
//   q4c   keys only (KIVI): 4 bits per element with an f16 scale d and an f16
//         minimum m per channel over a group of kKvTokenGroup consecutive
//         positions (aligned to position 0), x = fma(d, q, m), q in 0..15.
//         A group is stored as one region of kKvTokenGroup rows (3/4 byte an
//         element, scales included): per head h, at h * 12 * head_dim bytes,
//         [d: head_dim f16][m: head_dim f16][16 position rows of head_dim / 2
//         bytes of nibbles, q4 order per 32 elements]. The rows of a group
//         that is not yet full live in f16 in a tail held by the cache
//         (model/kv_group_tails.h KvGroupTails) and are encoded from those f16
//         values when the group's last position is written; a query reads
//         the keys of its own unfinished group from the tail (kv_key_in_tail
//         of kernels/attention.h), so every query sees what it would see
//         decoding alone, whatever the batch.
// so the scales sit inside the page next to their values and swap, copy-on-
// write and the prefix cache move pages as opaque bytes. q8/q4 need
// head_dim % kKvGroup == 0 (groups never straddle heads).
//
// kv_store_row is the one encoder of every ISA level (scalar, deterministic:
// a row stored by any batch shape or thread count has the same bytes);
// kv_load_row is the scalar decoder the reference attention reads through.
// The attention kernels of kernels/cpu/ decode the same values in registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ember {

enum class KvType : uint8_t { kF32, kF16, kBF16, kQ8, kQ4, kQ4C };
constexpr int kKvTypeCount = 6;
constexpr int kKvGroup = 32;       // elements per q8 / q4 scale
constexpr int kKvTokenGroup = 16;  // positions per q4c channel scale

// Rotation of the stored head rows (--kv-rotation): kHadamard stores K
// rows as H k after RoPE (the forward pass rotates Q the same way, so
// q.k is unchanged) and V rows as H v (the attention output is rotated back
// with H^T before the output projection), H the orthonormal Hadamard
// matrix of the head size (kernels/hadamard.h). Applied by
// model/layers/attention.cpp; the attention kernels never see it.
enum class KvRotation : uint8_t { kNone, kHadamard };

// K and V storage types of one cache.
struct KvTypes {
  KvType k = KvType::kF32;
  KvType v = KvType::kF32;
  KvRotation rot_k = KvRotation::kNone;
  KvRotation rot_v = KvRotation::kNone;
  bool operator==(const KvTypes&) const = default;
};

const char* kv_type_name(KvType t);
// "f32" | "f16" | "bf16" | "q8" | "q4" | "q4c" (also "q8_0" / "q4_0" /
// "kivi", case-insensitive).
Result<KvType> parse_kv_type(std::string_view s);
// Checks that rows of head_dim elements can be stored as t.
Status kv_type_check(KvType t, int64_t head_dim);
// True for formats whose rows are encoded per token group (q4c).
inline bool kv_token_grouped(KvType t) { return t == KvType::kQ4C; }

// Bytes of a row of n elements (n % kKvGroup == 0 for q8 / q4 / q4c; q4c:
// a row's share of its group region).
inline size_t kv_row_bytes(KvType t, int64_t n) {
  switch (t) {
    case KvType::kF32: return static_cast<size_t>(n) * 4;
    case KvType::kF16:
    case KvType::kBF16: return static_cast<size_t>(n) * 2;
    case KvType::kQ8: return static_cast<size_t>(n / kKvGroup) * (2 + kKvGroup);
    case KvType::kQ4: return static_cast<size_t>(n / kKvGroup) * (2 + kKvGroup / 2);
    case KvType::kQ4C: return static_cast<size_t>(n) * 3 / 4;
  }
  return 0;
}

// Encodes n floats (a whole cache row, or any run of whole heads) into dst.
// Not for q4c (a group format: kv_q4c_encode_group).
void kv_store_row(KvType t, const float* src, int64_t n, uint8_t* dst);
// Decodes n elements of a stored row into floats (the exact values the
// attention kernels use). Not for q4c (kv_q4c_load_row).
void kv_load_row(KvType t, const uint8_t* src, int64_t n, float* dst);

// q4c: encodes the kKvTokenGroup f16 rows of a full group (row r at
// f16_rows + r * row_stride bytes, n_heads heads of head_dim) into its
// region dst (layout above). Scalar and deterministic: the bytes depend on
// the f16 rows only.
void kv_q4c_encode_group(const uint8_t* f16_rows, int64_t row_stride, int n_heads, int head_dim, uint8_t* dst);
// q4c: decodes position r (< kKvTokenGroup) of one head's part of a group
// region (region = group base + h * 12 * head_dim) into head_dim floats.
void kv_q4c_load_row(const uint8_t* head_region, int r, int head_dim, float* dst);

}  // namespace ember
