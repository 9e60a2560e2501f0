// AMX-INT8 kernels over the interleaved Q4_K_R16 / Q6_K_R16 layouts
// (kernels/interleave.h) for many tokens at once: batched decode (the
// few-token form) and prefill (the tile), in the arithmetic of the row-lane
// kernels (twins in kernels/ref/kquants_lanes.h), so results equal the
// AVX-512 kernels' (avx512/kquants_r16_few.cpp) bit for bit.
//
// Why: those kernels sit at the vpdpbusd port bound (one 64-MAC instruction
// per cycle and core); one tdpbsud does 16 x 16 x 64 MACs in ~13 cycles
// (4.8 ns on the development VM with independent accumulators).
//
// How. A K-quant's sub-block scales stop a tile product from running over a
// whole super-block, and scaling each sub-block's 16 x 16 tile of sums
// afterwards costs a vpmulld per 16 products. So the scales go into the
// weights instead, once per super-block of a group for all the call's
// tokens: w = sc_s * q (Q4_K: 0 .. 945) or sc_g * (q - 32) (Q6_K: |w| <=
// 4096), in i16, split into bytes w = 256 hi + lo (lo unsigned, hi: Q4_K
// 0 .. 3, Q6_K signed -16 .. 15). Per 16 tokens and super-block, 4 chunks of
// 64 elements: C_lo += A x B_lo (tdpbsud), C_hi += A x B_hi (tdpbsud /
// tdpbssd), with A = the tokens' Q8_K quants read in place (row stride = the
// activation row) and B = the expanded weights, whose VNNI tile layout
// (B row k: dword r = row r's elements 4k .. 4k + 3) is the interleaved
// layout's lane order. Then sumi = C_lo + 256 C_hi is the exact int32
// sum_s sc_s dot(q, x_s) (Q6_K: sum_g sc_g dot(q - 32, x_g), no bsums
// correction needed), and the per-token float steps are the lane kernels':
// acc = fma(float(sumi), d * x.d, acc) per super-block in order (Q4_K also
// acc_m with the mins term from bsums, 4 vpdpwssd), result acc - acc_m.
//
// Tiles (all 16 rows x 64 bytes): 0..3 C (token tile 0 lo / hi, 1 lo / hi),
// 4..5 A (two token tiles), 6 B lo, 7 B hi. A step (one super-block x two
// token tiles) issues 16 tile products; between its chunks run the vector
// parts of the work: the previous step's float sums (read from its stored C
// tiles) and the next super-block's expansion (double-buffered), so the two
// units overlap and no load reads bytes the other unit has just stored.
// Each call loads the tile configuration (constant data) and releases the
// tiles on return (a thread's AMX state stays clean between calls). Fewer
// than kKquantsR16MinTokens tokens take the AVX-512 kernels (the expansion is not
// paid back). One thread per call; no state outside the call but
// thread_local scratch.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/amx/tiles.h"
#include "kernels/cpu/avx512/kquants_unpack.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::amx {
namespace {

namespace kq = avx512::kq;

constexpr int kR = 16;       // rows per group = dwords per tile row
constexpr int kT = 16;       // tokens per A / C tile
constexpr int kChunks = 4;   // 64-element K chunks per super-block
constexpr size_t kTile = 1024;

// Eight 16 x 64-byte tiles.
alignas(64) constexpr TileConfig kTileConfig = make_config({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64},
                                                            {16, 64}, {16, 64}, {16, 64}});

inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// One super-block's expanded weights: lo / hi bytes, per chunk a B tile.
struct alignas(64) Expanded {
  uint8_t lo[kChunks][kTile];
  uint8_t hi[kChunks][kTile];
};

// we / wo: the i16 products of the even / odd bytes of a layout vector
// (lane r = row r's 4 elements); stores w's low bytes to lo, high to hi (one
// two-source byte permute each).
struct SplitIndex {
  alignas(64) uint8_t lo[64], hi[64];
};
constexpr SplitIndex make_split_index() {
  SplitIndex x{};
  for (int m = 0; m < 32; ++m) {
    x.lo[2 * m] = static_cast<uint8_t>(2 * m);           // we's low byte of lane m
    x.lo[2 * m + 1] = static_cast<uint8_t>(64 + 2 * m);  // wo's
    x.hi[2 * m] = static_cast<uint8_t>(2 * m + 1);       // their high bytes
    x.hi[2 * m + 1] = static_cast<uint8_t>(64 + 2 * m + 1);
  }
  return x;
}
constexpr SplitIndex kSplitIndex = make_split_index();
struct Splitter {
  __m512i lo_idx = _mm512_load_si512(kSplitIndex.lo), hi_idx = _mm512_load_si512(kSplitIndex.hi);
  void store(__m512i we, __m512i wo, uint8_t* lo, uint8_t* hi) const {
    _mm512_store_si512(lo, _mm512_permutex2var_epi8(we, lo_idx, wo));
    _mm512_store_si512(hi, _mm512_permutex2var_epi8(we, hi_idx, wo));
  }
};

