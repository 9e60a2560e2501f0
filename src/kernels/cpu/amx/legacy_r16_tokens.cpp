// AMX-INT8 token-lane kernels over the interleaved Q4_0_R16 / Q5_0_R16 /
// Q8_0_R16 layouts (kernels/interleave.h) x Q8_0 activations: the matmuls
// of many tokens (prefill, batched decode) at the amx level, in the lane
// contract of the AVX-512 kernels (avx512/legacy_r16_lanes.cpp): per block
// b in order acc = fma(float(isum_b), d_w[b] * d_x[b], acc), isum_b the
// exact integer dot of the weight quants minus their offset and the
// activation quants; so the results equal theirs (and the base types') bit
// for bit.
//
// How. A block is 32 elements, so each tile product covers one block: A =
// 16 tokens x 32 quants (i8), B = 8 x 64 bytes (B row k: dword r = row r's
// elements 4k .. 4k + 3, the layout's own lane order), C = isum of 16
// tokens x 16 rows, exact in int32. The weights go in as signed quants: Q8_0
// as stored; Q4_0 / Q5_0 minus their offset, unpacked once per group and
// pass into a buffer of B tiles (the call's token tiles share it). The float
// steps run on the vector units, one zmm per token (16 rows): load C's row,
// convert, multiply d_w by the token's d_x, fma; 3 vector operations per
// token and block where the AVX-512 kernel has 8 vpdpbusd + 3. Blocks go in
// pairs: both products issue before either C tile is stored (the tile unit
// runs in order), and the previous pair's float steps run between these
// tile instructions (a vector load soon after the tile store of its bytes
// stalls, and the vector units get work while the tile unit runs). A pass
// covers 64 blocks of every token tile and group of the call, the sums
// kept in memory between passes (same order, same bits).
//
// The activations are packed once per matmul (pack(), parallel over blocks):
// per 16-token tile and block, the 16 x 32 quants contiguous (one A tile,
// 32 bytes a row), then per tile and block the 16 tokens' f32 scales;
// tokens past the count are zero (quants and scales), so a partial last
// tile needs no other care. One thread per call; no state outside the call
// but thread_local scratch.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx/tiles.h"
#include "kernels/cpu/avx512/legacy_r16_layout.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::amx {
namespace {

using avx512::legacy::Layout;
using avx512::legacy::Legacy;

constexpr int kR = 16;           // rows per group = dwords per B row
constexpr int kT = 16;           // tokens per A / C tile
constexpr size_t kATile = 512;   // 16 tokens x 32 quants
constexpr size_t kBTile = 512;   // 8 rows x 64 bytes

// Tiles 0 / 1: C (the first / second block of a pair), 2 / 3: A, 4 / 5: B.
alignas(64) constexpr TileConfig kTileConfig =
    make_config({{16, 64}, {16, 64}, {16, 32}, {16, 32}, {8, 64}, {8, 64}, {0, 0}, {0, 0}});

// The packed activations: the A tiles (tiles x nb x 512 bytes), then the
// scales (tiles x nb x 16 floats).
size_t packed_bytes(int64_t n, int nc) {
  const size_t tiles = static_cast<size_t>((nc + kT - 1) / kT);
  return tiles * static_cast<size_t>(n / 32) * (kATile + kT * sizeof(float));
}

void pack(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b, int64_t e) {
  const int64_t nb = n / 32;
  const int tiles = (nc + kT - 1) / kT;
  uint8_t* qs = static_cast<uint8_t*>(packed);
  float* ds = reinterpret_cast<float*>(qs + static_cast<size_t>(tiles) * nb * kATile);
  for (int t = 0; t < tiles * kT; ++t) {
    const int tile = t / kT, row = t % kT;
    for (int64_t i = b; i < e; ++i) {
      const size_t step = static_cast<size_t>(tile) * nb + i;
      uint8_t* q = qs + step * kATile + 32 * row;
      float* d = ds + step * kT + row;
      if (t < nc) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(x) + t * x_row_bytes)[i];
        std::memcpy(q, blk.qs, 32);
        *d = _cvtsh_ss(blk.d);
      } else {
        std::memset(q, 0, 32);
        *d = 0.0f;
      }
    }
  }
}

