// Sparse weights (kSQ8 | C int8, kSQ4 | C 4-bit; quant/sparse.h) x Q8_0
// activations at the AVX2 level. AVX2 has no expand: each byte of a
// block's mask indexes a 256-entry table of pshufb controls that put the
// next popcount packed values in their places (0x80 elsewhere: zero); two
// table entries make the control of 16 inputs (the upper byte's entry
// shifted by the lower byte's popcount, a second table), so one vpshufb
// expands 32 inputs from two 16-byte loads. sq4 unpacks nibbles in
// registers (16 packed bytes read where each 16 inputs' values start,
// subtract 8) and expands 16 inputs a pshufb. Then pmaddubsw(|x|, sign(w,
// x)) + pmaddwd give the 16 int32 lane sums of the contract in
// kernels/ref/dot.h (two ymm: half 0 and half 1), one fma per half. Scales
// convert with F16C. Bits equal the scalar twins (ref/sparse_dot.cpp) at
// every batch size.
//
// Decode (vec_dot, rows) expands each block for its one token; prefill (the
// tile) expands a tile's row blocks once into a stack buffer and reuses
// them for every token of the call.
//
// The loads read up to 16 bytes past a block's kept values (int8) or 47
// bytes from its first value byte (int4); a block whose reads would pass
// the row's last kept value byte reads a stack copy, so no read leaves the
// row's values.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"
#include "quant/sparse.h"

namespace ember::avx2 {
namespace {

constexpr int kGroup = 4;  // rows sharing one pass over the activations

// kExpand[m]: pshufb control placing value k at the k-th set bit of m.
constexpr std::array<uint64_t, 256> make_expand() {
  std::array<uint64_t, 256> t{};
  for (int m = 0; m < 256; ++m) {
    uint64_t c = 0;
    int k = 0;
    for (int i = 0; i < 8; ++i) c |= static_cast<uint64_t>((m >> i) & 1 ? k++ : 0x80) << (8 * i);
    t[static_cast<size_t>(m)] = c;
  }
  return t;
}
// kPopBytes[m]: popcount(m) in every byte. Added to an upper byte's control:
// its indices move past the lower byte's values; 0x80 + 8 keeps bit 7 (zero).
constexpr std::array<uint64_t, 256> make_pop_bytes() {
  std::array<uint64_t, 256> t{};
  for (unsigned m = 0; m < 256; ++m) t[m] = static_cast<uint64_t>(std::popcount(m)) * 0x0101010101010101ull;
  return t;
}
constexpr std::array<uint64_t, 256> kExpand = make_expand();
constexpr std::array<uint64_t, 256> kPopBytes = make_pop_bytes();

// The control of 16 inputs (mask m16) against 16 bytes of packed values.
inline __m128i control16(uint32_t m16) {
  const uint32_t lo = m16 & 0xff, hi = (m16 >> 8) & 0xff;
  return _mm_set_epi64x(static_cast<int64_t>(kExpand[hi] + kPopBytes[lo]), static_cast<int64_t>(kExpand[lo]));
}

// 32 inputs (mask m) from their packed values at v: reads 16 bytes at v and
// at v + popcount(m & 0xffff).
inline __m256i expand32(uint32_t m, const int8_t* v) {
  const int p = std::popcount(m & 0xffffu);
  const __m256i src = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + p)), 1);
  return _mm256_shuffle_epi8(src, _mm256_set_m128i(control16(m >> 16), control16(m & 0xffffu)));
}

// One row's cursor: its masks, scales, next kept value byte and the end of
// its kept value bytes; the row's last kTail value bytes are also copied
// once into `tail` (zero after them), so that reads near the end of the
// values come from there.
constexpr int kTail = 48;
struct RowCursor {
  const uint8_t* masks;
  const uint8_t* scales;
  const uint8_t* values;
  const uint8_t* end;
  const uint8_t* tail_from;  // the first value byte copied into tail
  alignas(16) uint8_t tail[2 * kTail];
};