struct Q4K {
  static constexpr size_t kBlockBytes = kR * sizeof(BlockQ4_K);
  // Chunk j = sub-blocks 2j (B rows 0..7: low nibbles of layout vector 8j + l)
  // and 2j + 1 (rows 8..15: high nibbles).
  static void expand(const uint8_t* p, Expanded& e, lanes::GroupPrefetch& pf, int j) {
    const kq::R16Q4KScales sc = kq::r16_q4k_scales(p);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const Splitter split;
    pf.step();
    // Scale bytes (sc, 0, sc, 0) per dword for the even bytes, (0, sc, 0, sc)
    // for the odd: vpmaddubsw gives each i16 lane one product.
    const __m512i sv = j < 2 ? sc.sc_lo : sc.sc_hi;
    const __m512i s0e = _mm512_shuffle_epi8(sv, kq::pair_index((2 * j) & 3)), s0o = _mm512_slli_epi16(s0e, 8);
    const __m512i s1e = _mm512_shuffle_epi8(sv, kq::pair_index((2 * j + 1) & 3)), s1o = _mm512_slli_epi16(s1e, 8);
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m512i q = _mm512_loadu_si512(p + kq::kR16Q4KQuants + 64 * (8 * j + l));
      const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      split.store(_mm512_maddubs_epi16(lo, s0e), _mm512_maddubs_epi16(lo, s0o), e.lo[j] + 64 * l, e.hi[j] + 64 * l);
      split.store(_mm512_maddubs_epi16(hi, s1e), _mm512_maddubs_epi16(hi, s1o), e.lo[j] + 64 * (8 + l),
                  e.hi[j] + 64 * (8 + l));
    }
  }
};

struct Q6K {
  static constexpr size_t kBlockBytes = kR * sizeof(BlockQ6_K);
  // Quants of elements 128h + 32e + 4k .. + 3 (group 8h + 2e + k / 4) go to
  // chunk 2h + e / 2, B row 8 (e % 2) + k.
  // Chunk j: h = j / 2, half = j % 2.
  static void expand(const uint8_t* p, Expanded& e, lanes::GroupPrefetch& pf, int j) {
    const Splitter split;
    const __m512i m00ff = _mm512_set1_epi16(0x00FF), m0000ffff = _mm512_set1_epi32(0xFFFF);
    const int h = j / 2, half = j % 2;
    pf.step();
    // Group 8h + 2e + half's scale bytes (sc, 0, sc, 0) / (0, sc, 0, sc) per
    // dword as for Q4_K; sc (q - 32) = sc q - 32 sc.
    __m512i se[4], so[4], c32[4];
#pragma GCC unroll 4
    for (int ee = 0; ee < 4; ++ee) {
      const __m512i v = kq::r16_q6k_scale(p, 8 * h + 2 * ee + half);  // i32, sign-extended
      const __m512i pair = _mm512_or_si512(_mm512_and_si512(v, m0000ffff), _mm512_slli_epi32(v, 16));  // sc, sc
      se[ee] = _mm512_and_si512(pair, m00ff);
      so[ee] = _mm512_slli_epi16(se[ee], 8);
      c32[ee] = _mm512_slli_epi16(pair, 5);
    }
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; ++kk) {
      const int k = 4 * half + kk;
      __m512i q[4];
      kq::r16_q6k_quants(p, h, k, q);
#pragma GCC unroll 4
      for (int ee = 0; ee < 4; ++ee) {
        const int c = 2 * h + ee / 2, row = 8 * (ee % 2) + k;
        split.store(_mm512_sub_epi16(_mm512_maddubs_epi16(q[ee], se[ee]), c32[ee]),
                    _mm512_sub_epi16(_mm512_maddubs_epi16(q[ee], so[ee]), c32[ee]), e.lo[c] + 64 * row,
                    e.hi[c] + 64 * row);
      }
    }
  }
};

