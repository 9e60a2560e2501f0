// Declarations of the x86 SIMD kernels of the CPU backend: namespace avx2
// (kernels/cpu/avx2/*.cpp), avx512 (kernels/cpu/avx512/*.cpp, compiled
// with AVX-512 flags) and amx (kernels/cpu/amx/*.cpp, AVX-512 + VBMI + AMX
// tile / INT8 flags). The matmul kernels match the registry's function
// pointer types (kernels/registry.h), the row ops and attention those of the
// op table (kernels/cpu/op_table.h); only those two tables refer to them,
// and install the avx512 ones only when cpu_max_isa() says the CPU has
// AVX-512 F/BW/VL/DQ + VNNI, the amx ones only when it also has AMX-INT8
// granted by the OS.
//
// Names read ISA, type, form (the scheme is stated once, atop
// kernels/cpu/registry.cpp): files <isa>/<type>_<form>.cpp, functions
// <isa>::<type>_<form> (avx512::q4_K_rows: vec_dot_rows of Q4_K at the
// AVX-512 level), constants <isa>::k<Type><Form><What>.
//
// Activation preconditions (hold for everything our activation quantizers
// produce): Q8_0/Q8_1/Q8_K activation quants lie in [-127, 127].
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/act_sparse.h"
#include "kernels/attention.h"
#include "kernels/hadamard.h"
#include "kernels/ops.h"
#include "kernels/registry.h"

