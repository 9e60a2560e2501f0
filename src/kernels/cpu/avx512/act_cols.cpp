// AVX-512 (VNNI) column kernels of activation-sparse decode: the layout and
// arithmetic contract (kLanes) of kernels/act_sparse.h, bit-identical to
// the scalar twin ref::act_cols_lanes. The unit of work is a quad of a
// block's active entries (four channels of one group): the four channels'
// 64-byte lines of a chunk of rows are interleaved by byte / word unpacks
// into 64 rows of 4 bytes and multiplied by vpdpbusd with each token's
// four activation quants (levels unsigned, quants signed; the unpacking is
// shared by a group of tokens) into int32 row sums. Levels are stored with
// an offset (Q8_0 +128, Q6_K +32), taken back exactly by starting the sums
// at -off * (the token's sum of quants over the block or sub-block).
// Q8_0 (the type auto uses) sweeps one quad at a time over every chunk of
// the pass, so its four streams are read start to end, with a software
// prefetch cursor running ahead in the same order (see q8_0_cols); the K
// types go per chunk over all of a (sub-)block's quads, the next
// sub-block's lines prefetched into L2 one sub-block ahead.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/act_sparse.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside
// _mm512_cvtph_ps and the widening loads (their "undefined" passthrough
// operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {

namespace {

// Rows x tokens of one pass's float state (acc, and acc_m for Q4_K): 8 KiB
// each, in L1.
constexpr int kState = 2048;
// Most entries of one block (256 channels and the groups' padding).
constexpr int kMaxBlockEntries = 256 + 3 * 16;

// Where the levels of channel c live: block c / bi's levels + (c % bi) * cb.
struct Geometry {
  const uint8_t* panel;
  size_t block_bytes, header;
  int shift;   // log2 of the block's inputs
  int64_t cb;  // bytes per channel
  const uint8_t* channel(int c) const {
    return panel + static_cast<size_t>(c >> shift) * block_bytes + header +
           static_cast<size_t>(c & ((1 << shift) - 1)) * cb;
  }
};

// The rows of one pass: [h0, h0 + H) of the panel, for the n_tok tokens.
struct Pass {
  int64_t h0, H;
  int64_t off;  // byte offset of row h0 in a channel's levels
  int n_tok;
};

// The streams of one block's entries in the pass (ptr[i]: entry e0 + i),
// for this block and the next (prefetched).
struct Streams {
  const uint8_t* ptr[2][kMaxBlockEntries];
  int n[2] = {0, 0};
  int32_t e0[2] = {0, 0};
  void load(const Geometry& g, const ColActive& a, const Pass& ps, int32_t e0_, int32_t e1, int slot) {
    e0[slot] = e0_;
    n[slot] = static_cast<int>(e1 - e0_);
    for (int i = 0; i < n[slot]; ++i) ptr[slot][i] = g.channel(a.idx[e0_ + i]) + ps.off;
  }
  // Prefetches byte `at` of every stream of `slot` (into L2).
  void prefetch(int slot, int64_t at) const {
    for (int i = 0; i < n[slot]; ++i) _mm_prefetch(reinterpret_cast<const char*>(ptr[slot][i] + at), _MM_HINT_T1);
  }
};

inline void prefetch_l2(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1); }

inline __m512i quad_x(const ColActive& a, int t, int32_t e) {
  int32_t v;
  std::memcpy(&v, a.val + t * a.cap + e, 4);
  return _mm512_set1_epi32(v);
}

// s[t][k] += the quad's dot for rows 16 k .. 16 k + 15 of the four
// channels' 64-byte vectors A..D, for tokens tok0 .. tok0 + NT - 1.
template <int NT>
inline void quad_dot(__m512i A, __m512i B, __m512i C, __m512i D, const ColActive& a, int tok0, int32_t e,
                     __m512i (*s)[4]) {
  const __m512i lo_ab = _mm512_unpacklo_epi8(A, B), hi_ab = _mm512_unpackhi_epi8(A, B);
  const __m512i lo_cd = _mm512_unpacklo_epi8(C, D), hi_cd = _mm512_unpackhi_epi8(C, D);
  const __m512i v0 = _mm512_unpacklo_epi16(lo_ab, lo_cd), v1 = _mm512_unpackhi_epi16(lo_ab, lo_cd);
  const __m512i v2 = _mm512_unpacklo_epi16(hi_ab, hi_cd), v3 = _mm512_unpackhi_epi16(hi_ab, hi_cd);
  for (int t = 0; t < NT; ++t) {
    const __m512i x = quad_x(a, tok0 + t, e);
    s[t][0] = _mm512_dpbusd_epi32(s[t][0], v0, x);
    s[t][1] = _mm512_dpbusd_epi32(s[t][1], v1, x);
    s[t][2] = _mm512_dpbusd_epi32(s[t][2], v2, x);
    s[t][3] = _mm512_dpbusd_epi32(s[t][3], v3, x);
  }
}

