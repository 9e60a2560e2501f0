// Sparse weights (kSQ8 | C int8, kSQ4 | C 4-bit; quant/sparse.h) x Q8_0
// activations at the AVX-512 level, with VBMI2 (the registry installs these
// rows only where the CPU has it). Per block of 64 inputs: a load of the
// kept values (sq4: unpacked to one nibble a byte by vpmovzxbw + shift +
// vpternlogd), vpexpandb under the block's mask into unsigned bytes
// u = w + bias (bias 128 for int8, where u = w ^ 0x80; 8 for int4, where u
// is the stored level; not kept: u = bias), and vpdpbusd(-bias * sum4(x),
// u, x): the exact int32 lane sums of the contract in kernels/ref/dot.h
// (sum4(x) per lane is one vpdpbusd of the token's block with the bias,
// shared by every row); one fma per block into 16 f32 lanes.
// Decode (vec_dot, rows) expands each block for its one token; prefill
// (the tile, at the end) expands a tile's row blocks once for all its
// tokens. Bits equal the scalar twins (ref/sparse_dot.cpp) at every batch
// size.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

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

constexpr int kGroup = 4;  // rows sharing one pass over the activations

// The two value widths: the bytes a block's kept values take, and the block
// expanded as u = w + kBias. kMasked: a fault-suppressed load of exactly
// those bytes (never past them); else a plain load of 64 (int8) or 32
// (int4) bytes, for blocks known to have that many bytes after them.
struct Int8Values {
  static constexpr int kBias = 128;
  static int bytes(int kept) { return kept; }
  template <bool kMasked>
  static __m512i expand(uint64_t m, int kept, const uint8_t* v) {
    const __m512i packed = kMasked ? _mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t{0}, static_cast<unsigned>(kept)), v)
                                   : _mm512_loadu_si512(v);
    return _mm512_xor_si512(_mm512_maskz_expand_epi8(m, packed), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

struct Int4Values {
  static constexpr int kBias = 8;
  static int bytes(int kept) { return sq4_block_bytes(kept); }
  template <bool kMasked>
  static __m512i expand(uint64_t m, int kept, const uint8_t* v) {
    const __m256i packed =
        kMasked ? _mm256_maskz_loadu_epi8(static_cast<__mmask32>(_bzhi_u32(~0u, static_cast<unsigned>(bytes(kept)))), v)
                : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
    // Byte k -> word k; (word | word << 4) & 0x0F0F puts the low nibble in
    // byte 2k and the high one in byte 2k + 1: value order.
    const __m512i w = _mm512_cvtepu8_epi16(packed);
    const __m512i q = _mm512_ternarylogic_epi32(w, _mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x0F0F), 0xA8);
    return _mm512_mask_expand_epi8(_mm512_set1_epi8(kBias), m, q);
  }
};

// The activation block pair 2b, 2b+1 (Q8_0): x, -bias * sum4(x) per lane,
// and the scales spread over the 16 f32 lanes [dx0 x 8, dx1 x 8].
struct XBlock {
  __m512i x, neg_bias_sum;
  __m512 dx;
};

template <int kBias>
inline XBlock load_x(const BlockQ8_0* xb, int64_t b) {
  const BlockQ8_0& x0 = xb[2 * b];
  const BlockQ8_0& x1 = xb[2 * b + 1];
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qs));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qs));
  const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i bias_sum = _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(static_cast<char>(kBias)), x);
  const __m512 dx = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(x1.d)),
                                                      _mm_set1_epi16(static_cast<short>(x0.d))));
  return {x, _mm512_sub_epi32(zero, bias_sum), dx};
}

// The exact int32 lane sums of a block: sum over 4 of w * x.
inline __m512i lane_sums(const XBlock& x, __m512i u) { return _mm512_dpbusd_epi32(x.neg_bias_sum, u, x.x); }

