// The Q4_0_R16 / Q5_0_R16 / Q8_0_R16 group layouts (kernels/interleave.h)
// as the AVX-512 lane kernels (avx512/legacy_r16_lanes.cpp) and the AMX
// tile kernels (amx/legacy_r16_tokens.cpp) read them: block sizes, offsets and the
// unsigned quants of a block's layout vectors. Include only from avx512/ and
// amx/ files; internal linkage (the TUs have different ISA flags, so no
// inline function may be shared between them by the linker). Pure register
// functions, no state.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember::avx512::legacy {
namespace {

inline __mmask64 mask64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return _cvtu64_mask64(v);
}

// kU8: a Q5_0 group unpacked for many tokens (the AVX-512 passes' unpack()):
// the Q8_0 layout with the unsigned quants (offset as the source type's).
enum class Legacy { kQ4_0, kQ5_0, kQ8_0, kU8 };

template <Legacy K>
struct Layout {
  static constexpr bool kBytes = K == Legacy::kQ8_0 || K == Legacy::kU8;  // one byte per quant
  static constexpr int kVectors = kBytes ? 8 : 4;                         // quant vectors per block
  static constexpr size_t kQs = K == Legacy::kQ5_0 ? 96 : 32;             // d vector [, qh masks], then qs
  static constexpr size_t kBlock = kQs + 64 * kVectors;                   // bytes per block of a group
  static constexpr int kOffset = K == Legacy::kQ8_0 ? 128 : K == Legacy::kQ5_0 ? 16 : 8;
};

// The unsigned quants of a group's block at p: nibble vector k holds, in
// dword r, row r's elements 4k .. 4k + 3 (lo) and 16 + 4k .. 16 + 4k + 3
// (hi), the high bits added for Q5_0. Not for Q8_0 (one byte per quant).
template <Legacy K>
inline void quants(const uint8_t* p, int k, __m512i* lo, __m512i* hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), k16 = _mm512_set1_epi8(16);
  const __m512i q = _mm512_loadu_si512(p + Layout<K>::kQs + 64 * k);
  *lo = _mm512_and_si512(q, m4);
  *hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  if constexpr (K == Legacy::kQ5_0) {  // the high bits: masks k and 4 + k
    *lo = _mm512_mask_add_epi8(*lo, mask64(p + 32 + 8 * k), *lo, k16);
    *hi = _mm512_mask_add_epi8(*hi, mask64(p + 64 + 8 * k), *hi, k16);
  }
}

}  // namespace
}  // namespace ember::avx512::legacy