// The 8-bit entries [i0, i1) of the streams (slot cur) at byte c: 64 rows.
template <int NT>
inline void quads8(const Streams& st, int cur, int i0, int i1, int64_t c, const ColActive& a, int tok0,
                   __m512i (*s)[4]) {
  const uint8_t* const* p = st.ptr[cur];
  for (int i = i0; i < i1; i += 4)
    quad_dot<NT>(_mm512_loadu_si512(p[i] + c), _mm512_loadu_si512(p[i + 1] + c), _mm512_loadu_si512(p[i + 2] + c),
                 _mm512_loadu_si512(p[i + 3] + c), a, tok0, st.e0[cur] + i, s);
}

inline __m512 f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512i i8x16(const uint8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Runs body.template operator()<G>(t0) for the tokens of the pass in groups
// of at most NMAX (G the group's size).
template <int NMAX, typename Body>
inline void token_groups(int n_tok, Body&& body) {
  for (int t0 = 0; t0 < n_tok; t0 += NMAX) {
    const int n = std::min(NMAX, n_tok - t0);
    if constexpr (NMAX >= 4)
      if (n == 4) { body.template operator()<4>(t0); continue; }
    if constexpr (NMAX >= 3)
      if (n == 3) { body.template operator()<3>(t0); continue; }
    if constexpr (NMAX >= 2)
      if (n == 2) { body.template operator()<2>(t0); continue; }
    body.template operator()<1>(t0);
  }
}

// Stores the pass's rows acc - acc_m (acc_m null: acc) that exist.
void store_rows(const ColumnWeights& w, int64_t panel, const Pass& ps, const float* acc, const float* acc_m,
                float* y, int64_t ldy) {
  const int64_t o0 = panel * w.panel_rows + ps.h0;
  const int64_t n = std::min(ps.H, w.n_out - o0);
  for (int t = 0; t < ps.n_tok; ++t)
    for (int64_t r = 0; r < n; ++r)
      y[t * ldy + o0 + r] = acc_m ? acc[t * ps.H + r] - acc_m[t * ps.H + r] : acc[t * ps.H + r];
}

// Calls body(pass) for the passes of rows [r0, r1), each at most kState /
// n_tok rows (a multiple of `unit`); bytes_per_row2: level bytes per 2 rows.
template <typename Body>
void passes(int64_t r0, int64_t r1, int n_tok, int unit, int bytes_per_row2, Body body) {
  const int64_t hs = std::max<int64_t>(unit, kState / n_tok / unit * unit);
  for (int64_t h0 = r0; h0 < r1; h0 += hs) body(Pass{h0, std::min(hs, r1 - h0), h0 * bytes_per_row2 / 2, n_tok});
}

// Q8_0: per block, per quad of the block's active entries, a sweep over
// every chunk of the pass (the quad's four streams read start to end), the
// int32 sums kept in isum [tokens][rows] (in L1); one token's last sweep of
// a block applies the block's scales to acc at once, several tokens' after
// the sweeps. Lines are prefetched into L1 by a cursor (AheadCursor) that
// runs kColAheadChunks chunks ahead in consumption order, across quads and
// blocks: the hardware prefetchers cannot guess where the next active
// channel starts. The earlier loop (every stream of a block advanced 64
// bytes at a time together, registers for the sums, the next block's
// lines prefetched into L2) streamed 13-16 GB/s from DRAM at one thread;
// this one 17-21 GB/s, and computes 1.4x faster in cache. Measured on the
// 2-core EPYC VM (docs/pruning.md, TEAL): 24 and 48 chunks ahead alike at
// one thread, 48 better at two.
constexpr int kColAheadChunks = 48;

// Software prefetch (into L1) of a pass's 8-bit level lines in the order
// the sweeps consume them (quad after quad, chunk after chunk; across
// blocks), kColAheadChunks chunks of a quad (4 lines each) ahead: the runs
// are short (H bytes, 256 for a 512-row matrix split over two threads),
// so the cursor runs over as many quads as that takes.
class AheadCursor {
 public:
  AheadCursor(const Geometry& g, const ColActive& a, const Pass& ps, int32_t e_end)
      : g_(g), a_(a), off_(ps.off), H_(ps.H), e_(a.start[0]), e_end_(e_end) {
    load();
    for (int i = 0; i < kColAheadChunks; ++i) step();
  }
  // Prefetches the next chunk's four lines.
  void step() {
    if (e_ >= e_end_) return;
    for (int k = 0; k < 4; ++k) lanes::prefetch_line<true>(p_[k] + c_);
    c_ += 64;
    if (c_ >= H_) {
      c_ = 0;
      e_ += 4;
      load();
    }
  }

 private:
  void load() {
    if (e_ < e_end_)
      for (int k = 0; k < 4; ++k) p_[k] = g_.channel(a_.idx[e_ + k]) + off_;
  }
  const Geometry& g_;
  const ColActive& a_;
  int64_t off_, H_, c_ = 0;
  int32_t e_, e_end_;
  const uint8_t* p_[4] = {nullptr, nullptr, nullptr, nullptr};
};

// The f16 scales of the chunk of 64 rows at c (needed after the block's sweeps).
inline void prefetch_scales(const uint8_t* d, int64_t c) {
  lanes::prefetch_line<true>(d + 2 * c);
  lanes::prefetch_line<true>(d + 2 * c + 64);
}

// One token's sweeps of the quads of a block over the pass's H rows: the
// quad's streams p (ahead: the pass's prefetch cursor), its activation quads x.
// isum (First: =, else +=) the quad's dot; the block's last quad (Last)
// instead scales its sums into acc as the contract says (d: the block's
// f16 scales, dx its activation scale, corr the offset's correction) and
// prefetches the next block's scales (d_next, null: none).
struct Sweep1 {
  const uint8_t* const* p;
  AheadCursor* ahead;
  int64_t H;
  __m512i x;
  int32_t* isum;
  const uint8_t* d;
  const uint8_t* d_next;
  __m512 dx;
  __m512i corr;
  float* acc;
};
template <bool First, bool Last>
inline void sweep1(const Sweep1& sw) {
  for (int64_t c = 0; c < sw.H; c += 64) {
    sw.ahead->step();
    if constexpr (Last)
      if (sw.d_next) prefetch_scales(sw.d_next, c);
    const __m512i A = _mm512_loadu_si512(sw.p[0] + c), B = _mm512_loadu_si512(sw.p[1] + c);
    const __m512i C = _mm512_loadu_si512(sw.p[2] + c), D = _mm512_loadu_si512(sw.p[3] + c);
    const __m512i lo_ab = _mm512_unpacklo_epi8(A, B), hi_ab = _mm512_unpackhi_epi8(A, B);
    const __m512i lo_cd = _mm512_unpacklo_epi8(C, D), hi_cd = _mm512_unpackhi_epi8(C, D);
    const __m512i v[4] = {_mm512_unpacklo_epi16(lo_ab, lo_cd), _mm512_unpackhi_epi16(lo_ab, lo_cd),
                          _mm512_unpacklo_epi16(hi_ab, hi_cd), _mm512_unpackhi_epi16(hi_ab, hi_cd)};
    for (int k = 0; k < 4; ++k) {
      int32_t* si = sw.isum + c + 16 * k;
      const __m512i s0 = First ? _mm512_setzero_si512() : _mm512_load_si512(si);
      const __m512i s1 = _mm512_dpbusd_epi32(s0, v[k], sw.x);
      if constexpr (Last) {
        float* at = sw.acc + c + 16 * k;
        const __m512 dw = f16x16(sw.d + 2 * (c + 16 * k));
        _mm512_store_ps(at, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s1, sw.corr)),
                                            _mm512_mul_ps(dw, sw.dx), _mm512_load_ps(at)));
      } else {
        _mm512_store_si512(si, s1);
      }
    }
  }
}