// The contract's reduction: i + 8, i + 4, i + 2, then lanes 0 + 1.
// One group of R rows (R <= 4) over all blocks. Per row and block: the
// mask, the block expanded (kMasked: see Int8Values), the lane sums, the
// scale product and one fma. The weight scales of 8 blocks are converted at
// once (vcvtph2ps) and spread to the lanes by vpermps.
template <typename V, int R, bool kMasked>
void group(int64_t nb, float* s, const uint8_t* w0, size_t rb, const BlockQ8_0* xb, lanes::GroupPrefetch& pf) {
  const uint8_t* v[R];
  const uint8_t* masks[R];
  const uint8_t* scales[R];
  __m512 acc[R];
  for (int i = 0; i < R; ++i) {
    const SparseRow r = sparse_row(w0 + i * rb, nb * kSparseBlock);
    v[i] = reinterpret_cast<const uint8_t*>(r.values), masks[i] = r.masks, scales[i] = r.scales;
    acc[i] = _mm512_setzero_ps();
  }
  const __m512i lane_half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t c = 0; c < nb; c += 8) {
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - c));
    __m512 dw[R];  // dw[i] lane 2j + h: row i, block c + j, half h
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m256i h = cnt == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[i] + c * 4))
                                 : _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << (2 * cnt)) - 1),
                                                            scales[i] + c * 4);
      dw[i] = _mm512_cvtph_ps(h);
    }
    for (int j = 0; j < cnt; ++j) {
      const int64_t b = c + j;
      pf.step();
      const XBlock x = load_x<V::kBias>(xb, b);
      const __m512i idx = _mm512_add_epi32(lane_half, _mm512_set1_epi32(2 * j));
      // Unrolled: the row states stay in registers (rolled, GCC kept acc[]
      // and dw[] on the stack, a store-forwarding chain per block).
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        uint64_t m;
        std::memcpy(&m, masks[i] + b * 8, 8);
        const int pc = std::popcount(m);
        const __m512i u = V::template expand<kMasked>(m, pc, v[i]);
        v[i] += V::bytes(pc);
        const __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(idx, dw[i]), x.dx);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_sums(x, u)), sc, acc[i]);
      }
    }
  }
  pf.finish();
  for (int i = 0; i < R; ++i) s[i] = f512::reduce(acc[i]);
}

template <typename V>
void dot(int64_t n, float* s, const void* w, const void* x) {
  lanes::GroupPrefetch none(nullptr, 0, 0);
  group<V, 1, true>(n / kSparseBlock, s, static_cast<const uint8_t*>(w), 0, static_cast<const BlockQ8_0*>(x), none);
}

template <typename V>
void rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* wp = static_cast<const uint8_t*>(w);
  const int64_t nb = n / kSparseBlock;
  int64_t r0 = 0;
  // The next group's rows, one sequential prefetch stream (the hardware
  // prefetchers do not follow 4 rows x 3 regions: without it one thread
  // drew under 1 GB/s from DRAM). Plain value loads (up to 64 bytes past a
  // block's values) where a whole row follows whose masks and scales alone
  // cover them (nb >= 6); else, and in the call's last row, whose kept
  // values may end the mapping, masked loads.
  const bool plain = nb * 12 >= 64;
  for (; r0 + kGroup <= nr; r0 += kGroup) {
    auto pf = lanes::next_group_prefetch<kGroup>(wp, w_row_bytes, r0, nr, nb);
    if (plain && r0 + kGroup < nr)
      group<V, kGroup, false>(nb, s + r0, wp + r0 * w_row_bytes, w_row_bytes, xb, pf);
    else
      group<V, kGroup, true>(nb, s + r0, wp + r0 * w_row_bytes, w_row_bytes, xb, pf);
  }
  for (; r0 < nr; ++r0) dot<V>(n, s + r0, wp + r0 * w_row_bytes, x);
}

// ---- Prefill: the tile (vec_dot_tile), up to kSparseTileRows rows x
// kSparseTileCols tokens per call. Each row block is expanded once per call
// into a stack buffer and reused for every token (the activation side,
// load_x, is shared by the tile's rows). The rows are expanded kTileChunk
// blocks at a time (the buffer stays in L1 whatever n is); the f32 lanes
// of every (row, token) pair live in a stack array between chunks and in
// registers within one. The arithmetic of group<> in the same block order:
// the same bits.
constexpr int kTileChunk = 16;  // blocks expanded per pass

struct TileRows {
  alignas(64) uint8_t u[kSparseTileRows][kTileChunk][kSparseBlock];  // expanded, w + bias
  alignas(64) float dw[kSparseTileRows][kTileChunk][16];             // [dw0 x 8, dw1 x 8]
};

