// AVX-512 VNNI decode kernels for Q4_0 / Q8_0 x Q8_0 and Q4_1 / Q5_1 x Q8_1 over
// many rows (KernelSet::vec_dot_rows, see kernels/cpu/isa_kernels.h): groups of
// kLegacyRowsGroup (16) consecutive weight rows share the activation work,
// and their per-block integer sums are reduced together so that the float
// work (convert, scale, fma) is one instruction per block for all 16 rows
// (lane r of one zmm = row r).
//
// Arithmetic: the lane contract of avx512/legacy_lanes.cpp (per block in
// order acc = fma(float(isum_b), d_w[b] * d_x[b], acc), then for Q4_1 / Q5_1
// acc = fma(m_w[b], s_x[b], acc); isum_b the exact integer dot of the weight
// quants (Q4_0: minus 8; Q8_0: taken as q ^ 0x80, minus 128) and activation
// quants), so every output is
// bit-identical to that file's vec_dot and tile kernel of the same type.
//
// Per block pair and row, one ymm holds both blocks' quants; two ymm
// vpdpbusd (low nibbles x first activation halves, high nibbles x second
// halves; Q5_1 adds its fifth bits with masked adds first; Q4_0 seeds with
// -8 * sum4 of the activations, shared by the rows) leave 4 exact lane sums
// per block, which the 16 rows add up together with shuffles. ymm rather than
// zmm unpacking: Zen 4 splits zmm ops in two, and this form needs no
// cross-lane nibble shuffle and half the reduction work.
//
// Weights stream from memory: the group's rows are contiguous, and the next
// group is software-prefetched line by line while this one is computed. The
// rows' f16 d (and m) are fetched with one gather per block: assembling them
// from scalar loads (through the stack, or in general registers) measured
// ~40% slower on weights streaming from DRAM, though slightly faster from
// cache.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kR = kLegacyRowsGroup;
static_assert(kR == 16, "one zmm lane per row");

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Integer sums of 2 blocks x 16 rows: p[r] = [4 lane sums of block b | 4 of
// block b + 1] (ymm) -> s0 (lane r = isum_b of row r), s1 (isum_b+1). Exact.
inline void reduce_rows(const __m256i p[kR], __m512i& s0, __m512i& s1) {
  // q[j] (rows a = j % 4 + 8 * (j / 4), c = a + 4): 128-bit lanes
  // [a:b, a:b+1, c:b, c:b+1], 4 partial sums each.
  __m512i q[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const int a = j % 4 + 8 * (j / 4);
    q[j] = _mm512_inserti64x4(_mm512_castsi256_si512(p[a]), p[a + 4], 1);
  }
  // 4 x 4 transpose-add inside 128-bit lanes: v[h] lane L element e = the
  // sum of lane L of q[4h + e].
  __m512i v[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i* g = q + 4 * h;
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(g[0], g[1]), _mm512_unpackhi_epi32(g[0], g[1]));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(g[2], g[3]), _mm512_unpackhi_epi32(g[2], g[3]));
    v[h] = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  }
  // v[h] lanes: [rows 8h..8h+3 : b, same : b+1, rows 8h+4..8h+7 : b, same : b+1].
  s0 = _mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0));
  s1 = _mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1));
}

// Weight formats: the quants of blocks a and (if kTwo) b of one row as
// unsigned bytes, low nibbles (elements 0..15 of a | of b) and high nibbles
// (elements 16..31), plus the fifth bit for Q5_1. kOffset: subtracted from
// the quants (by seeding with -kOffset * sum4(x)); kMin: blocks carry a min m
// after d, the activations (Q8_1) an s after d.
struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  using XBlock = BlockQ8_0;
  static constexpr int kOffset = 8;
  static constexpr bool kMin = false;
};
struct DecodeQ8_0 {  // signed quants: stored as q ^ 0x80 = q + 128, offset 128
  using Block = BlockQ8_0;
  using XBlock = BlockQ8_0;
  static constexpr int kOffset = 128;
  static constexpr bool kMin = false;
};
struct DecodeQ4_1 {
  using Block = BlockQ4_1;
  using XBlock = BlockQ8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
};
struct DecodeQ5_1 {
  using Block = BlockQ5_1;
  using XBlock = BlockQ8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
};

template <class W, bool kTwo>
inline void quants2(const typename W::Block& a, const typename W::Block& b, __m256i m4, __m256i& lo, __m256i& hi) {
  if constexpr (std::is_same_v<typename W::Block, BlockQ8_0>) {
    // Elements 0..15 of a | of b, and 16..31 of a | of b, made unsigned.
    const __m256i k80 = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i va = loadu(a.qs), vb = kTwo ? loadu(b.qs) : _mm256_set1_epi8(static_cast<char>(0x80));
    lo = _mm256_xor_si256(_mm256_permute2x128_si256(va, vb, 0x20), k80);
    hi = _mm256_xor_si256(_mm256_permute2x128_si256(va, vb, 0x31), k80);
    return;
  }
  const __m128i qa = loadu128(a.qs);
  __m256i v;
  if constexpr (kTwo) {
    v = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), loadu128(b.qs), 1);
  } else {
    v = _mm256_zextsi128_si256(qa);
  }
  lo = _mm256_and_si256(v, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if constexpr (std::is_same_v<typename W::Block, BlockQ5_1>) {
    const uint32_t ha = simd::load_u32(a.qh), hb = kTwo ? simd::load_u32(b.qh) : 0;
    const __mmask32 mlo = (ha & 0xFFFFu) | (hb << 16), mhi = (ha >> 16) | (hb & 0xFFFF0000u);
    const __m256i k16 = _mm256_set1_epi8(16);
    lo = _mm256_mask_add_epi8(lo, mlo, lo, k16);
    hi = _mm256_mask_add_epi8(hi, mhi, hi, k16);
  }
}

