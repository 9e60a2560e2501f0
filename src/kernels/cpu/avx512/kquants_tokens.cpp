// AVX-512 VNNI "token lanes" kernels for Q4_K, Q5_K and Q6_K x Q8_K: a few
// tokens (up to 16, one per zmm lane: batched decode of many sequences)
// against any number of weight rows.
//
// Arithmetic: exactly the row-lane contract of avx512/kquants_lanes.cpp
// (integer sums per super-block, then acc = fma(float(sumi), d * x.d, acc),
// acc_m likewise, result acc - acc_m; scalar twins in
// kernels/ref/kquants_lanes.h), so every output is bit-identical to
// vec_dot, vec_dot_rows and vec_dot_tile of this level.
//
// Why this form: the row-lane tile (16 rows x up to 64 tokens) transposes its
// 16 rows' quants for every call; with 16 tokens that transposition costs as
// much as the products. Here the activations are transposed instead, once
// per matmul (pack_tokens: dword k of the super-block of token t -> lane t of
// vector k), and each weight row is only unpacked (nibbles -> bytes) into a
// small stack buffer: one vpdpbusd with a broadcast weight dword (unsigned
// quants) advances all 16 tokens. Scales, mins and the float steps are one
// instruction per row for 16 tokens. Q4_K: half sub-blocks (16 products,
// |sum| <= 16 * 15 * 127 < 2^15) are packed into the i16 halves of each lane
// and weighted by the row's (sc, sc) pair with one vpdpwssd; mins come from
// the transposed sub-block sums x the row's (m_s, m_s+1) pairs. Q6_K: each group's sum
// is weighted by one vpmulld and the offset 32 enters as
// -32 * sum_g sc_g * bsums[g], as in the row lanes.
//
// Rows run four at a time (their accumulators stay in registers), the next
// four prefetched meanwhile; 16 rows' results are transposed back to the
// [token][row] output with one 16 x 16 transpose. Measured against the tile
// (bench_gemm, one thread): about 1.24x (Q4_K) and 1.5x (Q6_K) at 16
// tokens, even at 12, behind it below that (idle lanes) and at 24-32 tokens
// (where the tile's transposition is shared by enough tokens): hence
// kKquantsTokensMin .. kKquantsTokensMax.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/cpu/avx512/kquants_unpack.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/kquants_lanes.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

using lanes::block_at;

constexpr int kLanes = 16;  // tokens (one per zmm lane)
static_assert(kKquantsTokensMax == kLanes, "one token per lane");

// One super-block of the tokens, transposed.
struct alignas(64) PackedTokens {
  __m512i q[64];  // q[k] lane t: quants 4k .. 4k + 3 of token t
  __m512i bs[8];  // bs[j] lane t: i16 pair (bsums[2j], bsums[2j + 1]) of token t
  __m512i bs2[4];  // bs2[j] lane t: i16 pair (the sums of 32-element sub-blocks 2j, 2j + 1)
  __m512 d;        // lane t: x.d of token t
};

inline __m512i bcast(const int32_t* p) { return _mm512_set1_epi32(*p); }
inline __m512i bcast(const uint8_t* p) { return _mm512_set1_epi32(static_cast<int>(simd::load_u32(p))); }

// One weight row's super-block, unpacked for broadcasting.
struct alignas(64) RowQ4K {
  uint8_t q[kQK_K];  // unsigned quants in element order
  int32_t sc[8];     // (sc_s, sc_s) i16 pairs (Q5_K: sc_s)
  int32_t mn[4];     // (m_2j, m_2j+1) i16 pairs
  float d, dmin;
};

struct alignas(64) RowQ6K {
  uint8_t q[kQK_K];  // unsigned quants 0..63 in element order
  int32_t sc[16];    // the signed group scales
  int32_t scp[8];    // (sc_2k, sc_2k+1) i16 pairs
  float d;
};

// Q4_K and Q5_K (kFive: quants 0..31, whose 16-product half sub-block sums
// can pass 2^15: the sub-block sum stays i32 and is weighted with one
// vpmulld; sc then holds the plain scales).
template <bool kFive>
struct TokScaleMin {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  using Row = RowQ4K;

  static void prep(const Block& b, Row& r) {
    __m512i u[4];
    if constexpr (kFive)
      kq::unpack_q5(b, u);
    else
      kq::unpack_nibbles(b, u);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(r.q + 64 * j, u[j]);
    alignas(16) uint8_t sm[16];
    simd::unpack_k4_scales(b.scales, sm, sm + 8);
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(r.sc), kFive ? v : _mm256_or_si256(v, _mm256_slli_epi32(v, 16)));
    for (int j = 0; j < 4; ++j) r.mn[j] = sm[8 + 2 * j] | (sm[9 + 2 * j] << 16);
    r.d = f16_to_f32(b.d);
    r.dmin = f16_to_f32(b.dmin);
  }

  // P rows, one super-block of the tokens x.
  template <int P>
  static void step(const Row* rw, const PackedTokens& x, __m512 acc[P], __m512 acc_m[P]) {
    __m512i sumi[P], summ[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      summ[p] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), x.bs2[0], bcast(&rw[p].mn[0]));
