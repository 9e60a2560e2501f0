// AVX-512 VNNI "row lanes" kernels for the legacy weight types Q4_0, Q5_0,
// Q8_0 x Q8_0 activations and Q4_1, Q5_1 x Q8_1 activations: vec_dot,
// vec_dot_rows (decode; Q4_0 / Q4_1 / Q5_1 ones are in
// avx512/legacy_rows.cpp) and the tile kernel (kLegacyTileRows = 32 weight
// rows x up to kLegacyTileCols tokens). Q8_0 is the tied
// token embedding / output head (the largest matrix of small models), Q5_0
// most of the Gemma 3 body in Q4_K_M files and Q4_0 the whole of Q4_0 files,
// so these kernels set the batched speed of those models.
//
// Arithmetic (the contract of all kernels for these types at this level,
// hence batch-invariant):
//   acc = 0;  for each block b in order:
//     acc = fma(float(isum_b), d_w[b] * d_x[b], acc)
//     acc = fma(m_w[b], s_x[b], acc)          (Q4_1 / Q5_1 only)
// where isum_b = sum of the 32 products w_i * x_i of the integer weights
// (Q8_0 quants; Q5_0 quants - 16; Q4_0 nibbles - 8; Q4_1 / Q5_1 quants as
// stored) and activation quants: exact int32, so float(isum_b) is exact
// (|isum_b| <= 32 * 128 * 127 < 2^24); m_w is the weight block's min and
// s_x the Q8_1 block's s (= d * sum of its quants). This differs from the
// AVX2 / scalar levels (8-lane partial sums per block) only by float
// rounding; every kernel here reproduces it bit for bit
// (tests/kernels/legacy_lanes_test.cpp checks them against a scalar model of
// exactly these steps).
//
// Why this form: one output per zmm lane. A tile unpacks and transposes its
// 16 weight rows block by block so that dword k of row r sits in lane r of
// vector k; one vpdpbusd per 4 bytes then advances 16 rows at once for a
// token, with no horizontal sums, and the per-block float work (convert,
// scale, fma) is one instruction each for 16 outputs. vpdpbusd multiplies
// u8 x s8: the activation bytes are made unsigned (x ^ 0x80 = x + 128) and
// the weights stay signed, so each lane gets sum(w * x) + 128 * sum(w); the
// second term is computed once per row block (at transpose time) and seeds
// the sum. (For Q4_0 the other assignment, nibbles unsigned and activations
// signed with a -8 * sum(x) seed per token and block, needs the same work per
// token: a seed per token instead of one per row block.) Q4_1 / Q5_1 add
// one fma per block and token with the 16 rows' mins. A tile call holds two
// such sets of 16 rows: preparing a token group's activations (x ^ 0x80,
// scales) is then shared by 32 rows (measured 10-18% faster than 16-row
// tiles at 512 tokens). vec_dot and decode
// use that other assignment (unsigned weights, seed -offset * sum4(x)
// prepared once per call). Decode (one token) walks the rows sequentially
// (two at a time for rows of up to 20 blocks, one at a time above: see
// lanes_decode): weights then stream from memory and the hardware
// prefetchers keep up; Q5_0 decode uses it. Q4_0, Q4_1, Q5_1 and Q8_0
// decode use a 16-row group kernel instead (avx512/legacy_rows.cpp, same
// arithmetic): with their short blocks the per-row work of this walk
// dominates (Q4_0: measured 30-45% slower than the group kernel; Q8_0 on
// an AMD EPYC VM, one thread from DRAM: 4.5-5 GB/s at rows of 640 and
// 22-25 GB/s at 2048 against 27-40 and 30-34 for the group kernel, 2026-12-03;
// Q5_0 in the group form, with its fifth-bit masked adds, measured ~20% slower).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kR = 16;                      // weight rows per set (one per zmm lane)
constexpr int kSets = kLegacyTileRows / kR;   // row sets per tile
constexpr int kChunk = 32 / kSets;          // blocks transposed at a time per set (~20 KB, stays in L1)
constexpr int kGroup = 8;                   // tokens per register group
static_assert(kSets * kR == kLegacyTileRows, "tile rows: whole sets of 16");

