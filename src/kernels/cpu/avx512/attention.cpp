// AVX-512 tiled online-softmax attention (the op table's entry at the
// AVX-512 level): kernels/cpu/attention_tiles.h with its 16-float vector as
// one zmm register, K/V rows of every format of kernels/kv_types.h decoded
// in registers 16 elements at a time (a half q8 / q4 group). The lanes hold
// what the AVX2 kernel's two 8-lane halves hold and the reduction adds the
// halves before the same 8-lane sum, so both levels give the same bits
// (tests/kernels/attention_isa_test.cpp); rows per K / V load are doubled
// (32 vector registers).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/simd.h"

// GCC 12 reports the intrinsics' own undefined-register idiom as possibly
// uninitialised (a false positive, as in the other avx512/ files).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {

namespace {

struct Avx512Vec16 {
  using Vec = __m512;
  static constexpr int kDotRows = 8;  // rows per K load in q·k
  static constexpr int kPvRows = 8;   // rows per V load in p·V
  static constexpr int kPvPairRows = 8;  // rows whose two halves of a q8 / q4 group fit the registers
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(Vec v) {
    return simd::hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
  }
  // out[k] = hsum(a[k]) * scale for 16 accumulators at once: the same adds
  // as hsum lane for lane (lanes i + 8, then i + 4, then 0 + 2 and 1 + 3,
  // then those two), done for 16 keys in 15 vector adds.
  static constexpr bool kHsum16 = true;
  static void hsum16_scaled(const Vec a[16], float scale, float* out) {
    Vec l1[8], l2[4], l3[2];
    for (int m = 0; m < 8; ++m)  // chunks 0-1: a[2m] lanes i + i+8; 2-3: a[2m + 1]
      l1[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                            _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    for (int n = 0; n < 4; ++n)  // chunk c: key 4n + c, lanes i + i+4
      l2[n] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * n], l1[2 * n + 1], 0x88),
                            _mm512_shuffle_f32x4(l1[2 * n], l1[2 * n + 1], 0xDD));
    for (int o = 0; o < 2; ++o)  // chunk c: (0+2, 1+3) of keys 8o + c, 8o + 4 + c
      l3[o] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * o], l2[2 * o + 1], 0x44),
                            _mm512_shuffle_ps(l2[2 * o], l2[2 * o + 1], 0xEE));
    // lane 4c + l: key 4l + c; the 4 x 4 transpose puts key k in lane k.
    const Vec r = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], 0x88), _mm512_shuffle_ps(l3[0], l3[1], 0xDD));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_permutexvar_ps(idx, r), _mm512_set1_ps(scale)));
  }
  // Elements i..i+15 (i % 16 == 0) of a K/V head row of type T, decoded to
  // exactly the floats kv_load_row gives.
  template <KvType T>
  static Vec load_kv(const uint8_t* row, int i) {
    if constexpr (T == KvType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (T == KvType::kF16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    } else if constexpr (T == KvType::kBF16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    } else if constexpr (T == KvType::kQ8) {
      const uint8_t* b = row + (i / kKvGroup) * (2 + kKvGroup);
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + i % kKvGroup));
      return _mm512_mul_ps(_mm512_set1_ps(attn_tiles::group_scale(b)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    } else {
      // Elements 0-15 of a group are the low nibbles of its 16 bytes, 16-31
      // the high ones.
      const uint8_t* b = row + (i / kKvGroup) * (2 + kKvGroup / 2);
      __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
      q = i % kKvGroup < kKvGroup / 2 ? _mm512_and_si512(q, _mm512_set1_epi32(15)) : _mm512_srli_epi32(q, 4);
      q = _mm512_sub_epi32(q, _mm512_set1_epi32(8));
      return _mm512_mul_ps(_mm512_set1_ps(attn_tiles::group_scale(b)), _mm512_cvtepi32_ps(q));
    }
  }
  // A whole q8 / q4 group (elements i..i+31, i % 32 == 0): the floats of
  // load_kv at i and i + 16 with the group's scale converted once.
  template <KvType T>
    requires(T == KvType::kQ8 || T == KvType::kQ4)
  static void load_group(const uint8_t* row, int i, Vec* a, Vec* b) {
    if constexpr (T == KvType::kQ8) {
      const uint8_t* g = row + (i / kKvGroup) * (2 + kKvGroup);
      const __m512 d = _mm512_set1_ps(attn_tiles::group_scale(g));
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 2));
      *a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))));
      *b = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))));
    } else {
      const uint8_t* g = row + (i / kKvGroup) * (2 + kKvGroup / 2);
      const __m512 d = _mm512_set1_ps(attn_tiles::group_scale(g));
      const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2)));
      const __m512i eight = _mm512_set1_epi32(8);
      *a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, _mm512_set1_epi32(15)), eight)));
      *b = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight)));
    }
  }
  // q4c: elements i..i+15 of position r of a head's group region, fma(d, q, m).
  static Vec load_q4c(const uint8_t* region, int r, int hd, int i) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(region + 2 * i)));
    const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(region + 2 * hd + 2 * i)));
    const uint8_t* nib = region + 4 * hd + r * (hd / 2) + (i / kKvGroup) * (kKvGroup / 2);
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(nib)));
    q = i % kKvGroup < kKvGroup / 2 ? _mm512_and_si512(q, _mm512_set1_epi32(15)) : _mm512_srli_epi32(q, 4);
    return _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(q), m);
  }
};

}  // namespace

int64_t attention_scratch_floats(const AttentionShape& s, int64_t n_tokens, int n_threads, int64_t max_pos) {
  return attn_tiles::scratch_floats(s, n_tokens, n_threads, max_pos);
}

void attention_ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                      const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                      ThreadPool& pool) {
  attn_tiles::ragged<Avx512Vec16>(s, q, pos, n_tokens, views, view_of_token, out, scratch, pool);
}

}  // namespace ember::avx512