// The two value widths: the bytes a block's kept values take, and the
// block expanded under its mask as signed bytes, w0 inputs 0..31, w1
// 32..63 (c.values: the block's first value byte).
struct Int8Values {
  static int bytes(int kept) { return kept; }
  static void expand(uint64_t m, int kept, const RowCursor& c, __m256i& w0, __m256i& w1) {
    const uint8_t* v = c.values;
    alignas(16) uint8_t tail[kSparseBlock + 16];
    if (c.end - v < kept + 16) {  // the row's last kept values: no load past them
      std::memset(tail, 0, sizeof(tail));
      std::memcpy(tail, v, static_cast<size_t>(kept));
      v = tail;
    }
    w0 = expand32(static_cast<uint32_t>(m), reinterpret_cast<const int8_t*>(v));
    w1 = expand32(static_cast<uint32_t>(m >> 32),
                  reinterpret_cast<const int8_t*>(v) + std::popcount(static_cast<uint32_t>(m)));
  }
};

// 4-bit values: each 16 inputs whose first kept value is value s of the
// block read the 16 packed bytes from byte s / 2 (no store in between: a
// store-and-reload of the unpacked values stalled on store forwarding),
// unpack them in registers, shift by one value where s is odd, subtract 8
// and expand with the same controls.
struct Int4Values {
  static int bytes(int kept) { return sq4_block_bytes(kept); }
  static __m128i expand16(uint32_t m16, int s, const uint8_t* v) {
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + s / 2));
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(p, low), hi = _mm_and_si128(_mm_srli_epi16(p, 4), low);
    const __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);
    const __m128i w = _mm_blendv_epi8(a, _mm_alignr_epi8(b, a, 1), _mm_set1_epi8(static_cast<char>(-(s & 1))));
    return _mm_shuffle_epi8(_mm_sub_epi8(w, _mm_set1_epi8(8)), control16(m16));
  }
  static void expand(uint64_t m, int, const RowCursor& c, __m256i& w0, __m256i& w1) {
    // Reads reach 46 bytes past the block's first value byte.
    const uint8_t* v = c.end - c.values < kTail ? c.tail + (c.values - c.tail_from) : c.values;
    const int p0 = std::popcount(static_cast<uint32_t>(m & 0xffff));
    const int p1 = p0 + std::popcount(static_cast<uint32_t>((m >> 16) & 0xffff));
    const int p2 = p1 + std::popcount(static_cast<uint32_t>((m >> 32) & 0xffff));
    w0 = _mm256_set_m128i(expand16(static_cast<uint32_t>(m >> 16) & 0xffff, p0, v),
                          expand16(static_cast<uint32_t>(m) & 0xffff, 0, v));
    w1 = _mm256_set_m128i(expand16(static_cast<uint32_t>(m >> 48) & 0xffff, p2, v),
                          expand16(static_cast<uint32_t>(m >> 32) & 0xffff, p1, v));
  }
};

template <typename V>
inline RowCursor row_cursor(const void* w, int64_t n) {
  const SparseRow r = sparse_row(w, n);
  int64_t bytes = 0;
  for (int64_t b = 0; b < n / kSparseBlock; ++b) bytes += V::bytes(std::popcount(sparse_mask(r, b)));
  const auto* v = reinterpret_cast<const uint8_t*>(r.values);
  RowCursor c{r.masks, r.scales, v, v + bytes, v + std::max<int64_t>(0, bytes - kTail), {}};
  std::memcpy(c.tail, c.tail_from, static_cast<size_t>(c.end - c.tail_from));
  return c;
}

// Block b of the row under its mask (signed); the cursor advances.
template <typename V>
inline void expand_block(RowCursor& c, int64_t b, __m256i& w0, __m256i& w1) {
  uint64_t m;
  std::memcpy(&m, c.masks + b * 8, 8);
  const int pc = std::popcount(m);
  V::expand(m, pc, c, w0, w1);
  c.values += V::bytes(pc);
}

// The two f32 scales of a (weight or activation) block pair from two f16.
inline __m128 scales2(f16_t a, f16_t b) {
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b) << 16)));
}