// C_lo / C_hi of one or two token tiles (A rows at a0 / a1, stride xrb)
// against one expanded super-block, into c[0..3] (lo0, hi0, lo1, hi1).
// between(ch) runs after chunk ch's products are issued: vector work that
// overlaps the tile unit's (the previous step's float sums).
template <bool kSignedHi, class Between>
inline void tile_sums(const Expanded& e, const uint8_t* a0, const uint8_t* a1, size_t xrb, int32_t (*c)[kT * kR],
                      Between&& between) {
  tile_reads(e);  // the expansion's stores before the B loads (tiles.h)
  _tile_zero(0);
  _tile_zero(1);
  if (a1) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int ch = 0; ch < kChunks; ++ch) {
    _tile_loadd(4, a0 + 64 * ch, xrb);
    _tile_loadd(6, e.lo[ch], 64);
    _tile_loadd(7, e.hi[ch], 64);
    _tile_dpbsud(0, 4, 6);
    if constexpr (kSignedHi) _tile_dpbssd(1, 4, 7);
    else _tile_dpbsud(1, 4, 7);
    if (a1) {
      _tile_loadd(5, a1 + 64 * ch, xrb);
      _tile_dpbsud(2, 5, 6);
      if constexpr (kSignedHi) _tile_dpbssd(3, 5, 7);
      else _tile_dpbsud(3, 5, 7);
    }
    between(ch);
  }
  // The float sums' loads of these buffers (two steps ago) before the stores:
  // nothing else keeps the compiler from moving those loads past them.
  tile_writes(*reinterpret_cast<int32_t(*)[4][kT * kR]>(c));
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  if (a1) {
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
  }
  tile_writes(*reinterpret_cast<int32_t(*)[4][kT * kR]>(c));  // the C stores before the float sums' loads
}

