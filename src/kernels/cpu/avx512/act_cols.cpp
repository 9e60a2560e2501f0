// AVX-512 (VNNI) column kernels of activation-sparse decode: the layout and
// arithmetic contract (kLanes) of kernels/act_sparse.h, bit-identical to
// the scalar twin ref::act_cols_lanes. Per quad of active entries the four
// channels' 128 levels are interleaved by byte / word unpacks into 128 rows
// of 4 bytes and multiplied with the four activation quants by vpdpbusd
// (levels unsigned, quants signed): 8 zmm of int32 row sums, in row order
// by the layout's byte order. Levels are stored with an offset (Q8_0 +128,
// Q6_K +32) that is taken back once per group: off * (sum of the group's
// quants). The next entries' channels are prefetched two quads ahead.
#include <immintrin.h>

#include <cstring>

#include "kernels/act_sparse.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside
// _mm512_cvtph_ps and the widening loads (their "undefined" passthrough
// operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {

namespace {

constexpr int R = kColPanelRows;
constexpr int kAhead = 16;  // entries prefetched ahead (4 quads)

// Where the levels of channel c live: block c / bi's levels + (c % bi) * cb.
struct Geometry {
  const uint8_t* panel;
  size_t block_bytes, header;
  int shift;     // log2 of the block's inputs
  int cb;        // bytes per channel
  const uint8_t* channel(int c) const {
    return panel + static_cast<size_t>(c >> shift) * block_bytes + header +
           static_cast<size_t>(c & ((1 << shift) - 1)) * cb;
  }
};

// The next block's header (its scales), read when that block ends.
inline void prefetch_header(const Geometry& g, int64_t b, int64_t b1) {
  if (b >= b1) return;
  const char* p = reinterpret_cast<const char*>(g.panel + static_cast<size_t>(b) * g.block_bytes);
  for (size_t off = 0; off < g.header; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

inline void prefetch_entry(const Geometry& g, const ColActive& a, int32_t e, int32_t end) {
  if (e >= end) return;
  const char* p = reinterpret_cast<const char*>(g.channel(a.idx[e]));
  _mm_prefetch(p, _MM_HINT_T0);
  if (g.cb > 64) _mm_prefetch(p + 64, _MM_HINT_T0);
}

// isum[4h + k] lane i += the quad's dot for row 64 h + 16 k + i, from the
// four channels' half-h level vectors.
inline void quad_half(__m512i A, __m512i B, __m512i C, __m512i D, __m512i x, __m512i* isum) {
  const __m512i lo_ab = _mm512_unpacklo_epi8(A, B), hi_ab = _mm512_unpackhi_epi8(A, B);
  const __m512i lo_cd = _mm512_unpacklo_epi8(C, D), hi_cd = _mm512_unpackhi_epi8(C, D);
  isum[0] = _mm512_dpbusd_epi32(isum[0], _mm512_unpacklo_epi16(lo_ab, lo_cd), x);
  isum[1] = _mm512_dpbusd_epi32(isum[1], _mm512_unpackhi_epi16(lo_ab, lo_cd), x);
  isum[2] = _mm512_dpbusd_epi32(isum[2], _mm512_unpacklo_epi16(hi_ab, hi_cd), x);
  isum[3] = _mm512_dpbusd_epi32(isum[3], _mm512_unpackhi_epi16(hi_ab, hi_cd), x);
}

inline __m512i quad_x(const ColActive& a, int32_t e) {
  int32_t v;
  std::memcpy(&v, a.val + e, 4);
  return _mm512_set1_epi32(v);
}

// Entries [e0, e1) (whole quads) of 8-bit levels (128 B a channel).
inline void quads8(const Geometry& g, const ColActive& a, int32_t e0, int32_t e1, int32_t end, __m512i* isum) {
  for (int32_t e = e0; e < e1; e += 4) {
    for (int t = 0; t < 4; ++t) prefetch_entry(g, a, e + kAhead + t, end);
    const uint8_t* pa = g.channel(a.idx[e]);
    const uint8_t* pb = g.channel(a.idx[e + 1]);
    const uint8_t* pc = g.channel(a.idx[e + 2]);
    const uint8_t* pd = g.channel(a.idx[e + 3]);
    const __m512i x = quad_x(a, e);
    for (int h = 0; h < 2; ++h)
      quad_half(_mm512_loadu_si512(pa + 64 * h), _mm512_loadu_si512(pb + 64 * h), _mm512_loadu_si512(pc + 64 * h),
                _mm512_loadu_si512(pd + 64 * h), x, isum + 4 * h);
  }
}

// Entries [e0, e1) of 4-bit levels (64 B a channel: half 0 low nibbles).
inline void quads4(const Geometry& g, const ColActive& a, int32_t e0, int32_t e1, int32_t end, __m512i* isum) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int32_t e = e0; e < e1; e += 4) {
    for (int t = 0; t < 4; ++t) prefetch_entry(g, a, e + kAhead + t, end);
    const __m512i va = _mm512_loadu_si512(g.channel(a.idx[e]));
    const __m512i vb = _mm512_loadu_si512(g.channel(a.idx[e + 1]));
    const __m512i vc = _mm512_loadu_si512(g.channel(a.idx[e + 2]));
    const __m512i vd = _mm512_loadu_si512(g.channel(a.idx[e + 3]));
    const __m512i x = quad_x(a, e);
    quad_half(_mm512_and_si512(va, m4), _mm512_and_si512(vb, m4), _mm512_and_si512(vc, m4),
              _mm512_and_si512(vd, m4), x, isum);
    quad_half(_mm512_and_si512(_mm512_srli_epi16(va, 4), m4), _mm512_and_si512(_mm512_srli_epi16(vb, 4), m4),
              _mm512_and_si512(_mm512_srli_epi16(vc, 4), m4), _mm512_and_si512(_mm512_srli_epi16(vd, 4), m4), x,
              isum + 4);
  }
}

inline __m512 f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

void q8_0_cols(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  const Geometry g{w.panel(panel), w.block_bytes, 2 * R, 5, R};
  const int32_t end = a.start[w.n_in / kColGroup];
  __m512 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm512_loadu_ps(state + 16 * k);
  for (int64_t b = b0; b < b1; ++b) {
    prefetch_header(g, b + 1, b1);
    __m512i isum[8];
    for (int k = 0; k < 8; ++k) isum[k] = _mm512_setzero_si512();
    quads8(g, a, a.start[2 * b], a.start[2 * b + 2], end, isum);
    const __m512i corr = _mm512_set1_epi32(128 * (a.gsum[2 * b] + a.gsum[2 * b + 1]));
    const auto* xb = static_cast<const BlockQ8_0*>(a.xq) + b;
    const __m512 dx = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(xb->d)));
    const uint8_t* dw = g.panel + static_cast<size_t>(b) * w.block_bytes;
    for (int k = 0; k < 8; ++k) {
      const __m512 scale = _mm512_mul_ps(f16x16(dw + 32 * k), dx);
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum[k], corr)), scale, acc[k]);
    }
  }
  for (int k = 0; k < 8; ++k) _mm512_storeu_ps(state + 16 * k, acc[k]);
}