void q8_0_cols(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
               int64_t ldy) {
  const int64_t P = w.panel_rows, groups = w.n_in / kColGroup, nb = w.n_in / 32;
  const Geometry g{w.panel(panel), w.block_bytes, static_cast<size_t>(2 * P), 5, P};
  const int32_t e_end = a.start[groups];
  alignas(64) float acc[kState];
  alignas(64) int32_t isum[kState];
  passes(r0, r1, a.n_tok, 64, 2, [&](const Pass& ps) {
    const int64_t n = ps.n_tok * ps.H;
    std::fill(acc, acc + n, 0.0f);
    auto stream = [&](int32_t e) { return g.channel(a.idx[e]) + ps.off; };
    AheadCursor ahead(g, a, ps, e_end);
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t e0 = a.start[2 * b], e1 = a.start[2 * b + 2];
      const uint8_t* d = g.panel + static_cast<size_t>(b) * w.block_bytes + 2 * ps.h0;
      if (e0 == e1) std::fill(isum, isum + n, 0);
      for (int32_t e = e0; e < e1; e += 4) {
        const uint8_t* p[4] = {stream(e), stream(e + 1), stream(e + 2), stream(e + 3)};
        const bool first = e == e0;
        if (ps.n_tok == 1) {
          const int64_t gi = 2 * b;
          const auto* xb = reinterpret_cast<const BlockQ8_0*>(a.xq) + b;
          const Sweep1 sw{p,
                          &ahead,
                          ps.H,
                          quad_x(a, 0, e),
                          isum,
                          d,
                          b + 1 < nb ? d + w.block_bytes : nullptr,
                          _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(xb->d))),
                          _mm512_set1_epi32(-128 * (a.gsum[gi] + a.gsum[gi + 1])),
                          acc};
          const bool last = e + 4 == e1;
          if (first && last)
            sweep1<true, true>(sw);
          else if (first)
            sweep1<true, false>(sw);
          else if (last)
            sweep1<false, true>(sw);
          else
            sweep1<false, false>(sw);
          continue;
        }
        for (int64_t c = 0; c < ps.H; c += 64) {
          ahead.step();
          if (first) prefetch_scales(d, c);
          const __m512i A = _mm512_loadu_si512(p[0] + c), B = _mm512_loadu_si512(p[1] + c);
          const __m512i C = _mm512_loadu_si512(p[2] + c), D = _mm512_loadu_si512(p[3] + c);
          token_groups<4>(ps.n_tok, [&]<int NT>(int t0) {
            __m512i s[NT][4];
            for (int t = 0; t < NT; ++t)
              for (int k = 0; k < 4; ++k)
                s[t][k] = first ? _mm512_setzero_si512() : _mm512_load_si512(isum + (t0 + t) * ps.H + c + 16 * k);
            quad_dot<NT>(A, B, C, D, a, t0, e, s);
            for (int t = 0; t < NT; ++t)
              for (int k = 0; k < 4; ++k) _mm512_store_si512(isum + (t0 + t) * ps.H + c + 16 * k, s[t][k]);
          });
        }
      }
      if (ps.n_tok == 1 && e0 != e1) continue;  // scaled by the last sweep
      for (int t = 0; t < ps.n_tok; ++t) {
        const int64_t gi = t * groups + 2 * b;
        const __m512i corr = _mm512_set1_epi32(-128 * (a.gsum[gi] + a.gsum[gi + 1]));
        const auto* xb = reinterpret_cast<const BlockQ8_0*>(a.xq + t * a.x_row_bytes) + b;
        const __m512 dx = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(xb->d)));
        for (int64_t r = 0; r < ps.H; r += 16) {
          float* at = acc + t * ps.H + r;
          const __m512i si = _mm512_add_epi32(_mm512_load_si512(isum + t * ps.H + r), corr);
          _mm512_store_ps(at, _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(f16x16(d + 2 * r), dx),
                                              _mm512_load_ps(at)));
        }
      }
    }
    store_rows(w, panel, ps, acc, nullptr, y, ldy);
  });
}