// The f16 pairs at the start of block b of the 16 rows (byte offsets idx
// from w): d in the low half, (Q4_1 / Q5_1) m in the high half.
template <class W>
inline __m512i row_heads(const uint8_t* w, __m512i idx, int64_t b) {
  return _mm512_i32gather_epi32(idx, w + static_cast<size_t>(b) * sizeof(typename W::Block), 1);
}

// acc (lane r = row r) += block b of the 16 rows: sums s (lane r = isum_b of
// row r), weight block heads h, activation block xb.
template <class W>
inline void block_fma(__m512i s, __m512i h, const typename W::XBlock& xb, __m512& acc) {
  const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(simd::load_f16(xb.d))), acc);
  if constexpr (W::kMin) {
    const __m512 m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
    acc = _mm512_fmadd_ps(m, _mm512_set1_ps(simd::load_f16(xb.s)), acc);
  }
}

// acc (lane r = row r) += blocks b and, if kTwo, b + 1 of the 16 rows wr.
// Per row one ymm holds the quants of both blocks: its low nibbles meet
// [x_b[0:16] | x_b+1[0:16]] and its high nibbles [x_b[16:32] | x_b+1[16:32]],
// accumulated by two vpdpbusd into 4 lane sums per block, seeded with
// -kOffset * sum4 of both activation parts (shared by the rows). Not
// inlined: inlined into the block loop it measured ~20% slower on weights
// streaming from DRAM (GCC 12 schedules the loop worse).
template <class W, bool kTwo>
__attribute__((noinline)) void pair_step(const typename W::Block* const wr[kR], const uint8_t* w, __m512i idx,
                      const typename W::XBlock* x, int64_t b, __m512& acc) {
  const __m256i xa = loadu(x[b].qs), xb = kTwo ? loadu(x[b + 1].qs) : _mm256_setzero_si256();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ylo = _mm256_permute2x128_si256(xa, xb, 0x20), yhi = _mm256_permute2x128_si256(xa, xb, 0x31);
  __m256i seed = _mm256_setzero_si256();
  if constexpr (W::kOffset != 0) {
    const __m256i k = _mm256_set1_epi8(static_cast<char>(W::kOffset));
    seed = _mm256_sub_epi32(seed, _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), k, ylo), k, yhi));
  }
  __m256i p[kR];
#pragma GCC unroll 16
  for (int r = 0; r < kR; ++r) {
    __m256i lo, hi;
    quants2<W, kTwo>(wr[r][b], wr[r][b + kTwo], m4, lo, hi);
    p[r] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(seed, lo, ylo), hi, yhi);
  }
  __m512i s0, s1;
  reduce_rows(p, s0, s1);
  block_fma<W>(s0, row_heads<W>(w, idx, b), x[b], acc);
  if constexpr (kTwo) block_fma<W>(s1, row_heads<W>(w, idx, b + 1), x[b + 1], acc);
}

// kR rows starting at w (rows `rs` bytes apart; row r clamped to nr - 1)
// into s[0:nr]. pf: the next group's bytes, a share per block pair.
template <class W>
void group_rows(int64_t nb, float* s, const uint8_t* w, size_t rs, const typename W::XBlock* x, int nr,
                lanes::GroupPrefetch& pf) {
  using WB = typename W::Block;
  const WB* wr[kR];
  alignas(64) int32_t ofs[kR];
  for (int r = 0; r < kR; ++r) {
    ofs[r] = static_cast<int32_t>(static_cast<size_t>(std::min(r, nr - 1)) * rs);
    wr[r] = reinterpret_cast<const WB*>(w + ofs[r]);
  }
  const __m512i idx = _mm512_load_si512(ofs);
  const int64_t nb2 = nb & ~int64_t{1};
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb2; b += 2) {
    pf.step();
    pair_step<W, true>(wr, w, idx, x, b, acc);
  }
  if (nb2 < nb) pair_step<W, false>(wr, w, idx, x, nb2, acc);  // odd block count: the last block alone
  pf.finish();
  _mm512_mask_storeu_ps(s, static_cast<__mmask16>((1u << nr) - 1), acc);
}

template <class W>
void rows_dispatch(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const typename W::XBlock*>(x);
  const int64_t nb = n / kQK;
  for (int64_t r = 0; r < nr; r += kR) {
    const int64_t rows = std::min<int64_t>(kR, nr - r);
    const uint8_t* g = wb + static_cast<size_t>(r) * w_row_bytes;
    // Prefetch the group after this one (within this call's rows).
    auto pf = lanes::next_group_prefetch<kR>(wb, w_row_bytes, r, nr, nb / 2);
    group_rows<W>(nb, s + r, g, w_row_bytes, xb, static_cast<int>(rows), pf);
  }
}

}  // namespace

void q4_0_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_dispatch<DecodeQ4_0>(n, s, w, w_row_bytes, x, nr);
}

void q8_0_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_dispatch<DecodeQ8_0>(n, s, w, w_row_bytes, x, nr);
}

void q4_1_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_dispatch<DecodeQ4_1>(n, s, w, w_row_bytes, x, nr);
}

void q5_1_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_dispatch<DecodeQ5_1>(n, s, w, w_row_bytes, x, nr);
}

}  // namespace ember::avx512