// R rows x T tokens over cnt expanded blocks: acc[c * kSparseTileRows + i]
// (token c of the call, row i) += the blocks' lanes.
template <int kBias, int R, int T>
inline void tile_pass(const TileRows& t, int cnt, const uint8_t* x, size_t xrb, int64_t c0, int tok, __m512* acc) {
  __m512 a[T][R];
  for (int c = 0; c < T; ++c)
    for (int i = 0; i < R; ++i) a[c][i] = acc[(tok + c) * kSparseTileRows + i];
  for (int j = 0; j < cnt; ++j) {
    XBlock xk[T];
#pragma GCC unroll 2
    for (int c = 0; c < T; ++c) xk[c] = load_x<kBias>(reinterpret_cast<const BlockQ8_0*>(x + (tok + c) * xrb), c0 + j);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i u = _mm512_load_si512(t.u[i][j]);
      const __m512 dw = _mm512_load_ps(t.dw[i][j]);
#pragma GCC unroll 2
      for (int c = 0; c < T; ++c)
        a[c][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_sums(xk[c], u)), _mm512_mul_ps(dw, xk[c].dx), a[c][i]);
    }
  }
  for (int c = 0; c < T; ++c)
    for (int i = 0; i < R; ++i) acc[(tok + c) * kSparseTileRows + i] = a[c][i];
}

template <typename V, int R>
void tile_rows(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t rb, const uint8_t* x, size_t xrb, int nc) {
  TileRows t;
  __m512 acc[kSparseTileCols * kSparseTileRows];
  for (int i = 0; i < nc * kSparseTileRows; ++i) acc[i] = _mm512_setzero_ps();
  const uint8_t* v[R];
  SparseRow rr[R];
  for (int i = 0; i < R; ++i) {
    rr[i] = sparse_row(w + i * rb, n);
    v[i] = reinterpret_cast<const uint8_t*>(rr[i].values);
  }
  const int64_t nb = n / kSparseBlock;
  for (int64_t c0 = 0; c0 < nb; c0 += kTileChunk) {
    const int cnt = static_cast<int>(std::min<int64_t>(kTileChunk, nb - c0));
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < cnt; ++j) {
        const uint64_t m = sparse_mask(rr[i], c0 + j);
        const int pc = std::popcount(m);
        // Masked loads: never past the kept values (the call's last row may
        // end the mapping); the cost is shared by every token.
        _mm512_store_si512(t.u[i][j], V::template expand<true>(m, pc, v[i]));
        v[i] += V::bytes(pc);
        f16_t d[2];
        std::memcpy(d, rr[i].scales + (c0 + j) * 4, 4);
        _mm512_store_ps(t.dw[i][j], _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(d[1])),
                                                                      _mm_set1_epi16(static_cast<short>(d[0])))));
      }
    int c = 0;
    for (; c + 2 <= nc; c += 2) tile_pass<V::kBias, R, 2>(t, cnt, x, xrb, c0, c, acc);
    if (c < nc) tile_pass<V::kBias, R, 1>(t, cnt, x, xrb, c0, c, acc);
  }
  for (int c = 0; c < nc; ++c)
    for (int i = 0; i < R; ++i) s[c * lds + i] = f512::reduce(acc[c * kSparseTileRows + i]);
}

template <typename V>
void tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
          int nr, int nc) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* xp = static_cast<const uint8_t*>(x);
  static_assert(kSparseTileRows == 8);
  switch (nr) {
    case 1: return tile_rows<V, 1>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 2: return tile_rows<V, 2>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 3: return tile_rows<V, 3>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 4: return tile_rows<V, 4>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 5: return tile_rows<V, 5>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 6: return tile_rows<V, 6>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 7: return tile_rows<V, 7>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    default: return tile_rows<V, 8>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
  }
}

}  // namespace

void sq8_dot(int64_t n, float* s, const void* w, const void* x) { dot<Int8Values>(n, s, w, x); }
void sq4_dot(int64_t n, float* s, const void* w, const void* x) { dot<Int4Values>(n, s, w, x); }

// sq8_rows (decode): sparse_rows.cpp, activations prepared once per call.
void sq4_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<Int4Values>(n, s, w, w_row_bytes, x, nr);
}

void sq8_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
              int nr, int nc) {
  tile<Int8Values>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void sq4_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
              int nr, int nc) {
  tile<Int4Values>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