namespace ember {

// The kernel signatures of kernels/registry.h as function types, so that a
// kernel is declared by name only (`DotKernel q4_0_dot;`) and its
// parameters are written once, in registry.h.
using DotKernel = std::remove_pointer_t<VecDotFn>;
using RowsKernel = std::remove_pointer_t<VecDotRowsFn>;
using FewKernel = std::remove_pointer_t<VecDotFewFn>;
using TokensKernel = std::remove_pointer_t<VecDotTokensFn>;
using TokensPackKernel = std::remove_pointer_t<PackTokensFn>;
using TokensPackBytesKernel = std::remove_pointer_t<TokensPackBytesFn>;
using TileKernel = std::remove_pointer_t<VecDotTileFn>;
using QuantizeKernel = std::remove_pointer_t<QuantizeRowFn>;
using DequantizeKernel = std::remove_pointer_t<DequantizeRowFn>;

namespace avx2 {

// Float weights x f32 activations.
DotKernel f32_dot, f16_dot, bf16_dot;
// Legacy 32-element blocks: Q4_1 / Q5_1 (avx2/legacy_dot.cpp; per block 8
// i32 lane sums fma'd in f32).
DotKernel q4_1_dot, q5_1_dot;
// Q4_0 / Q5_0 / Q8_0 in the row-lane form (avx2/legacy_lanes.cpp): the
// arithmetic of the AVX-512 lane kernels (avx512/legacy_lanes.cpp), so these
// types give the same bits at both levels. vec_dot; decode over any nr >= 1
// rows (8-row groups, the next group prefetched into L2); the token-lane
// form over activations packed once per matmul (prefill, batched decode:
// 2 <= nc, any nr >= 1); the tile of kLegacyTileRows x kLegacyTileCols; and
// (r16) decode and token lanes over the interleaved Q4_0_R16 / Q5_0_R16 /
// Q8_0_R16 layouts (nr a multiple of 16, each 8-row half read without
// transposes).
constexpr int kLegacyTileRows = 16;
constexpr int kLegacyTileCols = 64;
DotKernel q4_0_dot, q5_0_dot, q8_0_dot;
RowsKernel q4_0_rows, q5_0_rows, q8_0_rows;
TileKernel q4_0_tile, q5_0_tile, q8_0_tile;
TokensKernel q4_0_tokens, q5_0_tokens, q8_0_tokens;
TokensPackKernel q4_0_tokens_pack, q5_0_tokens_pack, q8_0_tokens_pack;
RowsKernel q4_0_r16_rows, q5_0_r16_rows, q8_0_r16_rows;
TokensKernel q4_0_r16_tokens, q5_0_r16_tokens, q8_0_r16_tokens;
TokensPackBytesKernel legacy_tokens_pack_bytes;
// MXFP4 x Q8_0 (avx2/mxfp4_dot.cpp): vec_dot, decode and the tile of up to
// kMxfp4TileRows rows x kMxfp4TileCols tokens (each block pair of a row
// decoded once for up to 4 tokens, each token's sums in vec_dot's order);
// the arithmetic stated atop that file.
constexpr int kMxfp4TileRows = 4;
constexpr int kMxfp4TileCols = 16;
DotKernel mxfp4_dot;
RowsKernel mxfp4_rows;
TileKernel mxfp4_tile;
// K-quants (256-element super-blocks).
DotKernel q2_K_dot;
DotKernel q3_K_dot;

// Tile kernels (VecDotTileFn), bit-identical to the vec_dot above for every
// (row, token) pair.
// K-quants Q2_K, Q3_K (avx2/kquants_tile.cpp): up to kKquantsTileRows rows x
// kKquantsTileCols tokens.
constexpr int kKquantsTileRows = 4;
constexpr int kKquantsTileCols = 64;
TileKernel q2_K_tile, q3_K_tile;
// Float weights (avx2/float_tile.cpp): up to kFloatTileRows rows x
// kFloatTileCols tokens.
constexpr int kFloatTileRows = 4;
constexpr int kFloatTileCols = 60;
TileKernel f32_tile, f16_tile, bf16_tile;

// Q4_K, Q5_K and Q6_K in the row-lane form (avx2/kquants_lanes.cpp): the
// arithmetic of the AVX-512 row lanes (twins in kernels/ref/kquants_lanes.h),
// so these types give the same bits at both levels. vec_dot, decode over any
// nr >= 1 rows in 8-row groups, and the tile of kKquantsLanesTileRows rows x up to
// kKquantsLanesTileCols tokens (each call transposes its rows once).
constexpr int kKquantsLanesTileRows = 8;
constexpr int kKquantsLanesTileCols = 64;
DotKernel q4_K_dot, q5_K_dot, q6_K_dot;
RowsKernel q4_K_rows, q5_K_rows, q6_K_rows;
TileKernel q4_K_tile, q5_K_tile, q6_K_tile;
// The interleaved Q4_K_R16 / Q6_K_R16 layouts (kernels/interleave.h), the
// same arithmetic: decode over whole 16-row groups (one sequential stream per
// group) and the tile of one group x up to kInterleavedTileCols tokens, each
// 8-row half packed from the layout without transposes.
RowsKernel q4_K_r16_rows, q6_K_r16_rows;
TileKernel q4_K_r16_tile, q6_K_r16_tile;
TileKernel q6_K_r16_tile;

// Sparse int8 / int4 (kSQ8 | C, kSQ4 | C) x Q8_0 (avx2/sparse_lanes.cpp):
// the scalar twins' bits (kernels/ref/dot.h); each 64-input block expanded
// 32 values at a time by pshufb controls from a 256-entry table; decode over
// any nr >= 1 rows in groups of 4; the tile (prefill) of up to
// kSparseTileRows rows x kSparseTileCols tokens, each row block expanded
// once per call for all its tokens.
constexpr int kSparseTileRows = 4;
constexpr int kSparseTileCols = 64;
DotKernel sq8_dot, sq4_dot;
RowsKernel sq8_rows, sq4_rows;
TileKernel sq8_tile, sq4_tile;

// Activation quantizers (bit-identical to the scalar reference).
QuantizeKernel q8_0_quantize, q8_0_quantize_int4, q8_1_quantize;
QuantizeKernel q8_K_quantize;

// Dequantizers (bit-identical to the scalar reference).
DequantizeKernel f16_dequantize, bf16_dequantize, q4_0_dequantize, q5_0_dequantize, q8_0_dequantize;
DequantizeKernel q4_K_dequantize;
DequantizeKernel q6_K_dequantize;

// Row ops (row_ops.cpp), declared from kernels/ops.h's list; the exp-based ones
// use an 8-lane polynomial (about 1 ulp), RMSNorm sums squares in four
// 8-lane f32 accumulators whose lanes are added in double.
EMBER_ROW_OPS(EMBER_DECLARE_LIKE)
// Hadamard transform (hadamard.cpp), the contract of kernels/hadamard.h.
EMBER_DECLARE_LIKE(hadamard_row)
// Attention helpers: dot product with a fixed reduction order (two 8-lane
// accumulators, then hsum, then the tail in order); y[i] += a * x[i] (fma).
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float* y, float a, const float* x, int64_t n);

// Ragged attention (attention.cpp), the contract of kernels/attention.h.
EMBER_DECLARE_LIKE(attention_scratch_floats)
EMBER_DECLARE_LIKE(attention_ragged)

}  // namespace avx2