// The K types: per sub-block (the unit of the streams: Q6_K 16 channels,
// Q4_K 32), every chunk of the pass, sumi [tokens][rows] (in L1) += sc *
// (the sub-block's exact sums); then the block's scales over the pass. The
// next sub-block's active lines (and the next block's scale tables) are
// prefetched one sub-block ahead.
void q6_K_cols(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
               int64_t ldy) {
  const int64_t P = w.panel_rows, groups = w.n_in / kColGroup, nb = w.n_in / 256;
  const Geometry g{w.panel(panel), w.block_bytes, static_cast<size_t>(18 * P), 8, P};
  alignas(64) float acc[kState];
  alignas(64) int32_t sumi[kState];
  Streams st;
  passes(r0, r1, a.n_tok, 64, 2, [&](const Pass& ps) {
    const int64_t n = ps.n_tok * ps.H;
    std::fill(acc, acc + n, 0.0f);
    st.load(g, a, ps, a.start[0], a.start[1], 0);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = g.panel + static_cast<size_t>(b) * w.block_bytes;
      const uint8_t* sc = blk + 2 * P + ps.h0;
      std::fill(sumi, sumi + n, 0);
      for (int j = 0; j < 16; ++j) {
        const int64_t gi = 16 * b + j;
        const int cur = gi & 1, nxt = cur ^ 1;
        if (gi + 1 < groups)
          st.load(g, a, ps, a.start[gi + 1], a.start[gi + 2], nxt);
        else
          st.n[nxt] = 0;
        const uint8_t* next_hdr = blk + w.block_bytes;  // the next block's d and sc tables
        for (int64_t c = 0; c < ps.H; c += 64) {
          st.prefetch(nxt, c);
          if (b + 1 < nb) {
            prefetch_l2(next_hdr + 2 * P + ps.h0 + j * P + c);
            if (j < 2) prefetch_l2(next_hdr + 2 * (ps.h0 + c) + 64 * j);
          }
          if (st.n[cur] == 0) continue;  // no active channel: isum 0
          token_groups<4>(ps.n_tok, [&]<int NT>(int t0) {
            __m512i s[NT][4];
            for (int t = 0; t < NT; ++t) {
              const __m512i corr = _mm512_set1_epi32(-32 * a.gsum[(t0 + t) * groups + gi]);
              for (int k = 0; k < 4; ++k) s[t][k] = corr;
            }
            quads8<NT>(st, cur, 0, st.n[cur], c, a, t0, s);
            for (int k = 0; k < 4; ++k) {
              const __m512i scv = i8x16(sc + j * P + c + 16 * k);
              for (int t = 0; t < NT; ++t) {
                int32_t* si = sumi + (t0 + t) * ps.H + c + 16 * k;
                _mm512_store_si512(si, _mm512_add_epi32(_mm512_load_si512(si), _mm512_mullo_epi32(scv, s[t][k])));
              }
            }
          });
        }
      }
      for (int t = 0; t < ps.n_tok; ++t) {
        const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.xq + t * a.x_row_bytes) + b;
        const __m512 xd = _mm512_set1_ps(xb->d);
        for (int64_t r = 0; r < ps.H; r += 16) {
          float* at = acc + t * ps.H + r;
          const __m512 dv = _mm512_mul_ps(f16x16(blk + 2 * (ps.h0 + r)), xd);
          _mm512_store_ps(at, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sumi + t * ps.H + r)), dv,
                                              _mm512_load_ps(at)));
        }
      }
    }
    store_rows(w, panel, ps, acc, nullptr, y, ldy);
  });
}