// The activation block pair 2b, 2b + 1: |x| of each half, and [dx0, dx1].
struct XBlock {
  const int8_t* q0;
  const int8_t* q1;
  __m256i ax0, ax1;
  __m128 dx;
};

inline XBlock load_x(const BlockQ8_0* xb, int64_t b) {
  const BlockQ8_0& x0 = xb[2 * b];
  const BlockQ8_0& x1 = xb[2 * b + 1];
  return {x0.qs, x1.qs, _mm256_abs_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qs))),
          _mm256_abs_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qs))), scales2(x0.d, x1.d)};
}

// The 8 int32 lane sums of one half: sum over 4 of w * x, as f32 (exact).
inline __m256 lane_sums(__m256i w, __m256i ax, const int8_t* xq) {
  const __m256i p16 =
      _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq))));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// Lanes 0 and 1 of a product of scale pairs, each spread over 8 lanes.
inline void spread(__m128 sc, __m256& s0, __m256& s1) {
  s0 = _mm256_broadcastss_ps(sc);
  s1 = _mm256_broadcastss_ps(_mm_movehdup_ps(sc));
}

// The contract's reduction: i + 8, i + 4, i + 2, then lanes 0 + 1.
inline float reduce(__m256 acc0, __m256 acc1) {
  const __m256 a8 = _mm256_add_ps(acc0, acc1);
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

struct RowAcc {
  RowCursor c;
  __m256 acc0, acc1;  // lanes 0-7 (half 0), 8-15 (half 1)
};

template <typename V>
inline RowAcc row_acc(const void* w, int64_t n) {
  return {row_cursor<V>(w, n), _mm256_setzero_ps(), _mm256_setzero_ps()};
}

template <typename V>
inline void step(RowAcc& r, const XBlock& x, int64_t b) {
  __m256i w0, w1;
  expand_block<V>(r.c, b, w0, w1);
  f16_t dw[2];
  std::memcpy(dw, r.c.scales + b * 4, 4);
  __m256 sc0, sc1;
  spread(_mm_mul_ps(scales2(dw[0], dw[1]), x.dx), sc0, sc1);
  r.acc0 = _mm256_fmadd_ps(lane_sums(w0, x.ax0, x.q0), sc0, r.acc0);
  r.acc1 = _mm256_fmadd_ps(lane_sums(w1, x.ax1, x.q1), sc1, r.acc1);
}

template <typename V>
void dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const int64_t nb = n / kSparseBlock;
  RowAcc r = row_acc<V>(w, n);
  for (int64_t b = 0; b < nb; ++b) step<V>(r, load_x(xb, b), b);
  *s = reduce(r.acc0, r.acc1);
}

template <typename V>
void rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* wp = static_cast<const uint8_t*>(w);
  const int64_t nb = n / kSparseBlock;
  int64_t r0 = 0;
  for (; r0 + kGroup <= nr; r0 += kGroup) {
    RowAcc g[kGroup];
    for (int i = 0; i < kGroup; ++i) g[i] = row_acc<V>(wp + (r0 + i) * w_row_bytes, n);
    // The next group's rows, one sequential prefetch stream (as avx512/).
    auto pf = lanes::next_group_prefetch<kGroup>(wp, w_row_bytes, r0, nr, nb);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      const XBlock xk = load_x(xb, b);
      // Unrolled: the row states stay in registers.
#pragma GCC unroll 4
      for (int i = 0; i < kGroup; ++i) step<V>(g[i], xk, b);
    }
    pf.finish();
    for (int i = 0; i < kGroup; ++i) s[r0 + i] = reduce(g[i].acc0, g[i].acc1);
  }
  for (; r0 < nr; ++r0) dot<V>(n, s + r0, wp + r0 * w_row_bytes, x);
}

// ---- Prefill: the tile, up to kSparseTileRows rows x kSparseTileCols
// tokens. The rows are expanded kTileChunk blocks at a time into a stack
// buffer (with their scales spread over 8 lanes), then every token of the
// call runs over the buffer; the f32 lanes of each (row, token) pair live
// in a stack array between chunks. The arithmetic of step() in the same
// block order: the same bits.
constexpr int kTileChunk = 16;  // blocks expanded per pass