// nc tokens (any >= 1) over nr rows (a multiple of 16): s[t * lds + r].
template <class K>
void run(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x, size_t xrb,
         int64_t nr, int nc) {
  constexpr bool kQ4 = std::is_same_v<K, Q4K>;
  const int64_t nb = n / kQK_K;
  const int tiles = (nc + kT - 1) / kT;
  // A rows of each token tile; a partial last tile reads a zero-padded copy.
  thread_local std::vector<const uint8_t*> tile_x;
  thread_local std::vector<uint8_t> pad;
  tile_x.resize(static_cast<size_t>(tiles));
  for (int t = 0; t < tiles; ++t) tile_x[t] = x + static_cast<size_t>(t) * kT * xrb;
  if (nc % kT) {
    const int full = nc / kT * kT;
    pad.assign(static_cast<size_t>(kT) * xrb, 0);
    std::memcpy(pad.data(), x + static_cast<size_t>(full) * xrb, static_cast<size_t>(nc - full) * xrb);
    tile_x[tiles - 1] = pad.data();
  }
  tile_memory_barrier();  // the pad's bytes before any A load (tiles.h)
  // Q4_K: the tokens' bsum pairs (kq::q4k_bsum_pairs) per super-block.
  thread_local std::vector<int32_t> pairs;
  if constexpr (kQ4) {
    pairs.resize(static_cast<size_t>(nc) * nb * 4);
    for (int t = 0; t < nc; ++t) {
      const auto* xt = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(t) * xrb);
      for (int64_t i = 0; i < nb; ++i) kq::q4k_bsum_pairs(xt[i], pairs.data() + (static_cast<size_t>(t) * nb + i) * 4);
    }
  }
  thread_local std::vector<float> accs;  // per token: acc, acc_m (16 lanes each)
  accs.resize(static_cast<size_t>(2 * nc) * kR);
  float* acc = accs.data();
  alignas(64) Expanded e[2];  // super-blocks i and i + 1 (see below)
  alignas(64) int32_t c[2][4][kT * kR];  // two steps' tile sums (see below)
  const size_t qs_off = offsetof(BlockQ8_K, qs);
  // One step = one super-block x one or two token tiles. Its tile sums are
  // turned into float sums only after the next step's tiles are issued: a
  // vector load right after the tile store that wrote its bytes stalls.
  struct Step {
    int64_t i;
    int t0, buf;
    bool two;
    __m512 d, dmin;
    __m512i mp[4];
  };
  // Tokens [st.t0 * kT + from, st.t0 * kT + to) of a step.
  auto finish_step = [&](const Step& st, int from, int to) {
    const int u_end = std::min(nc, st.t0 * kT + to);
    for (int u = st.t0 * kT + from; u < u_end; ++u) {
      const int tt = (u - st.t0 * kT) / kT, row = u % kT;
      const __m512i lo = _mm512_load_si512(c[st.buf][2 * tt] + kR * row);
      const __m512i hi = _mm512_load_si512(c[st.buf][2 * tt + 1] + kR * row);
      const __m512i sumi = _mm512_add_epi32(lo, _mm512_slli_epi32(hi, 8));
      const __m512 vxd = _mm512_set1_ps(reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(u) * xrb)[st.i].d);
      float* a = acc + 2 * kR * u;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(st.d, vxd), _mm512_loadu_ps(a)));
      if constexpr (kQ4) {
        const int32_t* bs = pairs.data() + (static_cast<size_t>(u) * nb + st.i) * 4;
        __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) summ = _mm512_dpwssd_epi32(summ, st.mp[j], _mm512_set1_epi32(bs[j]));
        _mm512_storeu_ps(a + kR, _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(st.dmin, vxd),
                                                 _mm512_loadu_ps(a + kR)));
      }
    }
  };
  TileScope scope(kTileConfig);
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const uint8_t* g = w + static_cast<size_t>(r0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(g + kR * w_row_bytes, kR * w_row_bytes, nb * 4);
    std::fill(accs.begin(), accs.end(), 0.0f);
    // Super-block i + 1 is expanded while i's tiles run (a chunk between
    // each of the first step's chunks), for the same two reasons: a tile
    // load right after the stores of its bytes stalls, and the vector work
    // overlaps the tile unit's.
    for (int j = 0; j < kChunks; ++j) K::expand(g, e[0], pf, j);
    Step prev{};
    bool pending = false;
    int buf = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* p = g + static_cast<size_t>(i) * K::kBlockBytes;
      const uint8_t* next = i + 1 < nb ? p + K::kBlockBytes : nullptr;
      Step st{};
      st.i = i;
      st.d = load_f16x16(p);
      if constexpr (kQ4) {
        st.dmin = load_f16x16(p + 32);
        kq::r16_q4k_min_pairs(kq::r16_q4k_scales(p), st.mp);
      }
      const size_t blk = static_cast<size_t>(i) * sizeof(BlockQ8_K);
      for (int t0 = 0; t0 < tiles; t0 += 2) {
        st.t0 = t0;
        st.two = t0 + 1 < tiles;
        st.buf = buf;
        // The previous step's float sums in four parts between this step's chunks.
        const int per = (prev.two ? 2 : 1) * kT / kChunks;
        tile_sums<!kQ4>(e[i & 1], tile_x[t0] + blk + qs_off, st.two ? tile_x[t0 + 1] + blk + qs_off : nullptr, xrb,
                        c[buf], [&](int ch) {
                          if (pending) finish_step(prev, ch * per, (ch + 1) * per);
                          if (next && t0 == 0) K::expand(next, e[(i + 1) & 1], pf, ch);
                        });
        prev = st;
        pending = true;
        buf ^= 1;
      }
    }
    if (pending) finish_step(prev, 0, 2 * kT);
    pf.finish();
    for (int u = 0; u < nc; ++u) {
      const float* a = acc + 2 * kR * u;
      _mm512_storeu_ps(s + u * lds + r0,
                       kQ4 ? _mm512_sub_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(a + kR)) : _mm512_loadu_ps(a));
    }
  }
}

}  // namespace

// The entry points. Fewer than kKquantsR16MinTokens tokens go to the AVX-512
// few-token form (same bits), for the tile too: it takes any multiple of 16
// rows, where the AVX-512 tile takes one group (a first version passed the
// AMX tile's 64 rows to it, and 48 rows went unwritten).
static_assert(kKquantsR16MinTokens - 1 <= avx512::kInterleavedFewMax, "the fallback's token counts fit the few-token form");
#define EMBER_AMX_ENTRY(name, K)                                                                                       \
  void name##_r16_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                             \
                      const void* x, size_t x_row_bytes, int64_t nr, int nc) {                                         \
    if (nc < kKquantsR16MinTokens)                                                                                     \
      return avx512::name##_r16_few(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);                                \
    run<K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes, nr,    \
           nc);                                                                                                        \
  }                                                                                                                    \
  void name##_r16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                            \
                       const void* x, size_t x_row_bytes, int nr, int nc) {                                            \
    name##_r16_few(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);                                                 \
  }
EMBER_AMX_ENTRY(q4_K, Q4K)
EMBER_AMX_ENTRY(q6_K, Q6K)
#undef EMBER_AMX_ENTRY

}  // namespace ember::amx
