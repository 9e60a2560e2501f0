// AVX-512 VNNI kernels over the interleaved Q4_0_R16 / Q5_0_R16 / Q8_0_R16
// layouts (kernels/interleave.h): lane r of every vector = row r of a 16-row
// group, the activations Q8_0. Arithmetic: the lane contract of the
// plain-row kernels (avx512/legacy_lanes.cpp, legacy_rows.cpp): per block b in
// order acc = fma(float(isum_b), d_w[b] * d_x[b], acc), isum_b the exact
// integer dot of the weight quants (Q4_0: q - 8; Q5_0: q - 16; Q8_0: q,
// taken as q ^ 0x80 minus 128) and the activation quants, so results equal
// the base types' bit for bit.
//
// Per block of a group: Q4_0 is 4 vector loads (dword r = 8 quants of row r),
// a nibble split each and 8 vpdpbusd with broadcast activation dwords; Q5_0
// the same plus a masked add of 16 per nibble vector, its byte mask loaded
// from the layout's transposed qh (8 masks of 64 bits); Q8_0 8
// loads, 8 xor, 8 vpdpbusd; all seeded with -offset * sum(x_b), the
// activation block sums computed once per call. Tokens go eight (or up to
// four) per pass over a group (the group stays in L1 / L2 between passes),
// which also serves as the tile; above 16 tokens the driver takes the token-
// lane form instead (activations and seeds packed once per matmul, see
// pack()), so the seeds are not recomputed per 32-row tile.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx512/legacy_r16_layout.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kR = 16;
constexpr int kMaxTokens = std::max(kInterleavedFewMax, kInterleavedTileCols);

using legacy::Layout;
using legacy::Legacy;
using legacy::quants;

inline __m512i bcast32(const void* p) { return _mm512_set1_epi32(static_cast<int>(simd::load_u32(p))); }

// sum of the 32 activation quants of a block.
inline int32_t block_sum(const BlockQ8_0& x) {
  const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)),
                                     _mm256_set1_epi8(static_cast<char>(0x80)));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());  // 4 sums of 8 (x + 128)
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

// A Q5_0 group's nb blocks as kU8 blocks at out (nb * 544 bytes):
// the nibble splits and high bits done once for every pass over the tokens.
template <Legacy K>
void unpack(const uint8_t* g, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = g + static_cast<size_t>(b) * Layout<K>::kBlock;
    uint8_t* o = out + static_cast<size_t>(b) * Layout<Legacy::kU8>::kBlock;
    std::memcpy(o, p, 32);
    for (int k = 0; k < 4; ++k) {
      __m512i lo, hi;
      quants<K>(p, k, &lo, &hi);
      _mm512_storeu_si512(o + 32 + 64 * k, lo);
      _mm512_storeu_si512(o + 32 + 64 * (4 + k), hi);
    }
  }
}


// The activations of one token as the passes read them: block b's 32
// quants at qs + kStride * b, its scale and its seed (-offset * sum of its
// quants). kPacked: the token-lane pack (pack_tokens below: quants 32 bytes
// apart, f32 scales); else Q8_0 blocks as quantized (34 bytes, f16 scale).
struct TokenView {
  const uint8_t* qs;
  const void* d;
  const int32_t* seeds;
};
template <bool kPacked>
struct XRead {
  static constexpr size_t kStride = kPacked ? 32 : sizeof(BlockQ8_0);
  static float d(const TokenView& t, int64_t b) {
    if constexpr (kPacked) return static_cast<const float*>(t.d)[b];
    else return simd::load_f16(static_cast<const BlockQ8_0*>(t.d)[b].d);
  }
};