// Block b of a group at p as a B tile of signed quants (Q4_0 / Q5_0: rows
// 0..3 the low nibble vectors, 4..7 the high, minus the offset).
template <Legacy K>
inline void unpack_b(const uint8_t* p, uint8_t* out) {
  const __m512i off = _mm512_set1_epi8(static_cast<char>(Layout<K>::kOffset));
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m512i lo, hi;
    avx512::legacy::quants<K>(p, k, &lo, &hi);
    _mm512_storeu_si512(out + 64 * k, _mm512_sub_epi8(lo, off));
    _mm512_storeu_si512(out + 64 * (4 + k), _mm512_sub_epi8(hi, off));
  }
}

// A block's tile product: tiles C (zeroed), A (the token tile's quants of
// the block, at a), B (at b); stored by the caller. A macro: GCC's tile
// intrinsics paste their tile numbers into the instruction text.
#define EMBER_AMX_PRODUCT(C, A, B, a, b)                                                                               \
  do {                                                                                                                 \
    _tile_zero(C);                                                                                                     \
    _tile_loadd(A, a, 32);                                                                                             \
    _tile_loadd(B, b, 64);                                                                                             \
    _tile_dpbssd(C, A, B);                                                                                             \
  } while (0)

// acc[u] = fma(float(c[u]), d_w * d_x[u], acc[u]) for the 16 tokens of a
// tile: the lane kernels' float step of one block (d_w: the block's 16 f16
// scales at dw).
inline __m512 block_scale(const uint8_t* dw) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dw)));
}
// Tokens u0 .. u0 + 7 of the step (acc: their 8 accumulators).
inline void block_step8(__m512 (&acc)[kT / 2], const int32_t* c, __m512 d, const float* dx, int u0) {
#pragma GCC unroll 8
  for (int u = 0; u < kT / 2; ++u)
    acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + kR * (u0 + u))),
                             _mm512_mul_ps(d, _mm512_set1_ps(dx[u0 + u])), acc[u]);
}

// Block pairs in flight: a pair's sums are converted kLag pairs later (a
// vector load soon after the tile store of its bytes stalls).
constexpr int kLag = 1;

