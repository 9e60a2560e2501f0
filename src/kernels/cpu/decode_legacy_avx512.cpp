// AVX-512 VNNI decode kernel for Q4_0 weights x Q8_0 activations over many
// rows (KernelSet::vec_dot_rows, see decode_rows.h): groups of
// kDecodeGroupRows consecutive weight rows share the activation loads and
// their final horizontal sums are done together (tile512::hsum16), which
// matters for short rows (640 elements = 20 blocks) where per-row overhead
// dominates vec_dot.
//
// Bit-identity with vec_dot_q4_0_q8_0 (simd::legacy_blocks_dot): its float
// state is two 8-lane accumulators, block b into acc[b % 2] for b below nb
// rounded down to a multiple of 4, the (< 4) tail blocks into acc0; each step
// is acc = fma(float(p_b), dw_b * dx_b, acc), the result hsum_f32x8(acc0 +
// acc1). Integer lane sums are exact, so p_b is computed as one vpdpbusd of
// the unsigned nibbles seeded with -8 * sum4(y); the float steps are
// replicated with acc0 / acc1 as the low / high halves of one zmm.
//
// Weights stream from memory: the group's rows are contiguous, and the next
// group is software-prefetched line by line while this one is computed.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/decode_rows.h"
#include "kernels/cpu/simd_util.h"
#include "kernels/cpu/tile_avx512.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kR = kDecodeGroupRows;
static_assert(kR == 8 || kR == 16, "hsum layout below assumes 8 or 16 rows per group");

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Nibbles of two blocks -> [lo(a) hi(a) | lo(b) hi(b)] (unpack_nibbles_16 per half).
inline __m512i nibbles2(const uint8_t* a, const uint8_t* b) {
  const __m256i q =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  // [qa qa qb qb], upper copies shifted right by 4.
  const __m512i v = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(q));
  const __m512i sh = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
  return _mm512_and_si512(sh, _mm512_set1_epi8(0x0F));
}

// Weight format: unsigned quants u with signed weight u - kOffset, for one
// block (ymm) or two consecutive blocks (zmm [b | b + 1]). The same scheme
// for Q8_0 weights measured slower than its vec_dot in decode (34-byte blocks:
// memory-bound), so only Q4_0 uses it.
struct WeightQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m512i unpack2(const Block& b0, const Block& b1) { return nibbles2(b0.qs, b1.qs); }
  static __m256i unpack1(const Block& b) { return simd::unpack_nibbles_16(b.qs); }
};

// f16 scales of two blocks -> [f(a) x 8 | f(b) x 8].
inline __m512 scales2(uint16_t a, uint16_t b) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (static_cast<uint32_t>(b) << 16))));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_zextps128_ps512(f));
}

// kR rows starting at w (rows `rs` bytes apart; row r clamped to nr - 1)
// into s[0:nr]. pf: start of the next group's bytes to prefetch (may be
// null), pf_lines lines of it spread over the block pairs.
template <class W>
void group_rows(int64_t nb, float* s, const uint8_t* w, size_t rs, const BlockQ8_0* x, int nr, const uint8_t* pf,
                int64_t pf_lines) {
  using WB = typename W::Block;
  const WB* wr[kR];
  for (int r = 0; r < kR; ++r) wr[r] = reinterpret_cast<const WB*>(w + static_cast<size_t>(std::min(r, nr - 1)) * rs);
  const int64_t nb4 = nb & ~int64_t{3};
  const int64_t npairs = nb4 / 2;
  const __m512i off = _mm512_set1_epi8(static_cast<char>(W::kOffset));
  __m512 acc[kR];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const int64_t per_pair = npairs > 0 ? (pf_lines + npairs - 1) / npairs : 0;
  int64_t pf_done = 0;

  for (int64_t b = 0; b < nb4; b += 2) {
    if (pf) {
      const int64_t end = std::min(pf_lines, pf_done + per_pair);
      for (; pf_done < end; ++pf_done) _mm_prefetch(reinterpret_cast<const char*>(pf + pf_done * 64), _MM_HINT_T0);
    }
    const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(loadu(x[b].qs)), loadu(x[b + 1].qs), 1);
    const __m512i seed = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, y));
    const __m512 dx = scales2(x[b].d, x[b + 1].d);
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
      const __m512i u = W::unpack2(wr[r][b], wr[r][b + 1]);
      const __m512 dw = scales2(wr[r][b].d, wr[r][b + 1].d);
      const __m512i p = _mm512_dpbusd_epi32(seed, u, y);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, dx), acc[r]);
    }
  }
  // Tail blocks (< 4): all into acc0 (the low half).
  for (int64_t b = nb4; b < nb; ++b) {
    const __m256i y = loadu(x[b].qs);
    const __m256i seed = _mm256_sub_epi32(_mm256_setzero_si256(),
                                          _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(off), y));
    const float dx = simd::load_f16(x[b].d);
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
      const __m256i u = W::unpack1(wr[r][b]);
      const __m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(seed, u, y));
      acc[r] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(p), _mm512_set1_ps(simd::load_f16(wr[r][b].d) * dx), acc[r],
                                     static_cast<__mmask16>(0x00FF));
    }
  }
  if (pf)
    for (; pf_done < pf_lines; ++pf_done) _mm_prefetch(reinterpret_cast<const char*>(pf + pf_done * 64), _MM_HINT_T0);

  // v(k) = acc0 + acc1 of row k (k < kR; for kR = 8 the rows repeat): hsum16
  // gives out[4 * L + e] = hsum(v(4 * e + L)), so row k is at 4 * (k % 4) + k / 4.
  __m512 v[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    const int r0 = (2 * m) % kR, r1 = r0 + 1;
    v[m] = _mm512_add_ps(tile512::lo_halves(acc[r0], acc[r1]), tile512::hi_halves(acc[r0], acc[r1]));
  }
  alignas(64) float t[16];
  _mm512_store_ps(t, tile512::hsum16(v));
  for (int r = 0; r < nr; ++r) s[r] = t[4 * (r & 3) + (r >> 2)];
}

template <class W>
void rows_dispatch(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const int64_t nb = n / kQK;
  const size_t group_bytes = static_cast<size_t>(kR) * w_row_bytes;
  for (int64_t r = 0; r < nr; r += kR) {
    const int64_t rows = std::min<int64_t>(kR, nr - r);
    const uint8_t* g = wb + static_cast<size_t>(r) * w_row_bytes;
    // Prefetch the group after this one (within this call's rows).
    const int64_t next_rows = std::min<int64_t>(kR, nr - r - kR);
    const uint8_t* pf = next_rows > 0 ? g + group_bytes : nullptr;
    const int64_t pf_lines =
        next_rows > 0 ? static_cast<int64_t>((static_cast<size_t>(next_rows) * w_row_bytes + 63) / 64) : 0;
    group_rows<W>(nb, s + r, g, w_row_bytes, xb, static_cast<int>(rows), pf, pf_lines);
  }
}

}  // namespace

void vec_dot_rows_q4_0_q8_0(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_dispatch<WeightQ4_0>(n, s, w, w_row_bytes, x, nr);
}

}  // namespace ember::avx512