// Tokens xt[0 .. T) over the nb blocks of G groups (g[0 .. G), each
// activation broadcast shared by them): out[G * c + j] lane r = result of
// row r of group j, token c.
template <Legacy K, bool kPacked, int G, int T>
void pass(const uint8_t* const* g, int64_t nb, const TokenView* xt, __m512 out[], lanes::GroupPrefetch* pf) {
  using L = Layout<K>;
  using X = XRead<kPacked>;
  // Two integer chains per output where there are few outputs (vpdpbusd
  // latency); with 4 or more the second set only costs registers (the
  // 2 x 4 pass spilled).
  constexpr bool kSplit = G * T < 4;
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[G * T];
  for (int c = 0; c < G * T; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf) pf->step();
    const uint8_t* p[G];
    for (int j = 0; j < G; ++j) p[j] = g[j] + static_cast<size_t>(b) * L::kBlock;
    const uint8_t* xq[T];
    for (int c = 0; c < T; ++c) xq[c] = xt[c].qs + X::kStride * static_cast<size_t>(b);
    __m512i a[G * T], a2[G * T];
#pragma GCC unroll 8
    for (int c = 0; c < G * T; ++c) {
      a[c] = _mm512_set1_epi32(xt[c / G].seeds[b]);
      a2[c] = _mm512_setzero_si512();
    }
    if constexpr (L::kBytes) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m512i q[G];
#pragma GCC unroll 2
        for (int j = 0; j < G; ++j) {
          q[j] = _mm512_loadu_si512(p[j] + L::kQs + 64 * k);
          if constexpr (K == Legacy::kQ8_0) q[j] = _mm512_xor_si512(q[j], k80);
        }
#pragma GCC unroll 8
        for (int c = 0; c < T; ++c) {
          const __m512i y = bcast32(xq[c] + 4 * k);
#pragma GCC unroll 2
          for (int j = 0; j < G; ++j) {
            if (kSplit && k % 2) a2[G * c + j] = _mm512_dpbusd_epi32(a2[G * c + j], q[j], y);
            else a[G * c + j] = _mm512_dpbusd_epi32(a[G * c + j], q[j], y);
          }
        }
      }
    } else {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i lo[G], hi[G];
#pragma GCC unroll 2
        for (int j = 0; j < G; ++j) quants<K>(p[j], k, &lo[j], &hi[j]);
#pragma GCC unroll 8
        for (int c = 0; c < T; ++c) {
          const __m512i ylo = bcast32(xq[c] + 4 * k), yhi = bcast32(xq[c] + 16 + 4 * k);
#pragma GCC unroll 2
          for (int j = 0; j < G; ++j) {
            a[G * c + j] = _mm512_dpbusd_epi32(a[G * c + j], lo[j], ylo);
            if constexpr (kSplit) a2[G * c + j] = _mm512_dpbusd_epi32(a2[G * c + j], hi[j], yhi);
            else a[G * c + j] = _mm512_dpbusd_epi32(a[G * c + j], hi[j], yhi);
          }
        }
      }
    }
    __m512 d[G];
    for (int j = 0; j < G; ++j) d[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[j])));
#pragma GCC unroll 8
    for (int c = 0; c < T; ++c) {
      const __m512 xd = _mm512_set1_ps(X::d(xt[c], b));
#pragma GCC unroll 2
      for (int j = 0; j < G; ++j)
        acc[G * c + j] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(kSplit ? _mm512_add_epi32(a[G * c + j], a2[G * c + j]) : a[G * c + j]),
            _mm512_mul_ps(d[j], xd), acc[G * c + j]);
    }
  }
  for (int c = 0; c < G * T; ++c) out[c] = acc[c];
}

// Tokens t0 .. t0 + gt of a pass over G groups g (G = 2: gt <= 4; else 1
// .. 4 or 8).
template <Legacy K, bool kPacked>
void dispatch(int G, int gt, const uint8_t* const* g, int64_t nb, const TokenView* xt, __m512 out[],
              lanes::GroupPrefetch* p) {
  if (G == 2) {
    switch (gt) {
      case 1: pass<K, kPacked, 2, 1>(g, nb, xt, out, p); break;
      case 2: pass<K, kPacked, 2, 2>(g, nb, xt, out, p); break;
      case 3: pass<K, kPacked, 2, 3>(g, nb, xt, out, p); break;
      case 4: pass<K, kPacked, 2, 4>(g, nb, xt, out, p); break;
    }
  } else {
    switch (gt) {
      case 1: pass<K, kPacked, 1, 1>(g, nb, xt, out, p); break;
      case 2: pass<K, kPacked, 1, 2>(g, nb, xt, out, p); break;
      case 3: pass<K, kPacked, 1, 3>(g, nb, xt, out, p); break;
      case 4: pass<K, kPacked, 1, 4>(g, nb, xt, out, p); break;
      case 8: pass<K, kPacked, 1, 8>(g, nb, xt, out, p); break;
    }
  }
}