// One token tile (A tiles at a, scales dx) against nb blocks of one group
// (blocks at g, B tiles at b, kBStride apart), continuing the sums in acc
// (16 x 16 floats; zero: start from 0); then out[u] lane r = token u, row r
// when out, else the sums back to acc.
template <size_t kBlock, size_t kBStride>
void token_tile(int64_t nb, const uint8_t* g, const uint8_t* b, const uint8_t* a, const float* dx,
                lanes::GroupPrefetch* pf, float* acc, bool zero, float* out, int64_t lds, int nt) {
  alignas(64) int32_t c[kLag + 1][2][kT * kR];
  // Two arrays of 8: GCC keeps arrays up to 512 bytes in registers, not 1 KB.
  __m512 lo[kT / 2], hi[kT / 2];
#pragma GCC unroll 8
  for (int u = 0; u < kT / 2; ++u) {
    lo[u] = zero ? _mm512_setzero_ps() : _mm512_load_ps(acc + kR * u);
    hi[u] = zero ? _mm512_setzero_ps() : _mm512_load_ps(acc + kR * (kT / 2 + u));
  }
  // The float steps of block j (no lambda for these: GCC then keeps lo / hi
  // in memory); between a pair's tile instructions, so the vector units
  // have work while the tile unit runs.
#define EMBER_CBUF(j) c[(j) / 2 % (kLag + 1)][(j) % 2]
#define EMBER_DW(j) block_scale(g + static_cast<size_t>(j) * kBlock)
  const int64_t pairs = (nb + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    if (pf) {
      pf->step();
      pf->step();
    }
    const int64_t i = 2 * q, j = 2 * (q - kLag);
    const uint8_t* ai = a + static_cast<size_t>(i) * kATile;
    const uint8_t* bi = b + static_cast<size_t>(i) * kBStride;
    int32_t(&cq)[2][kT * kR] = c[q % (kLag + 1)];
    tile_writes(cq);  // earlier loads of these buffers before the stores (tiles.h)
    if (q >= kLag) {  // (then blocks j and j + 1 both exist)
      const __m512 d0 = EMBER_DW(j), d1 = EMBER_DW(j + 1);
      const float* x0 = dx + j * kT;
      const float* x1 = x0 + kT;
      EMBER_AMX_PRODUCT(0, 2, 4, ai, bi);
      block_step8(lo, EMBER_CBUF(j), d0, x0, 0);
      if (i + 1 < nb) EMBER_AMX_PRODUCT(1, 3, 5, ai + kATile, bi + kBStride);
      block_step8(hi, EMBER_CBUF(j), d0, x0, kT / 2);
      _tile_stored(0, cq[0], 64);
      block_step8(lo, EMBER_CBUF(j + 1), d1, x1, 0);
      if (i + 1 < nb) _tile_stored(1, cq[1], 64);
      block_step8(hi, EMBER_CBUF(j + 1), d1, x1, kT / 2);
    } else {
      EMBER_AMX_PRODUCT(0, 2, 4, ai, bi);
      if (i + 1 < nb) EMBER_AMX_PRODUCT(1, 3, 5, ai + kATile, bi + kBStride);
      _tile_stored(0, cq[0], 64);
      if (i + 1 < nb) _tile_stored(1, cq[1], 64);
    }
    tile_writes(cq);  // the stores before the float steps' loads
  }
  for (int64_t j = 2 * std::max<int64_t>(0, pairs - kLag); j < nb; ++j) {
    const __m512 d = EMBER_DW(j);
    block_step8(lo, EMBER_CBUF(j), d, dx + j * kT, 0);
    block_step8(hi, EMBER_CBUF(j), d, dx + j * kT, kT / 2);
  }
#undef EMBER_CBUF
#undef EMBER_DW
  if (!out) {
#pragma GCC unroll 8
    for (int u = 0; u < kT / 2; ++u) {
      _mm512_store_ps(acc + kR * u, lo[u]);
      _mm512_store_ps(acc + kR * (kT / 2 + u), hi[u]);
    }
    return;
  }
#pragma GCC unroll 8
  for (int u = 0; u < kT / 2; ++u) {
    if (u < nt) _mm512_storeu_ps(out + u * lds, lo[u]);
    if (kT / 2 + u < nt) _mm512_storeu_ps(out + (kT / 2 + u) * lds, hi[u]);
  }
}

// Blocks per pass over the tokens: a pass keeps its K range of every
// token tile's activations in L2 (64 blocks: 32 KB a tile, 1 MB for 512
// tokens) for all the call's groups, and its B tiles in L1 for all tiles;
// over longer rows (ffn_down: 8960 / 14336) whole rows re-read every token
// tile's activations for every group from L3. The sums between passes stay
// in memory, in block order, so the bits are the same.
constexpr int64_t kPassBlocks = 64;