// One block of 16 weight rows, transposed (the rows' mins, for types with
// one, are kept apart so the other types' packed chunk stays small).
struct alignas(64) PackedBlock {
  __m512i w[8];  // w[k] lane r = signed quants 4k .. 4k+3 of row r
  __m512i seed;  // -128 * sum(quants of row r) per lane
  __m512 d;      // row scales
};

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weight formats: the 32 signed weights of a block (quants - offset) as
// bytes, and the same plus kOffset (unsigned) for vec_dot. XBlock: the
// activation block type; kMin: blocks carry a min m (weight = d * q + m) and
// the activations their s = d * sum(quants).
struct LanesQ8_0 {
  using Block = BlockQ8_0;
  using XBlock = BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 128;
  static __m256i signed_q(const Block& b) { return loadu(b.qs); }
  static __m256i unsigned_q(const Block& b) { return _mm256_xor_si256(loadu(b.qs), _mm256_set1_epi8(-128)); }
};

struct LanesQ5_0 {
  using Block = BlockQ5_0;
  using XBlock = BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 16;
  static __m256i unsigned_q(const Block& b) {
    const __m256i nib = simd::unpack_nibbles_16(b.qs);
    return _mm256_mask_add_epi8(nib, simd::load_u32(b.qh), nib, _mm256_set1_epi8(16));
  }
  static __m256i signed_q(const Block& b) { return _mm256_sub_epi8(unsigned_q(b), _mm256_set1_epi8(16)); }
};

// Q4_0: the nibbles are the unsigned quants (weight = nibble - 8).
struct LanesQ4_0 {
  using Block = BlockQ4_0;
  using XBlock = BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 8;
  static __m256i unsigned_q(const Block& b) { return simd::unpack_nibbles_16(b.qs); }
  static __m256i signed_q(const Block& b) { return _mm256_sub_epi8(unsigned_q(b), _mm256_set1_epi8(8)); }
};

// Q4_1 / Q5_1: unsigned quants 0..15 / 0..31 are the weights (no offset).
struct LanesQ4_1 {
  using Block = BlockQ4_1;
  using XBlock = BlockQ8_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static __m256i unsigned_q(const Block& b) { return simd::unpack_nibbles_16(b.qs); }
  static __m256i signed_q(const Block& b) { return unsigned_q(b); }
};

struct LanesQ5_1 {
  using Block = BlockQ5_1;
  using XBlock = BlockQ8_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static __m256i unsigned_q(const Block& b) {
    const __m256i nib = simd::unpack_nibbles_16(b.qs);
    return _mm256_mask_add_epi8(nib, simd::load_u32(b.qh), nib, _mm256_set1_epi8(16));
  }
  static __m256i signed_q(const Block& b) { return unsigned_q(b); }
};

// f16 field at byte offset `off` of a block (d at 0; m / s at 2).
inline uint16_t f16_at(const void* block, size_t off) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(block) + off, sizeof(h));
  return h;
}

template <class W>
inline const typename W::Block& block_at(const uint8_t* row, int64_t b) {
  return reinterpret_cast<const typename W::Block*>(row)[b];
}

// Signed weights of block b of rows a and c in the lower / upper 256 bits.
template <class W>
inline __m512i rows2(const uint8_t* a, const uint8_t* c, int64_t b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(W::signed_q(block_at<W>(a, b))), W::signed_q(block_at<W>(c, b)), 1);
}