// Q5_0 groups are unpacked (unpack()) from this many tokens on (Q4_0: its
// nibble split is cheaper than the extra pass over the unpacked bytes,
// 2-3% slower at 512 tokens on 1B Q4_0).
constexpr int kUnpackMinTokens = 5;

// nc tokens (1 .. kMaxTokens) xt over nr rows (whole groups) at w.
template <Legacy K, bool kPacked>
void run_view(int64_t nb, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const TokenView* xt,
              int64_t nr, int nc) {
  constexpr bool kUnpacks = K == Legacy::kQ5_0;
  const bool unpacked = kUnpacks && nc >= kUnpackMinTokens;
  const size_t ub = static_cast<size_t>(nb) * Layout<Legacy::kU8>::kBlock;  // one unpacked group
  thread_local std::vector<uint8_t> unpack_buf;
  if (unpacked) unpack_buf.resize(2 * ub);
  for (int64_t r0 = 0; r0 < nr;) {
    // Two groups per pass when both are here and there are tokens enough
    // to share the broadcasts (prefill tiles); else one. The group after
    // them is prefetched even past the call's rows (the next task's; see
    // kquants_r16_few.cpp).
    const int G = nc >= 4 && r0 + 2 * kR <= nr ? 2 : 1;
    const uint8_t* g[2] = {w + static_cast<size_t>(r0) * w_row_bytes, w + static_cast<size_t>(r0 + kR) * w_row_bytes};
    auto pf = lanes::GroupPrefetch(w + static_cast<size_t>(r0 + G * kR) * w_row_bytes, kR * w_row_bytes, nb);
    const uint8_t* gu[2] = {unpack_buf.data(), unpack_buf.data() + ub};
    if constexpr (kUnpacks)
      if (unpacked)
        for (int j = 0; j < G; ++j) unpack<K>(g[j], nb, unpack_buf.data() + j * ub);
    for (int t0 = 0; t0 < nc;) {
      const int gt = G == 2 ? std::min(4, nc - t0) : nc - t0 >= 8 ? 8 : std::min(4, nc - t0);
      lanes::GroupPrefetch* p = t0 == 0 ? &pf : nullptr;
      __m512 out[8];
      if constexpr (kUnpacks) {
        if (unpacked) dispatch<Legacy::kU8, kPacked>(G, gt, gu, nb, xt + t0, out, p);
        else dispatch<K, kPacked>(G, gt, g, nb, xt + t0, out, p);
      } else {
        dispatch<K, kPacked>(G, gt, g, nb, xt + t0, out, p);
      }
      for (int c = 0; c < gt; ++c)
        for (int j = 0; j < G; ++j) _mm512_storeu_ps(s + (t0 + c) * lds + r0 + kR * j, out[G * c + j]);
      t0 += gt;
    }
    pf.finish();
    r0 += G * kR;
  }
}

// nc tokens (1 .. kMaxTokens), Q8_0 rows x_row_bytes apart: the seeds
// computed for this call.
template <Legacy K>
void run(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x, size_t x_row_bytes,
         int64_t nr, int nc) {
  const int64_t nb = n / 32;
  TokenView xt[kMaxTokens];
  thread_local std::vector<int32_t> sums;
  sums.resize(static_cast<size_t>(nc * nb));
  for (int t = 0; t < nc; ++t) {
    const auto* xb = reinterpret_cast<const BlockQ8_0*>(x + static_cast<size_t>(t) * x_row_bytes);
    int32_t* st = sums.data() + static_cast<size_t>(t) * nb;
    for (int64_t b = 0; b < nb; ++b) st[b] = -Layout<K>::kOffset * block_sum(xb[b]);
    xt[t] = {reinterpret_cast<const uint8_t*>(xb[0].qs), xb, st};
  }
  run_view<K, false>(nb, s, lds, w, w_row_bytes, xt, nr, nc);
}