// Q4_K: a 64-byte line of a channel holds 128 rows (the first 64 in the low
// nibbles); summ = sum of m_j * bsums_j does not depend on the sparsity.
void q4_K_cols(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
               int64_t ldy) {
  const int64_t P = w.panel_rows, groups = w.n_in / kColGroup, nb = w.n_in / 256;
  const Geometry g{w.panel(panel), w.block_bytes, static_cast<size_t>(20 * P), 8, P / 2};
  alignas(64) float acc[kState], acc_m[kState];
  alignas(64) int32_t sumi[kState];
  Streams st;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  passes(r0, r1, a.n_tok, 128, 1, [&](const Pass& ps) {
    const int64_t n = ps.n_tok * ps.H;
    std::fill(acc, acc + n, 0.0f);
    std::fill(acc_m, acc_m + n, 0.0f);
    st.load(g, a, ps, a.start[0], a.start[2], 0);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = g.panel + static_cast<size_t>(b) * w.block_bytes;
      const uint8_t* sc = blk + 4 * P + ps.h0;
      const uint8_t* mins = blk + 12 * P + ps.h0;
      std::fill(sumi, sumi + n, 0);
      for (int j = 0; j < 8; ++j) {
        const int64_t gi = 16 * b + 2 * j;
        const int cur = j & 1, nxt = cur ^ 1;
        if (gi + 2 < groups)
          st.load(g, a, ps, a.start[gi + 2], a.start[gi + 4], nxt);
        else
          st.n[nxt] = 0;
        const uint8_t* next_hdr = blk + w.block_bytes;
        for (int64_t c = 0; c < ps.H; c += 128) {  // rows c .. c + 127 of the pass: bytes c / 2 of a channel
          st.prefetch(nxt, c / 2);
          if (b + 1 < nb) {
            for (int k = 0; k < 2; ++k) {
              prefetch_l2(next_hdr + (4 + j) * P + ps.h0 + c + 64 * k);   // sc_j
              prefetch_l2(next_hdr + (12 + j) * P + ps.h0 + c + 64 * k);  // m_j
            }
            if (j < 4) prefetch_l2(next_hdr + (j / 2) * 2 * P + 2 * (ps.h0 + c) + 128 * (j % 2));  // d, dmin
            if (j < 4) prefetch_l2(next_hdr + (j / 2) * 2 * P + 2 * (ps.h0 + c) + 128 * (j % 2) + 64);
          }
          if (st.n[cur] == 0) continue;  // no active channel: isum 0
          for (int t = 0; t < ps.n_tok; ++t) {
            __m512i s[2][4];  // low-nibble rows 0..63, high-nibble rows 64..127
            for (int h = 0; h < 2; ++h)
              for (int k = 0; k < 4; ++k) s[h][k] = _mm512_setzero_si512();
            const uint8_t* const* p = st.ptr[cur];
            for (int i = 0; i < st.n[cur]; i += 4) {
              const __m512i va = _mm512_loadu_si512(p[i] + c / 2), vb = _mm512_loadu_si512(p[i + 1] + c / 2);
              const __m512i vc = _mm512_loadu_si512(p[i + 2] + c / 2), vd = _mm512_loadu_si512(p[i + 3] + c / 2);
              quad_dot<1>(_mm512_and_si512(va, m4), _mm512_and_si512(vb, m4), _mm512_and_si512(vc, m4),
                          _mm512_and_si512(vd, m4), a, t, st.e0[cur] + i, &s[0]);
              quad_dot<1>(_mm512_and_si512(_mm512_srli_epi16(va, 4), m4),
                          _mm512_and_si512(_mm512_srli_epi16(vb, 4), m4),
                          _mm512_and_si512(_mm512_srli_epi16(vc, 4), m4),
                          _mm512_and_si512(_mm512_srli_epi16(vd, 4), m4), a, t, st.e0[cur] + i, &s[1]);
            }
            for (int h = 0; h < 2; ++h)
              for (int k = 0; k < 4; ++k) {
                const int64_t r = c + 64 * h + 16 * k;
                int32_t* si = sumi + t * ps.H + r;
                _mm512_store_si512(si, _mm512_add_epi32(_mm512_load_si512(si),
                                                        _mm512_mullo_epi32(u8x16(sc + j * P + r), s[h][k])));
              }
          }
        }
      }
      for (int t = 0; t < ps.n_tok; ++t) {
        const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.xq + t * a.x_row_bytes) + b;
        __m512i bs[8];
        for (int j = 0; j < 8; ++j) bs[j] = _mm512_set1_epi32(xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
        const __m512 xd = _mm512_set1_ps(xb->d);
        for (int64_t r = 0; r < ps.H; r += 16) {
          __m512i summ = _mm512_setzero_si512();
          for (int j = 0; j < 8; ++j) summ = _mm512_add_epi32(summ, _mm512_mullo_epi32(u8x16(mins + j * P + r), bs[j]));
          const __m512 dv = _mm512_mul_ps(f16x16(blk + 2 * (ps.h0 + r)), xd);
          const __m512 dmin = _mm512_mul_ps(f16x16(blk + 2 * P + 2 * (ps.h0 + r)), xd);
          float* at = acc + t * ps.H + r;
          float* am = acc_m + t * ps.H + r;
          _mm512_store_ps(at, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sumi + t * ps.H + r)), dv,
                                              _mm512_load_ps(at)));
          _mm512_store_ps(am, _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), dmin, _mm512_load_ps(am)));
        }
      }
    }
    store_rows(w, panel, ps, acc, acc_m, y, ldy);
  });
}

}  // namespace

void act_cols(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
              int64_t ldy) {
  switch (w.type) {
    case DType::kQ8_0: q8_0_cols(w, panel, r0, r1, a, y, ldy); return;
    case DType::kQ4_K: q4_K_cols(w, panel, r0, r1, a, y, ldy); return;
    default: q6_K_cols(w, panel, r0, r1, a, y, ldy); return;
  }
}

}  // namespace ember::avx512