// Transposes block b of the 16 rows (row r starts at rows[r]) into pb.
template <class W>
inline void pack_block(const uint8_t* const rows[kR], int64_t b, PackedBlock& pb, __m512& mins) {
  __m512i xa[4], xb[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    // z = [row i | row i+4], v = [row i+8 | row i+12] (128-bit lanes A = dwords
    // 0..3, B = dwords 4..7 of each row).
    const __m512i z = rows2<W>(rows[i], rows[i + 4], b);
    const __m512i v = rows2<W>(rows[i + 8], rows[i + 12], b);
    xa[i] = _mm512_shuffle_i32x4(z, v, _MM_SHUFFLE(2, 0, 2, 0));  // [iA, (i+4)A, (i+8)A, (i+12)A]
    xb[i] = _mm512_shuffle_i32x4(z, v, _MM_SHUFFLE(3, 1, 3, 1));  // same for B
  }
  // 4 x 4 dword transposes inside each 128-bit lane: lane L, element e of
  // output k is dword k of row 4L + e, i.e. zmm dword index = row.
  const __m512i t0 = _mm512_unpacklo_epi32(xa[0], xa[1]), t1 = _mm512_unpackhi_epi32(xa[0], xa[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(xa[2], xa[3]), t3 = _mm512_unpackhi_epi32(xa[2], xa[3]);
  const __m512i u0 = _mm512_unpacklo_epi32(xb[0], xb[1]), u1 = _mm512_unpackhi_epi32(xb[0], xb[1]);
  const __m512i u2 = _mm512_unpacklo_epi32(xb[2], xb[3]), u3 = _mm512_unpackhi_epi32(xb[2], xb[3]);
  pb.w[0] = _mm512_unpacklo_epi64(t0, t2);
  pb.w[1] = _mm512_unpackhi_epi64(t0, t2);
  pb.w[2] = _mm512_unpacklo_epi64(t1, t3);
  pb.w[3] = _mm512_unpackhi_epi64(t1, t3);
  pb.w[4] = _mm512_unpacklo_epi64(u0, u2);
  pb.w[5] = _mm512_unpackhi_epi64(u0, u2);
  pb.w[6] = _mm512_unpacklo_epi64(u1, u3);
  pb.w[7] = _mm512_unpackhi_epi64(u1, u3);
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i c0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, pb.w[0]);
  __m512i c1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, pb.w[1]);
#pragma GCC unroll 3
  for (int k = 2; k < 8; k += 2) {
    c0 = _mm512_dpbusd_epi32(c0, k128, pb.w[k]);
    c1 = _mm512_dpbusd_epi32(c1, k128, pb.w[k + 1]);
  }
  pb.seed = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(c0, c1));
  // Scales: the 16 rows' f16 d of block b (scalar loads: vpgatherdd measured
  // slower).
  alignas(32) uint16_t d[kR];
  for (int r = 0; r < kR; ++r) d[r] = block_at<W>(rows[r], b).d;
  const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(d));
  pb.d = _mm512_cvtph_ps(h);
  if constexpr (W::kMin) {
    alignas(32) uint16_t m[kR];
    for (int r = 0; r < kR; ++r) m[r] = block_at<W>(rows[r], b).m;
    mins = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m)));
  }
}

// Activations of one token group for one chunk: unsigned quants (x ^ 0x80),
// float scales and (Q8_1) float s.
struct TokenChunk {
  alignas(64) uint8_t xu[kGroup][kChunk][32];
  float dx[kGroup][kChunk];
  float sx[kGroup][kChunk];
};

// acc[t] += blocks [0, nblk) of the packed chunk x token t (t < NT).
template <bool kMin, int NT>
inline void group_chunk(const PackedBlock* pk, const __m512* pm, int nblk, const TokenChunk& tc, __m512 acc[NT]) {
  for (int b = 0; b < nblk; ++b) {
    const PackedBlock& pb = pk[b];
    __m512i p[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) p[t] = pb.seed;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i wk = pb.w[k];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        int32_t xv;
        std::memcpy(&xv, &tc.xu[t][b][4 * k], sizeof(xv));
        p[t] = _mm512_dpbusd_epi32(p[t], _mm512_set1_epi32(xv), wk);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[t]), _mm512_mul_ps(pb.d, _mm512_set1_ps(tc.dx[t][b])), acc[t]);
    if constexpr (kMin) {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(pm[b], _mm512_set1_ps(tc.sx[t][b]), acc[t]);
    }
  }
}

template <class XB>
inline void prepare_tokens(const XB* const xt[kGroup], int nt, int64_t b0, int nblk, TokenChunk& tc) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int t = 0; t < nt; ++t) {
    const XB* x = xt[t] + b0;
    for (int b = 0; b < nblk; ++b) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(tc.xu[t][b]), _mm256_xor_si256(loadu(x[b].qs), flip));
      tc.dx[t][b] = simd::load_f16(x[b].d);
      if constexpr (std::is_same_v<XB, BlockQ8_1>) tc.sx[t][b] = simd::load_f16(f16_at(&x[b], 2));
    }
  }
}

