// Decode of the sparse int8 weights (kSQ8 | C, quant/sparse.h) x Q8_0
// activations at the AVX-512 level with VBMI2 (the registry installs it only
// where the CPU has it): KernelSet::vec_dot_rows, one token over many rows.
// Bits equal the scalar twin (kernels/ref/sq8_dot.cpp, contract in
// kernels/ref/dot.h) and so vec_dot and every batch size.
//
// Decode streams the weights once per token, so the work per 64-input block
// of a row must stay under the time its bytes take to arrive (about 47 bytes
// at 50% sparsity, 34 at 70%). Everything that does not depend on the row
// is hoisted out of the block loop:
//   - the activation side is prepared once per call (PreparedX, on the
//     stack; in chunks of kPrepBlocks blocks per group where n is larger):
//     each block pair's 64 quants in one aligned zmm, the seed
//     -128 * sum4(x) per lane, and the activation scales as f32;
//   - the scale products dw * dx of 8 blocks of a row are formed at once
//     (one vcvtph2ps and one vmulps per row and 8 blocks) and laid out by
//     two vpermps so that each block's spread (its half-0 product in lanes
//     0-7, half-1 in 8-15) is one in-lane vpermilps with an immediate: on
//     Zen 5 vpermps shares the two shuffle pipes with vpexpandb (2 slots)
//     and the mask's kmov, vpermilps-immediate runs on four pipes.
// What is left per row and block: the mask (kmov + popcnt), one load of the
// packed values, vpexpandb under the mask (register form: the load is
// inline asm so that the compiler cannot fold it into the memory form,
// microcoded on Zen 4), xor 0x80 (u = w + 128, not kept: 128),
// vpdpbusd(seed, u, x) = the exact int32 lane sums, vcvtdq2ps, vpermilps,
// one fma.
//
// Memory: the rows of a group are read as 3 x kRows streams (masks, scales,
// values) at once, but prefetched as one sequential stream: the bytes
// kAheadBytes (at least one group) in front of the group being computed,
// spread over its blocks (lanes::GroupPrefetch), so that the later rows of
// a group are in L2 when the group starts (a stream one group ahead asked
// for the last row of the next group at the end of this one). Value loads
// are plain 64-byte loads (they may read into the next row) except where
// that could leave the call's rows: the call's last row, and every row when
// rows are shorter than a 64-byte load (nb * 12 < 64); those use a
// fault-suppressed masked load of exactly the kept bytes.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"
#include "quant/sparse.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside their
// intrinsics (the "undefined" passthrough operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kRows = 4;          // rows sharing one pass over the prepared activations
constexpr int kPrepBlocks = 256;  // 64-input blocks prepared at once (n <= 16384: once per call)
constexpr size_t kAheadBytes = 16384;  // prefetch distance in bytes (whole groups, at least one)

// The activations of blocks [b0, b0 + kPrepBlocks) (Q8_0 blocks 2b, 2b + 1
// each): 34 KiB, lives on the caller's stack.
struct PreparedX {
  alignas(64) int8_t q[kPrepBlocks][kSparseBlock];  // the quants of the pair, in input order
  alignas(64) int32_t seed[kPrepBlocks][16];        // -128 * (sum of 4 consecutive quants) per lane
  alignas(64) float d[2 * kPrepBlocks];             // f32 activation scale per 32 inputs
};

void prepare(PreparedX& p, const BlockQ8_0* xb, int64_t b0, int64_t b1) {
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t b = b0; b < b1; ++b) {
    const BlockQ8_0& x0 = xb[2 * b];
    const BlockQ8_0& x1 = xb[2 * b + 1];
    const __m512i x =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qs))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qs)), 1);
    const int64_t i = b - b0;
    _mm512_store_si512(p.q[i], x);
    _mm512_store_si512(p.seed[i], _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k80, x)));
    p.d[2 * i] = simd::load_f16(x0.d);
    p.d[2 * i + 1] = simd::load_f16(x1.d);
  }
}

// A plain 64-byte load of a block's packed values, in a register: inline
// asm, so the compiler cannot fold it into vpexpandb's memory form.
inline __m512i load_values(const int8_t* p) {
  __m512i v;
  asm("vmovdqu8 %1, %0" : "=v"(v) : "m"(*reinterpret_cast<const char(*)[64]>(p)));
  return v;
}