#pragma GCC unroll 3
      for (int j = 1; j < 4; ++j) summ[p] = _mm512_dpwssd_epi32(summ[p], x.bs2[j], bcast(&rw[p].mn[j]));
      sumi[p] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      __m512i a[P], b[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) a[p] = b[p] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const __m512i xa = _mm512_load_si512(&x.q[8 * s + l]);
        const __m512i xb = _mm512_load_si512(&x.q[8 * s + 4 + l]);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) {
          a[p] = _mm512_dpbusd_epi32(a[p], bcast(rw[p].q + 32 * s + 4 * l), xa);
          b[p] = _mm512_dpbusd_epi32(b[p], bcast(rw[p].q + 32 * s + 16 + 4 * l), xb);
        }
      }
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        if constexpr (kFive)
          sumi[p] = _mm512_add_epi32(sumi[p], _mm512_mullo_epi32(_mm512_add_epi32(a[p], b[p]), bcast(&rw[p].sc[s])));
        else
          sumi[p] = _mm512_dpwssd_epi32(
              sumi[p], _mm512_mask_blend_epi16(0xAAAAAAAA, a[p], _mm512_slli_epi32(b[p], 16)), bcast(&rw[p].sc[s]));
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[p]), _mm512_mul_ps(_mm512_set1_ps(rw[p].d), x.d), acc[p]);
      acc_m[p] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[p]), _mm512_mul_ps(_mm512_set1_ps(rw[p].dmin), x.d), acc_m[p]);
    }
  }
};

using TokQ4K = TokScaleMin<false>;
using TokQ5K = TokScaleMin<true>;

struct TokQ6K {
  using Block = BlockQ6_K;
  using Row = RowQ6K;

  static void prep(const Block& b, Row& r) {
    __m512i u[4];
    kq::unpack_q6(b, u);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(r.q + 64 * j, u[j]);
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    _mm512_store_si512(r.sc, sc);
    // Pairs: low word sc_2k, high word sc_2k+1 (both as i16).
    _mm256_store_si256(reinterpret_cast<__m256i*>(r.scp), _mm512_cvtepi32_epi16(sc));
    r.d = f16_to_f32(b.d);
  }

  template <int P>
  static void step(const Row* rw, const PackedTokens& x, __m512 acc[P], __m512*) {
    __m512i sumi[P], corr[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      corr[p] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), x.bs[0], bcast(&rw[p].scp[0]));
#pragma GCC unroll 7
      for (int k = 1; k < 8; ++k) corr[p] = _mm512_dpwssd_epi32(corr[p], x.bs[k], bcast(&rw[p].scp[k]));
      sumi[p] = _mm512_setzero_si512();
    }
#pragma GCC unroll 16
    for (int gq = 0; gq < 16; ++gq) {
      __m512i a[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) a[p] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const __m512i xv = _mm512_load_si512(&x.q[4 * gq + l]);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) a[p] = _mm512_dpbusd_epi32(a[p], bcast(rw[p].q + 16 * gq + 4 * l), xv);
      }
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) sumi[p] = _mm512_add_epi32(sumi[p], _mm512_mullo_epi32(a[p], bcast(&rw[p].sc[gq])));
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const __m512i v = _mm512_sub_epi32(sumi[p], _mm512_slli_epi32(corr[p], 5));
      acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(_mm512_set1_ps(rw[p].d), x.d), acc[p]);
    }
  }
};

// Prefetches block i of the `n_next` (<= P) rows at `next` (the next pass's
// rows, fetched a block per step of this pass, so they are in cache when
// that pass starts).
template <class Block>
inline void prefetch_next(const uint8_t* next, size_t w_row_bytes, int n_next, int64_t i) {
  for (int p = 0; p < n_next; ++p) {
    const char* b = reinterpret_cast<const char*>(next + static_cast<size_t>(p) * w_row_bytes) + i * sizeof(Block);
    for (size_t o = 0; o < sizeof(Block); o += 64) lanes::prefetch_line<true>(b + o);
    lanes::prefetch_line<true>(b + sizeof(Block) - 1);
  }
}

constexpr int kP = 4;  // weight rows per pass (their accumulators stay in registers)