struct TileRows {
  alignas(32) int8_t w[kSparseTileRows][kTileChunk][kSparseBlock];
  alignas(32) float dw[kSparseTileRows][kTileChunk][16];  // [dw0 x 8, dw1 x 8]
};

template <typename V, int R>
void tile_rows(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t rb, const uint8_t* x, size_t xrb, int nc) {
  TileRows t;
  __m256 acc[kSparseTileCols][kSparseTileRows][2];
  for (int c = 0; c < nc; ++c)
    for (int i = 0; i < R; ++i) acc[c][i][0] = acc[c][i][1] = _mm256_setzero_ps();
  RowCursor cur[R];
  for (int i = 0; i < R; ++i) cur[i] = row_cursor<V>(w + i * rb, n);
  const int64_t nb = n / kSparseBlock;
  for (int64_t c0 = 0; c0 < nb; c0 += kTileChunk) {
    const int cnt = static_cast<int>(std::min<int64_t>(kTileChunk, nb - c0));
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < cnt; ++j) {
        __m256i w0, w1;
        expand_block<V>(cur[i], c0 + j, w0, w1);
        _mm256_store_si256(reinterpret_cast<__m256i*>(t.w[i][j]), w0);
        _mm256_store_si256(reinterpret_cast<__m256i*>(t.w[i][j] + 32), w1);
        f16_t d[2];
        std::memcpy(d, cur[i].scales + (c0 + j) * 4, 4);
        __m256 s0, s1;
        spread(scales2(d[0], d[1]), s0, s1);
        _mm256_store_ps(t.dw[i][j], s0);
        _mm256_store_ps(t.dw[i][j] + 8, s1);
      }
    for (int c = 0; c < nc; ++c) {
      const auto* xb = reinterpret_cast<const BlockQ8_0*>(x + c * xrb);
      __m256 a[R][2];
      for (int i = 0; i < R; ++i) a[i][0] = acc[c][i][0], a[i][1] = acc[c][i][1];
      for (int j = 0; j < cnt; ++j) {
        const XBlock xk = load_x(xb, c0 + j);
        __m256 dx0, dx1;
        spread(xk.dx, dx0, dx1);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.w[i][j]));
          const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.w[i][j] + 32));
          a[i][0] = _mm256_fmadd_ps(lane_sums(w0, xk.ax0, xk.q0), _mm256_mul_ps(_mm256_load_ps(t.dw[i][j]), dx0),
                                    a[i][0]);
          a[i][1] = _mm256_fmadd_ps(lane_sums(w1, xk.ax1, xk.q1), _mm256_mul_ps(_mm256_load_ps(t.dw[i][j] + 8), dx1),
                                    a[i][1]);
        }
      }
      for (int i = 0; i < R; ++i) acc[c][i][0] = a[i][0], acc[c][i][1] = a[i][1];
    }
  }
  for (int c = 0; c < nc; ++c)
    for (int i = 0; i < R; ++i) s[c * lds + i] = reduce(acc[c][i][0], acc[c][i][1]);
}

template <typename V>
void tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
          int nr, int nc) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* xp = static_cast<const uint8_t*>(x);
  static_assert(kSparseTileRows == 4);
  switch (nr) {
    case 1: return tile_rows<V, 1>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 2: return tile_rows<V, 2>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    case 3: return tile_rows<V, 3>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
    default: return tile_rows<V, 4>(n, s, lds, wp, w_row_bytes, xp, x_row_bytes, nc);
  }
}

}  // namespace

void sq8_dot(int64_t n, float* s, const void* w, const void* x) { dot<Int8Values>(n, s, w, x); }
void sq4_dot(int64_t n, float* s, const void* w, const void* x) { dot<Int4Values>(n, s, w, x); }

void sq8_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<Int8Values>(n, s, w, w_row_bytes, x, nr);
}
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

}  // namespace ember::avx2