// Runs one token group (nt tokens, computed as NT) over a chunk.
template <bool kMin>
inline void run_group(int nt, const PackedBlock* pk, const __m512* pm, int nblk, const TokenChunk& tc,
                      __m512 acc[kGroup]) {
  if (nt > 4) {
    group_chunk<kMin, 8>(pk, pm, nblk, tc, acc);
  } else if (nt > 2) {
    group_chunk<kMin, 4>(pk, pm, nblk, tc, acc);
  } else if (nt == 2) {
    group_chunk<kMin, 2>(pk, pm, nblk, tc, acc);
  } else {
    group_chunk<kMin, 1>(pk, pm, nblk, tc, acc);
  }
}

// s[c * lds + r] for r < nr (<= kLegacyTileRows), c < nc (<= kLegacyTileCols):
// the rows in sets of 16 (one row per zmm lane); each token group's
// activations are prepared once per chunk for all sets. pf / pf_bytes:
// memory to prefetch while computing (may be null).
template <class W>
void tile_lanes(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                size_t x_row_bytes, int nr, int nc, const uint8_t* pf, size_t pf_bytes) {
  const int nsets = (nr + kR - 1) / kR;
  const uint8_t* rows[kSets][kR];
  __mmask16 row_mask[kSets];
  for (int st = 0; st < kSets; ++st) {
    for (int r = 0; r < kR; ++r) rows[st][r] = w + static_cast<size_t>(std::min(kR * st + r, nr - 1)) * w_row_bytes;
    const int cnt = std::clamp(nr - kR * st, 0, kR);
    row_mask[st] = static_cast<__mmask16>((1u << cnt) - 1);
  }
  const int64_t nb = n / kQK;
  const int ngroups = (nc + kGroup - 1) / kGroup;
  const int64_t nchunks = (nb + kChunk - 1) / kChunk;
  const int64_t pf_lines = static_cast<int64_t>((pf_bytes + 63) / 64);
  const int64_t packs = nb * nsets;  // pack_block calls in all
  int64_t pf_done = 0;
  PackedBlock pk[kSets][kChunk];
  __m512 pm[kSets][kChunk];  // row mins (types with a min)
  TokenChunk tc;
  __m512 saved[kSets][kLegacyTileCols];

  for (int64_t ch = 0; ch < std::max<int64_t>(nchunks, 1); ++ch) {
    const int64_t b0 = ch * kChunk;
    const int nblk = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
    for (int st = 0; st < nsets; ++st) {
      for (int b = 0; b < nblk; ++b) {
        pack_block<W>(rows[st], b0 + b, pk[st][b], pm[st][b]);
        if (pf) {
          const int64_t end = std::min(pf_lines, pf_lines * (b0 * nsets + st * nblk + b + 1) / packs);
          // Into L2: an L1 prefetch of a whole tile would evict this tile's
          // packed blocks (measured 20% slower).
          for (; pf_done < end; ++pf_done) _mm_prefetch(reinterpret_cast<const char*>(pf + pf_done * 64), _MM_HINT_T1);
        }
      }
    }
    const bool first = ch == 0, last = ch + 1 >= nchunks;
    for (int g = 0; g < ngroups; ++g) {
      const int nt = std::min(kGroup, nc - kGroup * g);
      using XB = typename W::XBlock;
      const XB* xt[kGroup];
      for (int t = 0; t < kGroup; ++t)
        xt[t] = reinterpret_cast<const XB*>(x + static_cast<size_t>(kGroup * g + std::min(t, nt - 1)) * x_row_bytes);
      if (nblk > 0) prepare_tokens(xt, nt > 4 ? 8 : nt > 2 ? 4 : nt, b0, nblk, tc);  // as many as run_group computes
      for (int st = 0; st < nsets; ++st) {
        __m512 acc[kGroup];
        for (int t = 0; t < kGroup; ++t) acc[t] = first ? _mm512_setzero_ps() : saved[st][kGroup * g + t];
        if (nblk > 0) run_group<W::kMin>(nt, pk[st], pm[st], nblk, tc, acc);
        if (last) {
          for (int t = 0; t < nt; ++t)
            _mm512_mask_storeu_ps(s + (kGroup * g + t) * lds + kR * st, row_mask[st], acc[t]);
        } else {
          for (int t = 0; t < kGroup; ++t) saved[st][kGroup * g + t] = acc[t];
        }
      }
    }
  }
}