namespace avx512 {
// Ragged attention (avx512/attention.cpp): the AVX2 kernel's arithmetic, bit
// for bit, on 16-lane registers (kernels/cpu/attention_tiles.h).
EMBER_DECLARE_LIKE(attention_scratch_floats)
EMBER_DECLARE_LIKE(attention_ragged)

// MXFP4 x Q8_0 (avx512/mxfp4_dot.cpp): vec_dot, decode, a few tokens
// (1 .. kMxfp4FewMax: decode's row stream with the tile's register block)
// and the tile of kMxfp4TileRows rows x kMxfp4TileCols tokens, two blocks
// per zmm (arithmetic atop that file; decode, few and tile reach vec_dot's
// integer sums with unsigned weights and the activations' sums prepared
// once per call).
constexpr int kMxfp4TileRows = 16;
constexpr int kMxfp4TileCols = 8;
constexpr int kMxfp4FewMax = 8;
DotKernel mxfp4_dot;
RowsKernel mxfp4_rows;
FewKernel mxfp4_few;
TileKernel mxfp4_tile;
DotKernel f32_dot, f16_dot, bf16_dot;
// Float weights (avx512/float_dot.cpp, float_tile.cpp): one fma chain per
// output; decode walks rows sequentially, the tile is kFloatTileRows rows x
// up to kFloatTileCols tokens.
constexpr int kFloatTileRows = 4;
constexpr int kFloatTileCols = 60;
RowsKernel f32_rows, f16_rows, bf16_rows;
TileKernel f32_tile, f16_tile, bf16_tile;
DotKernel q4_0_dot, q4_1_dot, q5_0_dot, q5_1_dot, q8_0_dot, q2_K_dot, q3_K_dot;

// K-quant tile kernels (VecDotTileFn, avx512/kquants_tile.cpp), bit-identical
// to the vec_dot above for every (row, token) pair: up to kKquantsTileRows weight
// rows x kKquantsTileCols tokens (weight-stationary: each call unpacks its rows
// once for all its tokens).
constexpr int kKquantsTileRows = 4;
constexpr int kKquantsTileCols = 64;
TileKernel q2_K_tile, q3_K_tile;

// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (avx512/legacy_lanes.cpp): 32 rows (two
// sets of 16, one row per zmm lane) x up to kLegacyTileCols tokens, with their
// own arithmetic (see that file; the vec_dot of these types above follows it
// too).
constexpr int kLegacyTileRows = 32;
constexpr int kLegacyTileCols = 64;
TileKernel q4_0_tile, q4_1_tile, q5_1_tile;
// Decode over many rows (KernelSet::vec_dot_rows), bit-identical to the
// vec_dot of this level for every row: Q4_0 / Q8_0 / Q4_1 / Q5_1 in
// legacy_rows.cpp (groups of kLegacyRowsGroup rows share the activation work;
// any nr >= 1), Q5_0 in legacy_lanes.cpp (sequential rows, two at a time when short,
// the activation side prepared once per call).
constexpr int kLegacyRowsGroup = 16;
RowsKernel q4_0_rows, q8_0_rows, q4_1_rows, q5_1_rows, q5_0_rows;
// Sparse int8 / int4 (kSQ8 | C, kSQ4 | C) x Q8_0 (avx512/sparse_lanes.cpp,
// compiled with VBMI2 too, installed only where the CPU has it): vpexpandb
// + vpdpbusd, the scalar twins' bits; decode over any nr >= 1 rows (sq8:
// avx512/sparse_rows.cpp, the activations prepared once per call; sq4: in
// groups of 4); the tile (prefill) of up to kSparseTileRows rows x
// kSparseTileCols tokens, each row block expanded once per call for all its
// tokens.
constexpr int kSparseTileRows = 8;
constexpr int kSparseTileCols = 64;
DotKernel sq8_dot, sq4_dot;
RowsKernel sq8_rows, sq4_rows;
TileKernel sq8_tile, sq4_tile;
// Activation-sparse column kernels (avx512/act_cols.cpp, VNNI): ColDotFn of
// kernels/act_sparse.h for Q8_0 / Q4_K / Q6_K columns, the kLanes contract,
// bit-identical to ref::act_cols_lanes.
void act_cols(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
              int64_t ldy);
TileKernel q5_0_tile, q8_0_tile;
// K-quants (avx512/kquants_tile.cpp): sequential rows with software prefetch,
// the tile kernels' 1 row x 1 token arithmetic (any nr >= 1).
RowsKernel q2_K_rows, q3_K_rows;

// Q4_K, Q5_K and Q6_K in the row-lane form (avx512/kquants_lanes.cpp, their own
// arithmetic: see that file; the twins are in kernels/ref/kquants_lanes.h):
// vec_dot, decode over any nr >= 1 rows in 16-row groups, and the tile of
// kKquantsLanesTileRows rows x up to kKquantsLanesTileCols tokens (each call transposes
// its rows once).
constexpr int kKquantsLanesTileRows = 16;
constexpr int kKquantsLanesTileCols = 64;
DotKernel q4_K_dot, q5_K_dot, q6_K_dot;
RowsKernel q4_K_rows, q5_K_rows, q6_K_rows;
TileKernel q4_K_tile, q5_K_tile, q6_K_tile;
// A few tokens (1 .. kKquantsLanesFewMax) over any number of rows in the decode
// form (avx512/kquants_lanes.cpp: each row unpacked once for all tokens).
// Up to 6 because that is where it beats the tile (bench_gemm, one thread:
// 1.7-2.0x at 2 tokens, 1.3x at 3, 1.0-1.4x at 4, 1.1x at 5, 1.0-1.1x at 6,
// 0.75-0.9x at 8).
constexpr int kKquantsLanesFewMax = 6;
FewKernel q4_K_few, q5_K_few, q6_K_few;
// The token-lane form of the same arithmetic (avx512/kquants_tokens.cpp):
// kKquantsTokensMin .. kKquantsTokensMax tokens (where it beats the tile),
// activations packed once per matmul (KernelSet::pack_tokens), any number of
// rows per call (the kernel accepts 1 .. kKquantsTokensMax tokens).
constexpr int kKquantsTokensMin = 12;
constexpr int kKquantsTokensMax = 16;
TokensPackBytesKernel kquants_tokens_pack_bytes;
TokensPackKernel kquants_tokens_pack;
TokensKernel q4_K_tokens, q5_K_tokens, q6_K_tokens;
// The interleaved layouts (kernels/interleave.h) of Q4_K / Q6_K, the same
// arithmetic: decode over whole 16-row groups (avx512/kquants_r16_few.cpp)
// and the tile of one group x up to kInterleavedTileCols tokens
// (avx512/kquants_lanes.cpp: the row-lane tile's register blocks, its
// packing reduced to nibble splits and scale shuffles).
RowsKernel q4_K_r16_rows, q6_K_r16_rows;
TileKernel q4_K_r16_tile, q6_K_r16_tile;
// ... and 1 .. kInterleavedFewMax tokens over whole groups, four per pass
// (avx512/kquants_r16_few.cpp): Q4_K / Q6_K use it up to 64 tokens (it
// beats their tile there: bench_gemm 2048 x 4096, one thread, 32 tokens
// 158 / 126 GMAC/s against 137 / 95), Q4_0 / Q8_0 up to
// kInterleavedLegacyFewMax (their two-group tile is faster above).
constexpr int kInterleavedFewMax = 64;
constexpr int kInterleavedLegacyFewMax = 16;
FewKernel q4_K_r16_few, q6_K_r16_few;
// Q4_0 / Q5_0 / Q8_0 x Q8_0 interleaved (avx512/legacy_r16_lanes.cpp): the
// lane contract of legacy_lanes.cpp / legacy_rows.cpp (per block in order acc =
// fma(float(isum_b), d_w * d_x, acc)); decode, 1 .. kInterleavedFewMax
// tokens four per pass, and the tile as the same passes over one group.
RowsKernel q4_0_r16_rows, q5_0_r16_rows, q8_0_r16_rows;
FewKernel q4_0_r16_few, q5_0_r16_few, q8_0_r16_few;
TileKernel q4_0_r16_tile, q5_0_r16_tile, q8_0_r16_tile;
// ... and the token-lane form the driver takes above kInterleavedLegacyFewMax
// tokens: the activations packed once per matmul (quants, f32 scales, the
// blocks' seeds), then the passes over long runs of rows (a tile call of 32
// rows recomputed the seeds of all its tokens: a third of its work).
TokensPackBytesKernel legacy_r16_tokens_pack_bytes;
TokensPackKernel q4_0_r16_tokens_pack, q5_0_r16_tokens_pack, q8_0_r16_tokens_pack;
TokensKernel q4_0_r16_tokens, q5_0_r16_tokens, q8_0_r16_tokens;

}  // namespace avx512