// The contract's reduction: i + 8, i + 4, i + 2, then lanes 0 + 1.
// R rows (R <= kRows) at w0, `rb` bytes apart, over all nb blocks into
// s[0:R]. Rows i >= kMaskedFrom load their values with masked loads.
// prepared: px holds all nb blocks (nb <= kPrepBlocks); else each chunk of
// kPrepBlocks blocks is prepared here.
template <int R, int kMaskedFrom>
void group(int64_t nb, float* s, const uint8_t* w0, size_t rb, const BlockQ8_0* xb, PreparedX& px, bool prepared,
           lanes::GroupPrefetch& pf) {
  const int8_t* v[R];
  const uint8_t* masks[R];
  const uint8_t* scales[R];
  __m512 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const SparseRow r = sparse_row(w0 + i * rb, nb * kSparseBlock);
    v[i] = r.values, masks[i] = r.masks, scales[i] = r.scales;
    acc[i] = _mm512_setzero_ps();
  }
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  // Block b (px index pb) of the R rows; spread(i): row i's scale products
  // for the block's lanes.
  auto block = [&](int64_t b, int64_t pb, auto spread) {
    pf.step();
    const __m512i x = _mm512_load_si512(px.q[pb]);
    const __m512i seed = _mm512_load_si512(px.seed[pb]);
    // Unrolled: the row states stay in registers.
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      uint64_t m;
      std::memcpy(&m, masks[i] + b * 8, 8);
      const int kept = std::popcount(m);
      const __m512i packed = i >= kMaskedFrom
                                 ? _mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t{0}, static_cast<unsigned>(kept)), v[i])
                                 : load_values(v[i]);
      v[i] += kept;
      const __m512i u = _mm512_xor_si512(_mm512_maskz_expand_epi8(m, packed), k80);
      const __m512i isum = _mm512_dpbusd_epi32(seed, u, x);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), spread(i), acc[i]);
    }
  };
  // Lanes of the 8-block products sc (lane 2j + h): lo holds blocks 0-3 as
  // [h0 of j = 0..3] x 2, [h1 of j = 0..3] x 2 (128-bit lanes), hi blocks 4-7.
  const __m512i lo_idx = _mm512_set_epi32(7, 5, 3, 1, 7, 5, 3, 1, 6, 4, 2, 0, 6, 4, 2, 0);
  const __m512i hi_idx = _mm512_set_epi32(15, 13, 11, 9, 15, 13, 11, 9, 14, 12, 10, 8, 14, 12, 10, 8);
  const __m512i lane_half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t c0 = 0; c0 < nb; c0 += kPrepBlocks) {
    const int64_t c1 = std::min(nb, c0 + kPrepBlocks);
    if (!prepared) prepare(px, xb, c0, c1);
    for (int64_t c = c0; c < c1; c += 8) {
      const int cnt = static_cast<int>(std::min<int64_t>(8, c1 - c));
      const int64_t pc = c - c0;  // index into px
      const auto km = static_cast<__mmask16>((1u << (2 * cnt)) - 1);
      const __m512 dx = _mm512_maskz_load_ps(km, px.d + 2 * pc);
      __m512 sc[R];  // sc[i] lane 2j + h: dw * dx of row i, block c + j, half h
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i)
        sc[i] = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, scales[i] + c * 4)), dx);
      if (cnt == 8) {
        __m512 lo[R], hi[R];
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          lo[i] = _mm512_permutexvar_ps(lo_idx, sc[i]);
          hi[i] = _mm512_permutexvar_ps(hi_idx, sc[i]);
        }
        // The 8 blocks unrolled: block j's spread is an in-lane broadcast of element j % 4.
        [&]<int... J>(std::integer_sequence<int, J...>) {
          (block(c + J, pc + J,
                 [&](int i) { return _mm512_permute_ps(J < 4 ? lo[i] : hi[i], (J % 4) * 0x55); }),
           ...);
        }(std::make_integer_sequence<int, 8>{});
        continue;
      }
      for (int j = 0; j < cnt; ++j) {
        const __m512i idx = _mm512_add_epi32(lane_half, _mm512_set1_epi32(2 * j));
        block(c + j, pc + j, [&](int i) { return _mm512_permutexvar_ps(idx, sc[i]); });
      }
    }
  }
  pf.finish();
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) s[i] = f512::reduce(acc[i]);
}

// The call's last group of R rows (masked loads from row kFrom on).
template <int R>
void last_group(bool all_masked, int64_t nb, float* s, const uint8_t* w0, size_t rb, const BlockQ8_0* xb,
                PreparedX& px, bool prepared, lanes::GroupPrefetch& pf) {
  if (all_masked)
    group<R, 0>(nb, s, w0, rb, xb, px, prepared, pf);
  else
    group<R, R - 1>(nb, s, w0, rb, xb, px, prepared, pf);
}

}  // namespace

void sq8_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* wp = static_cast<const uint8_t*>(w);
  const int64_t nb = n / kSparseBlock;
  PreparedX px;
  const bool prepared = nb <= kPrepBlocks;
  if (prepared) prepare(px, xb, 0, nb);
  // A plain 64-byte load from a block's values stays inside the next row
  // when a row's masks and scales alone are 64 bytes or more.
  const bool short_rows = nb * 12 < 64;
  // The prefetch stream: `ahead` bytes in front of the group being computed
  // (whole groups, at least one), within the call's rows; the call's first
  // `ahead` bytes at its start.
  const size_t gb = kRows * w_row_bytes, end = static_cast<size_t>(nr) * w_row_bytes;
  const size_t ahead = std::max<size_t>(1, kAheadBytes / gb) * gb;
  for (size_t o = 0; o < std::min(end, ahead); o += 64) lanes::prefetch_line<false>(wp + o);
  for (int64_t r0 = 0; r0 < nr; r0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, nr - r0);
    const uint8_t* g = wp + static_cast<size_t>(r0) * w_row_bytes;
    const size_t p0 = std::min(end, static_cast<size_t>(r0) * w_row_bytes + ahead), p1 = std::min(end, p0 + gb);
    lanes::GroupPrefetch pf(p1 > p0 ? wp + p0 : nullptr, p1 - p0, nb);
    if (r0 + kRows < nr) {
      if (short_rows)
        group<kRows, 0>(nb, s + r0, g, w_row_bytes, xb, px, prepared, pf);
      else
        group<kRows, kRows>(nb, s + r0, g, w_row_bytes, xb, px, prepared, pf);
      continue;
    }
    static_assert(kRows == 4);
    switch (rows) {
      case 1: last_group<1>(short_rows, nb, s + r0, g, w_row_bytes, xb, px, prepared, pf); break;
      case 2: last_group<2>(short_rows, nb, s + r0, g, w_row_bytes, xb, px, prepared, pf); break;
      case 3: last_group<3>(short_rows, nb, s + r0, g, w_row_bytes, xb, px, prepared, pf); break;
      default: last_group<4>(short_rows, nb, s + r0, g, w_row_bytes, xb, px, prepared, pf); break;
    }
  }
}

}  // namespace ember::avx512