// ---- vec_dot and decode ----
//
// 8 blocks at a time: their lane sums reduced together (exact integer adds,
// any order), then the fma chain in block order. The activation side (the
// -offset * sum4(x) seeds and the f32 scales) is prepared once per call for
// all rows, in chunks of kPrep blocks.

constexpr int kPrep = 256;
constexpr int64_t kTwoRowMaxBlocks = 20;  // decode: longest rows walked two at a time

struct XPrep {
  __m256i seed[kPrep];          // -kOffset * sum4(x) per i32 lane, block b0 + i
  alignas(32) float dx[kPrep];  // activation scales
  alignas(32) float sx[kPrep];  // Q8_1 s (types with a min)
};

template <class W>
inline void prep_x(const typename W::XBlock* x, int64_t b0, int64_t cn, XPrep& xp) {
  const __m256i off = _mm256_set1_epi8(static_cast<char>(W::kOffset));
  for (int64_t i = 0; i < cn; ++i) {
    const __m256i c = _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, loadu(x[b0 + i].qs));
    xp.seed[i] = _mm256_sub_epi32(_mm256_setzero_si256(), c);
    xp.dx[i] = simd::load_f16(x[b0 + i].d);
    if constexpr (W::kMin) xp.sx[i] = simd::load_f16(f16_at(&x[b0 + i], 2));
  }
}

// acc[r] over blocks [b0, b0 + cn) of rows wr[r] (r < R).
template <class W, int R>
inline void dot_chunk(const uint8_t* const wr[R], const typename W::XBlock* x, int64_t b0, int64_t cn,
                      const XPrep& xp, float acc[R]) {
  using WB = typename W::Block;
  int64_t i = 0;
  for (; i + 8 <= cn; i += 8) {
    alignas(32) float pf[R][8], sc[R][8], mw[R][8];
    const __m256 dx = _mm256_load_ps(xp.dx + i);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const WB* w = reinterpret_cast<const WB*>(wr[r]) + b0 + i;
      __m256i p[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k)
        p[k] = _mm256_dpbusd_epi32(xp.seed[i + k], W::unsigned_q(w[k]), loadu(x[b0 + i + k].qs));
      __m256i q[4];  // q[j] = [sums4(2j) | sums4(2j + 1)]
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
        q[j] = _mm256_add_epi32(_mm256_permute2x128_si256(p[2 * j], p[2 * j + 1], 0x20),
                                _mm256_permute2x128_si256(p[2 * j], p[2 * j + 1], 0x31));
      // hadd twice: lanes hold blocks [0, 2, 4, 6, 1, 3, 5, 7]; back to order.
      const __m256i f = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
      _mm256_store_ps(pf[r],
                      _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(f, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))));
      _mm256_store_ps(sc[r],
                      _mm256_mul_ps(simd::load_f16_scales8(reinterpret_cast<const uint8_t*>(w), sizeof(WB)), dx));
      if constexpr (W::kMin)
        _mm256_store_ps(mw[r], simd::load_f16_scales8(reinterpret_cast<const uint8_t*>(w) + 2, sizeof(WB)));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        acc[r] = std::fma(pf[r][k], sc[r][k], acc[r]);
        if constexpr (W::kMin) acc[r] = std::fma(mw[r][k], xp.sx[i + k], acc[r]);
      }
    }
  }
  for (; i < cn; ++i) {
    const __m256i xs = loadu(x[b0 + i].qs);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const WB& w = reinterpret_cast<const WB*>(wr[r])[b0 + i];
      const int isum = simd::hsum_i32x8(_mm256_dpbusd_epi32(xp.seed[i], W::unsigned_q(w), xs));
      acc[r] = std::fma(static_cast<float>(isum), simd::load_f16(w.d) * xp.dx[i], acc[r]);
      if constexpr (W::kMin) acc[r] = std::fma(simd::load_f16(w.m), xp.sx[i], acc[r]);
    }
  }
}