// Interleaved layouts at every level (kernels/cpu/interleave.cpp): each
// group de-interleaved into base-type rows for the base type's kernels at
// `isa` (vec_dot_rows, and vec_dot_tile with tile_rows kInterleavedGroupRows
// and tile_cols kInterleavedTileCols); the registry's rows for the levels
// without native kernels.
constexpr int kInterleavedGroupRows = 16;
constexpr int kInterleavedTileCols = 64;
KernelSet deinterleaved(DType t, Isa isa);
VecDotTileFn deinterleaved_tile(DType t, Isa isa);

// The registry's entry for t at level isa as it is folded on a CPU whose
// highest level is max (kernels/cpu/registry.cpp; tests read the levels
// this CPU lacks through it). Builds the whole table: not for hot paths.
KernelSet registry_entry(DType t, Isa isa, Isa max);

// AMX-INT8 (amx/kquants_r16_tile.cpp, the level above AVX-512): Q4_K_R16 /
// Q6_K_R16 x Q8_K for kKquantsR16MinTokens tokens or more, the weights' scales
// folded into i16 products split into two byte tiles; the same bits as the
// AVX-512 kernels of those layouts, which take fewer tokens. The few-token
// form over any multiple of 16 rows, up to avx512::kInterleavedFewMax
// tokens; the tile of kKquantsR16TileRows rows (whole groups) x up to kKquantsR16TileCols
// tokens.
namespace amx {
// The kernels alone, Q4_K, 2048 x 256 rows, one thread: 8 tokens 0.85x the
// AVX-512 passes, 10: 1.05x, 12: 1.10x, 16: 1.34x, 32: 1.9x (Q6_K: 8: 1.06x,
// 12: 1.40x); through the driver (bench_gemm 2048 2048 12 1 q4_K): 1.16x.
constexpr int kKquantsR16MinTokens = 10;
constexpr int kKquantsR16TileRows = 64;  // per call: the per-call activation work over 4 groups (16 rows: 0.85x)
constexpr int kKquantsR16TileCols = 128;
FewKernel q4_K_r16_few, q6_K_r16_few;
TileKernel q4_K_r16_tile, q6_K_r16_tile;
// Q4_0_R16 / Q5_0_R16 / Q8_0_R16 x Q8_0 (amx/legacy_r16_tokens.cpp): the token-lane
// form above avx512::kInterleavedLegacyFewMax tokens, one tile product per
// block and 16 tokens, the lane contract of the AVX-512 kernels (same
// bits). Its own pack (per 16-token tile and block one A tile of quants,
// then the f32 scales, zero past the token count); Q4_0 / Q5_0 below
// kLegacyR16NibbleTokensMin tokens take the AVX-512 token lanes and their pack
// instead (each function chooses by the token count).
// bench_gemm 2048 2048 T 1, GMAC/s amx / avx512: Q4_0 at 24 tokens 150 /
// 165, 32: 169 / 160, 64: 208 / 150, 128: 240-276 / 165-175; Q8_0 at 24:
// 218 / 151, 128: 265 / 161.
constexpr int kLegacyR16NibbleTokensMin = 32;
TokensPackBytesKernel legacy_r16_tokens_pack_bytes;
TokensPackKernel q4_0_r16_tokens_pack, q5_0_r16_tokens_pack, q8_0_r16_tokens_pack;
TokensKernel q4_0_r16_tokens, q5_0_r16_tokens, q8_0_r16_tokens;
}  // namespace amx

}  // namespace ember