// ---- token lanes: the activations packed once per matmul ----
//
// Prefill tiles computed each call's seeds (one block sum per token and
// block) for the call's 32 rows: a third of a tile's work (2048 x 640, 64
// tokens, one thread: 0.81-0.87x the plain Q5_0 tile with them, 0.97-1.14x
// without). Packed once per matmul instead, per token: the nb blocks' quants
// (32 bytes each), then their f32 scales, then their seeds.
size_t packed_row_bytes(int64_t n) {
  const size_t nb = static_cast<size_t>(n / 32);
  return (nb * (32 + 4 + 4) + 63) / 64 * 64;
}

template <Legacy K>
void pack(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b, int64_t e) {
  const int64_t nb = n / 32;
  const size_t rb = packed_row_bytes(n);
  for (int t = 0; t < nc; ++t) {
    const auto* xb = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(x) + t * x_row_bytes);
    uint8_t* o = static_cast<uint8_t*>(packed) + t * rb;
    float* d = reinterpret_cast<float*>(o + 32 * nb);
    int32_t* seeds = reinterpret_cast<int32_t*>(o + 36 * nb);
    for (int64_t i = b; i < e; ++i) {
      std::memcpy(o + 32 * i, xb[i].qs, 32);
      d[i] = simd::load_f16(xb[i].d);
      seeds[i] = -Layout<K>::kOffset * block_sum(xb[i]);
    }
  }
}

// Token blocks of kMaxTokens (each group pair unpacked once per block) over
// long runs of rows.
template <Legacy K>
void run_packed(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* packed,
                int64_t nr, int nc) {
  const int64_t nb = n / 32;
  const size_t rb = packed_row_bytes(n);
  for (int t0 = 0; t0 < nc; t0 += kMaxTokens) {
    const int tb = std::min(kMaxTokens, nc - t0);
    TokenView xt[kMaxTokens];
    for (int t = 0; t < tb; ++t) {
      const uint8_t* o = packed + static_cast<size_t>(t0 + t) * rb;
      xt[t] = {o, o + 32 * nb, reinterpret_cast<const int32_t*>(o + 36 * nb)};
    }
    run_view<K, true>(nb, s + t0 * lds, lds, w, w_row_bytes, xt, nr, tb);
  }
}

}  // namespace

#define EMBER_LEGACY_R16(name, kind)                                                                                   \
  void name##_r16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x,                          \
                       int64_t nr) {                                                                                   \
    run<kind>(n, s, 0, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), 0, nr, 1);         \
  }                                                                                                                    \
  void name##_r16_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                             \
                      const void* x, size_t x_row_bytes, int64_t nr, int nc) {                                         \
    run<kind>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes,     \
              nr, nc);                                                                                                 \
  }                                                                                                                    \
  void name##_r16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                            \
                       const void* x, size_t x_row_bytes, int nr, int nc) {                                            \
    run<kind>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes,     \
              nr, nc);                                                                                                 \
  }                                                                                                                    \
  void name##_r16_tokens_pack(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b,           \
                              int64_t e) {                                                                             \
    pack<kind>(n, x, x_row_bytes, nc, packed, b, e);                                                                   \
  }                                                                                                                    \
  void name##_r16_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                          \
                         const void* packed, int64_t nr, int nc) {                                                     \
    run_packed<kind>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(packed),      \
                     nr, nc);                                                                                          \
  }

size_t legacy_r16_tokens_pack_bytes(int64_t n, int nc) { return static_cast<size_t>(nc) * packed_row_bytes(n); }

EMBER_LEGACY_R16(q4_0, Legacy::kQ4_0)
EMBER_LEGACY_R16(q5_0, Legacy::kQ5_0)
EMBER_LEGACY_R16(q8_0, Legacy::kQ8_0)

#undef EMBER_LEGACY_R16

}  // namespace ember::avx512