void q4_K_cols(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  const Geometry g{w.panel(panel), w.block_bytes, 20 * R, 8, R / 2};
  const int32_t end = a.start[w.n_in / kColGroup];
  for (int64_t b = b0; b < b1; ++b) {
    prefetch_header(g, b + 1, b1);
    const uint8_t* blk = g.panel + static_cast<size_t>(b) * w.block_bytes;
    const uint8_t* sc = blk + 4 * R;
    const uint8_t* mins = sc + 8 * R;
    const auto* xb = static_cast<const BlockQ8_K*>(a.xq) + b;
    __m512i sumi[8];
    for (int k = 0; k < 8; ++k) sumi[k] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const int64_t gi = 16 * b + 2 * j;
      if (a.start[gi] == a.start[gi + 2]) continue;  // no active channel: isum 0
      __m512i isum[8];
      for (int k = 0; k < 8; ++k) isum[k] = _mm512_setzero_si512();
      quads4(g, a, a.start[gi], a.start[gi + 2], end, isum);
      for (int k = 0; k < 8; ++k) {
        const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + j * R + 16 * k)));
        sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(s, isum[k]));
      }
    }
    const __m512 xd = _mm512_set1_ps(xb->d);
    for (int k = 0; k < 8; ++k) {
      __m512i summ = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        const __m512i m =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + j * R + 16 * k)));
        summ = _mm512_add_epi32(summ, _mm512_mullo_epi32(m, _mm512_set1_epi32(xb->bsums[2 * j] + xb->bsums[2 * j + 1])));
      }
      const __m512 d = _mm512_mul_ps(f16x16(blk + 32 * k), xd);
      const __m512 dmin = _mm512_mul_ps(f16x16(blk + 2 * R + 32 * k), xd);
      _mm512_storeu_ps(state + 16 * k,
                       _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[k]), d, _mm512_loadu_ps(state + 16 * k)));
      _mm512_storeu_ps(state + R + 16 * k,
                       _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), dmin, _mm512_loadu_ps(state + R + 16 * k)));
    }
  }
}

void q6_K_cols(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  const Geometry g{w.panel(panel), w.block_bytes, 18 * R, 8, R};
  const int32_t end = a.start[w.n_in / kColGroup];
  __m512 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm512_loadu_ps(state + 16 * k);
  for (int64_t b = b0; b < b1; ++b) {
    prefetch_header(g, b + 1, b1);
    const uint8_t* blk = g.panel + static_cast<size_t>(b) * w.block_bytes;
    const uint8_t* sc = blk + 2 * R;
    const auto* xb = static_cast<const BlockQ8_K*>(a.xq) + b;
    __m512i sumi[8];
    for (int k = 0; k < 8; ++k) sumi[k] = _mm512_setzero_si512();
    for (int j = 0; j < 16; ++j) {
      const int64_t gi = 16 * b + j;
      if (a.start[gi] == a.start[gi + 1]) continue;  // no active channel: isum 0
      __m512i isum[8];
      for (int k = 0; k < 8; ++k) isum[k] = _mm512_setzero_si512();
      quads8(g, a, a.start[gi], a.start[gi + 1], end, isum);
      const __m512i corr = _mm512_set1_epi32(32 * a.gsum[gi]);
      for (int k = 0; k < 8; ++k) {
        const __m512i s = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + j * R + 16 * k)));
        sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(s, _mm512_sub_epi32(isum[k], corr)));
      }
    }
    const __m512 xd = _mm512_set1_ps(xb->d);
    for (int k = 0; k < 8; ++k) {
      const __m512 d = _mm512_mul_ps(f16x16(blk + 32 * k), xd);
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[k]), d, acc[k]);
    }
  }
  for (int k = 0; k < 8; ++k) _mm512_storeu_ps(state + 16 * k, acc[k]);
}

}  // namespace

void act_cols(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state) {
  switch (w.type) {
    case DType::kQ8_0: q8_0_cols(w, panel, a, b0, b1, state); return;
    case DType::kQ4_K: q4_K_cols(w, panel, a, b0, b1, state); return;
    default: q6_K_cols(w, panel, a, b0, b1, state); return;
  }
}

}  // namespace ember::avx512