// Rows r0 .. r0 + kP of the 16-row group at g16 (clamped to its gr rows) over
// all super-blocks: res[r] lane t = result for row r of the group, token t.
template <class T>
void row_pass(int64_t nb, const uint8_t* g16, size_t w_row_bytes, int gr, int r0, const PackedTokens* packed,
              int n_next, __m512 res[kLanes]) {
  using Block = typename T::Block;
  __m512 acc[kP], acc_m[kP];
  for (int p = 0; p < kP; ++p) acc[p] = acc_m[p] = _mm512_setzero_ps();
  // Unpacked one super-block ahead, so the step's 4-byte loads come well
  // after the wide stores that wrote them (measured: ~5% faster).
  typename T::Row rw[2][kP];
  const uint8_t* next = g16 + static_cast<size_t>(r0 + kP) * w_row_bytes;
  for (int p = 0; p < kP; ++p) T::prep(*block_at<Block>(g16, w_row_bytes, gr, r0 + p, 0), rw[0][p]);
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_next<Block>(next, w_row_bytes, n_next, i);
    if (i + 1 < nb)
      for (int p = 0; p < kP; ++p) T::prep(*block_at<Block>(g16, w_row_bytes, gr, r0 + p, i + 1), rw[(i + 1) & 1][p]);
    T::template step<kP>(rw[i & 1], packed[i], acc, acc_m);
  }
  for (int p = 0; p < kP; ++p) res[r0 + p] = _mm512_sub_ps(acc[p], acc_m[p]);
}

template <class T>
void tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* packed, int64_t nr,
            int nc) {
  const int64_t nb = n / kQK_K;
  const auto* pk = static_cast<const PackedTokens*>(packed);
  for (int64_t rg = 0; rg < nr; rg += kLanes) {
    const int gr = static_cast<int>(std::min<int64_t>(kLanes, nr - rg));
    const uint8_t* g16 = static_cast<const uint8_t*>(w) + static_cast<size_t>(rg) * w_row_bytes;
    __m512 res[kLanes];
    for (int r0 = 0; r0 < gr; r0 += kP) {
      const int n_next = static_cast<int>(std::clamp<int64_t>(nr - (rg + r0 + kP), 0, kP));
      row_pass<T>(nb, g16, w_row_bytes, gr, r0, pk, n_next, res);
    }
    const int filled = (gr + kP - 1) / kP * kP;
    __m512i in[kLanes], out[kLanes];
    for (int r = 0; r < kLanes; ++r) in[r] = _mm512_castps_si512(res[std::min(r, filled - 1)]);
    kq::transpose16(in, out);  // out[t] lane r = result of row rg + r, token t
    const __mmask16 mask = static_cast<__mmask16>((1u << gr) - 1);
    for (int t = 0; t < nc; ++t) _mm512_mask_storeu_ps(s + t * lds + rg, mask, _mm512_castsi512_ps(out[t]));
  }
}

}  // namespace

size_t kquants_tokens_pack_bytes(int64_t n, int) { return static_cast<size_t>(n / kQK_K) * sizeof(PackedTokens); }

void kquants_tokens_pack(int64_t, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b, int64_t e) {
  auto* out = static_cast<PackedTokens*>(packed);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int64_t i = b; i < e; ++i) {
    PackedTokens& pk = out[i];
    const BlockQ8_K* blk[kLanes];
    for (int t = 0; t < nc; ++t) blk[t] = reinterpret_cast<const BlockQ8_K*>(xb + static_cast<size_t>(t) * x_row_bytes) + i;
    __m512i in[kLanes];
    for (int m = 0; m < 4; ++m) {
      for (int t = 0; t < kLanes; ++t) in[t] = t < nc ? _mm512_loadu_si512(blk[t]->qs + 64 * m) : _mm512_setzero_si512();
      kq::transpose16(in, pk.q + 16 * m);
    }
    __m512i bt[kLanes];
    for (int t = 0; t < kLanes; ++t)
      in[t] = t < nc ? _mm512_zextsi256_si512(kq::loadu(blk[t]->bsums)) : _mm512_setzero_si512();
    kq::transpose16(in, bt);
    for (int j = 0; j < 8; ++j) pk.bs[j] = bt[j];
    // Sub-block sums (|sum| <= 32 * 127, an exact i16): the pair sums of bs,
    // repacked two sub-blocks per dword.
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF), ones = _mm512_set1_epi16(1);
    for (int j = 0; j < 4; ++j) {
      const __m512i s0 = _mm512_madd_epi16(bt[2 * j], ones), s1 = _mm512_madd_epi16(bt[2 * j + 1], ones);
      pk.bs2[j] = _mm512_or_si512(_mm512_and_si512(s0, lo16), _mm512_slli_epi32(s1, 16));
    }
    alignas(64) float d[kLanes];
    for (int t = 0; t < kLanes; ++t) d[t] = t < nc ? blk[t]->d : 0.0f;  // idle lanes: 0, never stored
    pk.d = _mm512_load_ps(d);
  }
}

void q4_K_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                 const void* packed, int64_t nr, int nc) {
  tokens<TokQ4K>(n, s, lds, w, w_row_bytes, packed, nr, nc);
}

void q5_K_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                 const void* packed, int64_t nr, int nc) {
  tokens<TokQ5K>(n, s, lds, w, w_row_bytes, packed, nr, nc);
}

void q6_K_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                 const void* packed, int64_t nr, int nc) {
  tokens<TokQ6K>(n, s, lds, w, w_row_bytes, packed, nr, nc);
}

}  // namespace ember::avx512