// nc tokens (packed) over nr rows (a multiple of 16) at w: s[t * lds + r].
template <Legacy K>
void run(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* packed, int64_t nr,
         int nc) {
  using L = Layout<K>;
  constexpr bool kUnpack = K != Legacy::kQ8_0;
  constexpr size_t kBStride = kUnpack ? kBTile : L::kBlock;
  const int64_t nb = n / 32;
  const int tiles = (nc + kT - 1) / kT;
  const int64_t groups = nr / kR;
  const uint8_t* qs = packed;
  const float* ds = reinterpret_cast<const float*>(qs + static_cast<size_t>(tiles) * nb * kATile);
  thread_local std::vector<uint8_t> bbuf;
  thread_local std::vector<float> accs;  // per group and tile, 16 x 16 (several passes only)
  if constexpr (kUnpack) bbuf.resize(static_cast<size_t>(std::min(nb, kPassBlocks)) * kBTile);
  if (nb > kPassBlocks) accs.resize(static_cast<size_t>(groups) * tiles * kT * kR + 16);
  // 64-byte aligned (token_tile's aligned loads / stores); null with one pass (never read).
  float* acc0 = nb > kPassBlocks
                    ? reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(accs.data()) + 63) / 64 * 64)
                    : nullptr;
  TileScope scope(kTileConfig);
  for (int64_t k0 = 0; k0 < nb; k0 += kPassBlocks) {
    const int64_t kn = std::min(kPassBlocks, nb - k0);
    const bool first = k0 == 0, last = k0 + kn == nb;
    for (int64_t gi = 0; gi < groups; ++gi) {
      const uint8_t* g = w + static_cast<size_t>(gi * kR) * w_row_bytes + static_cast<size_t>(k0) * L::kBlock;
      // This pass's blocks of the next group (the next call's first group's
      // past the last; see avx512/kquants_r16_few.cpp).
      auto pf = lanes::GroupPrefetch(g + kR * w_row_bytes, static_cast<size_t>(kn) * L::kBlock, kn);
      if constexpr (kUnpack) {
        for (int64_t i = 0; i < kn; ++i) {
          pf.step();
          unpack_b<K>(g + static_cast<size_t>(i) * L::kBlock, bbuf.data() + static_cast<size_t>(i) * kBTile);
        }
        tile_memory_barrier();  // the unpacked bytes before the B loads (tiles.h)
      }
      // B tiles: unpacked (Q4_0 / Q5_0) or in place (Q8_0).
      const uint8_t* b = kUnpack ? bbuf.data() : g + L::kQs;
      for (int t = 0; t < tiles; ++t) {
        const size_t step = static_cast<size_t>(t) * nb + k0;
        token_tile<L::kBlock, kBStride>(kn, g, b, qs + step * kATile, ds + step * kT,
                                         !kUnpack && t == 0 ? &pf : nullptr,
                                         acc0 ? acc0 + (static_cast<size_t>(gi) * tiles + t) * kT * kR : nullptr, first,
                                         last ? s + static_cast<int64_t>(t) * kT * lds + gi * kR : nullptr, lds,
                                         std::min(kT, nc - t * kT));
      }
      pf.finish();
    }
  }
}

#undef EMBER_AMX_PRODUCT

}  // namespace

// Q4_0 / Q5_0 below kLegacyR16NibbleTokensMin tokens: the AVX-512 token lanes
// and their pack (the unpacking of each group is not paid back by one or
// two token tiles). The pack and the kernel choose by the same count.
size_t legacy_r16_tokens_pack_bytes(int64_t n, int nc) {
  return std::max(packed_bytes(n, nc), avx512::legacy_r16_tokens_pack_bytes(n, nc));
}

#define EMBER_AMX_LEGACY(name, kind, min_tokens)                                                                       \
  void name##_r16_tokens_pack(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed,                      \
                              int64_t b, int64_t e) {                                                                  \
    if (nc < min_tokens) return avx512::name##_r16_tokens_pack(n, x, x_row_bytes, nc, packed, b, e);                   \
    pack(n, x, x_row_bytes, nc, packed, b, e);                                                                         \
  }                                                                                                                    \
  void name##_r16_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                          \
                         const void* packed, int64_t nr, int nc) {                                                     \
    if (nc < min_tokens)                                                                                               \
      return avx512::name##_r16_tokens(n, s, lds, w, w_row_bytes, packed, nr, nc);                                     \
    run<kind>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(packed), nr, nc);    \
  }
EMBER_AMX_LEGACY(q4_0, Legacy::kQ4_0, kLegacyR16NibbleTokensMin)
EMBER_AMX_LEGACY(q5_0, Legacy::kQ5_0, kLegacyR16NibbleTokensMin)
EMBER_AMX_LEGACY(q8_0, Legacy::kQ8_0, 0)
#undef EMBER_AMX_LEGACY

}  // namespace ember::amx