template <class W>
float lanes_dot(int64_t n, const void* w, const void* vx) {
  const auto* x = static_cast<const typename W::XBlock*>(vx);
  const int64_t nb = n / kQK;
  const uint8_t* wr[1] = {static_cast<const uint8_t*>(w)};
  XPrep xp;
  float acc[1] = {0.0f};
  for (int64_t b0 = 0; b0 < nb; b0 += kPrep) {
    const int64_t cn = std::min<int64_t>(kPrep, nb - b0);
    prep_x<W>(x, b0, cn, xp);
    dot_chunk<W, 1>(wr, x, b0, cn, xp, acc);
  }
  return acc[0];
}

// s[r] = vec_dot(row r, x) for r < nr.
template <class W>
void lanes_decode(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const void* vx, int64_t nr) {
  const auto* x = static_cast<const typename W::XBlock*>(vx);
  const int64_t nb = n / kQK;
  if (nb > kPrep) {
    for (int64_t r = 0; r < nr; ++r) s[r] = lanes_dot<W>(n, w + static_cast<size_t>(r) * w_row_bytes, x);
    return;
  }
  XPrep xp;
  prep_x<W>(x, 0, nb, xp);
  // Short rows (up to 20 blocks, e.g. Gemma 3 270M's 640): two rows at a
  // time, so two fma chains overlap (measured ~15% faster end to end there).
  // Longer rows: one at a time; two measured 2-3x slower on DRAM-resident
  // matrices with rows of 24+ blocks (768+ elements).
  int64_t r = 0;
  for (; nb <= kTwoRowMaxBlocks && r + 2 <= nr; r += 2) {
    const uint8_t* wr[2] = {w + static_cast<size_t>(r) * w_row_bytes, w + static_cast<size_t>(r + 1) * w_row_bytes};
    float acc[2] = {0.0f, 0.0f};
    dot_chunk<W, 2>(wr, x, 0, nb, xp, acc);
    s[r] = acc[0];
    s[r + 1] = acc[1];
  }
  for (; r < nr; ++r) {
    const uint8_t* wr[1] = {w + static_cast<size_t>(r) * w_row_bytes};
    float acc[1] = {0.0f};
    dot_chunk<W, 1>(wr, x, 0, nb, xp, acc);
    s[r] = acc[0];
  }
}

template <class W>
void lanes_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
                int nr, int nc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  // A full tile prefetches the next 16 rows (usually the caller's next tile;
  // prefetches never fault, so running past the matrix end is harmless):
  // 16 row streams at once defeat the hardware prefetchers.
  const size_t tile_bytes = static_cast<size_t>(kLegacyTileRows) * w_row_bytes;
  tile_lanes<W>(n, s, lds, wb, w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes, nr, nc,
                nr == kLegacyTileRows ? wb + tile_bytes : nullptr, tile_bytes);
}

}  // namespace

void q4_0_dot(int64_t n, float* s, const void* w, const void* x) { *s = lanes_dot<LanesQ4_0>(n, w, x); }

void q8_0_dot(int64_t n, float* s, const void* w, const void* x) { *s = lanes_dot<LanesQ8_0>(n, w, x); }

void q4_1_dot(int64_t n, float* s, const void* w, const void* x) { *s = lanes_dot<LanesQ4_1>(n, w, x); }

void q5_1_dot(int64_t n, float* s, const void* w, const void* x) { *s = lanes_dot<LanesQ5_1>(n, w, x); }

void q4_1_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  lanes_tile<LanesQ4_1>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

void q5_1_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  lanes_tile<LanesQ5_1>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

void q5_0_dot(int64_t n, float* s, const void* w, const void* x) { *s = lanes_dot<LanesQ5_0>(n, w, x); }

void q5_0_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  lanes_decode<LanesQ5_0>(n, s, static_cast<const uint8_t*>(w), w_row_bytes, x, nr);
}

void q4_0_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  lanes_tile<LanesQ4_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

void q8_0_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  lanes_tile<LanesQ8_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

void q5_0_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  lanes_tile<LanesQ5_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
