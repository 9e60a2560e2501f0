// Kernel registry: ONE table of rows (type, ISA level, the kernels that level
// brings), folded once on first use into a [dtype][level] array of
// KernelSets (no self-registration: nothing depends on static-initializer
// order or on the linker keeping unreferenced objects).
//
// Names in the kernel tree read ISA, type, form, in that order everywhere:
//   files      kernels/<isa dir>/<type>_<form>.cpp   cpu/avx512/kquants_lanes.cpp,
//                                                    ref/dot.cpp, cpu/amx/legacy_r16_tokens.cpp
//   functions  <isa>::<type>_<form>                  avx512::q4_K_rows, ref::q8_0_dot,
//                                                    amx::q4_0_r16_tokens_pack
//   constants  <isa>::k<Type><Form><What>            avx2::kKquantsLanesTileRows
// ISA: the directory and namespace (ref = the scalar twins, avx2, avx512,
// amx). Type: a dtype as dtype_name spells it (q4_0, q4_K, f16, q6_K_r16),
// or a family where one function or file serves several (float = F32 / F16
// / BF16; legacy = Q4_0 .. Q8_0, 32-element blocks; kquants = the K-quants;
// sq8 / sq4 = the sparse int8 / int4 types kSQ8 | C, kSQ4 | C, sparse =
// both; `_r16` = the interleaved layouts, kernels/interleave.h). Form: dot
// (KernelSet::vec_dot), rows, few, tokens (+ tokens_pack, tokens_pack_bytes),
// tile (vec_dot_<form>), quantize / quantize_int4 / dequantize (the row
// conversions); a file holding every form of one row-lane arithmetic
// contract is `<type>_lanes`. The activation type is not in the name (it is
// vec_dot_type(type)). ISA-independent ops keep their op name (attention,
// row_ops, hadamard, kv_types).
//
// Folding: level by level from scalar, each entry is its row with every
// field the row leaves null taken from the level below: the conversions and
// vec_dot always; a form (rows, few, tokens, tile, each with its bounds)
// only together with the vec_dot it reproduces bit for bit (the same
// pointer; interleaved layouts have no vec_dot, so their forms always
// carry up). Rows of levels above cpu_max_isa() are never installed, so a
// lookup never yields an instruction the CPU lacks.
#include "kernels/registry.h"

#include <array>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/ref/dot.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace ember {
namespace {

constexpr int kMaxTypeId = 40;  // file DType ids are < 40 (MXFP4 = 39)
constexpr int kLevels = kNumIsaLevels;
constexpr int kAnyTokens = 1 << 30;  // tokens_max of the token-lane forms without a bound

// Slots: file types by id, then the interleaved layouts by their base's id,
// then the sparse int8 and int4 families (kSQ8 | C, kSQ4 | C: one KernelSet
// for every capacity C, the kernels walk a row whatever its capacity).
constexpr int kSq8Slot = 2 * kMaxTypeId;
constexpr int kSq4Slot = 2 * kMaxTypeId + 1;
using Table = std::array<std::array<KernelSet, kLevels>, 2 * kMaxTypeId + 2>;

int slot(DType t) {
  if (t == kSQ8 || dtype_is_sq8(t)) return kSq8Slot;
  if (t == kSQ4 || dtype_is_sq4(t)) return kSq4Slot;
  const auto id = static_cast<uint32_t>(t);
  if (id < static_cast<uint32_t>(kMaxTypeId)) return static_cast<int>(id);
  const auto base = static_cast<uint32_t>(dtype_layout_base(t));
  if (dtype_row_group(t) > 1 && base < static_cast<uint32_t>(kMaxTypeId)) return kMaxTypeId + static_cast<int>(base);
  return -1;
}

// F32 rows are their own "quantized" form.
void f32_quantize(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }
void f32_dequantize(const void* x, float* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }

struct Row {
  DType type;
  Isa isa;
  KernelSet k;  // null fields: inherited (see the header)
};

// The table. Within a level, rows follow the dtype order of core/dtype.h,
// the interleaved layouts last.
std::vector<Row> rows() {
  using enum DType;
  using enum Isa;
  namespace a2 = avx2;
  namespace a5 = avx512;
  return {
      // ---- scalar: the reference twins (kernels/ref/, quant/) ----
      {kF32, kScalar, {.dequantize_row = f32_dequantize, .quantize_row = f32_quantize, .vec_dot = ref::f32_dot}},
      {kF16, kScalar,
       {.dequantize_row = dequantize_row_f16_ref, .quantize_row = quantize_row_f16_ref, .vec_dot = ref::f16_dot}},
      {kBF16, kScalar,
       {.dequantize_row = dequantize_row_bf16_ref, .quantize_row = quantize_row_bf16_ref, .vec_dot = ref::bf16_dot}},
      {kQ4_0, kScalar,
       {.dequantize_row = dequantize_row_q4_0_ref, .quantize_row = quantize_row_q4_0_ref, .vec_dot = ref::q4_0_dot}},
      {kQ4_1, kScalar,
       {.dequantize_row = dequantize_row_q4_1_ref, .quantize_row = quantize_row_q4_1_ref, .vec_dot = ref::q4_1_dot}},
      {kQ5_0, kScalar,
       {.dequantize_row = dequantize_row_q5_0_ref, .quantize_row = quantize_row_q5_0_ref, .vec_dot = ref::q5_0_dot}},
      {kQ5_1, kScalar,
       {.dequantize_row = dequantize_row_q5_1_ref, .quantize_row = quantize_row_q5_1_ref, .vec_dot = ref::q5_1_dot}},
      {kQ8_0, kScalar, {.dequantize_row = dequantize_row_q8_0_ref, .quantize_row = quantize_row_q8_0_ref,
                        .quantize_row_int4 = quantize_row_q8_0_int4_ref, .vec_dot = ref::q8_0_dot}},
      {kQ8_1, kScalar, {.dequantize_row = dequantize_row_q8_1_ref, .quantize_row = quantize_row_q8_1_ref}},
      {kQ2_K, kScalar,
       {.dequantize_row = dequantize_row_q2_K_ref, .quantize_row = quantize_row_q2_K_ref, .vec_dot = ref::q2_K_dot}},
      {kQ3_K, kScalar,
       {.dequantize_row = dequantize_row_q3_K_ref, .quantize_row = quantize_row_q3_K_ref, .vec_dot = ref::q3_K_dot}},
      {kQ4_K, kScalar,
       {.dequantize_row = dequantize_row_q4_K_ref, .quantize_row = quantize_row_q4_K_ref, .vec_dot = ref::q4_K_dot}},
      {kQ5_K, kScalar,
       {.dequantize_row = dequantize_row_q5_K_ref, .quantize_row = quantize_row_q5_K_ref, .vec_dot = ref::q5_K_dot}},
      {kQ6_K, kScalar,
       {.dequantize_row = dequantize_row_q6_K_ref, .quantize_row = quantize_row_q6_K_ref, .vec_dot = ref::q6_K_dot}},
      {kQ8_K, kScalar,
       {.dequantize_row = dequantize_row_q8_K_ref, .quantize_row = quantize_row_q8_K_ref, .vec_dot = ref::q8_K_dot}},
      {kMXFP4, kScalar,
       {.dequantize_row = dequantize_row_mxfp4_ref, .quantize_row = quantize_row_mxfp4_ref, .vec_dot = ref::mxfp4_dot}},
      // Interleaved layouts: each group de-interleaved for the base type's
      // kernels (kernels/cpu/interleave.cpp).
      {kQ4_0_R16, kScalar, deinterleaved(kQ4_0_R16, kScalar)},
      {kQ5_0_R16, kScalar, deinterleaved(kQ5_0_R16, kScalar)},
      {kQ8_0_R16, kScalar, deinterleaved(kQ8_0_R16, kScalar)},
      {kQ4_K_R16, kScalar, deinterleaved(kQ4_K_R16, kScalar)},
      {kQ6_K_R16, kScalar, deinterleaved(kQ6_K_R16, kScalar)},
      // Sparse int8 / int4 x Q8_0 (quant/sparse.h); prefill (no tile here) loops over vec_dot.
      {kSQ8, kScalar, {.dequantize_row = dequantize_row_sq8_ref, .vec_dot = ref::sq8_dot}},
      {kSQ4, kScalar, {.dequantize_row = dequantize_row_sq4_ref, .vec_dot = ref::sq4_dot}},

      // ---- avx2 (kernels/cpu/avx2/) ----
      {kF32, kAvx2,
       {.vec_dot = a2::f32_dot, .vec_dot_tile = a2::f32_tile, .tile_rows = a2::kFloatTileRows,
        .tile_cols = a2::kFloatTileCols}},
      {kF16, kAvx2, {.dequantize_row = a2::f16_dequantize, .vec_dot = a2::f16_dot, .vec_dot_tile = a2::f16_tile,
                     .tile_rows = a2::kFloatTileRows, .tile_cols = a2::kFloatTileCols}},
      {kBF16, kAvx2, {.dequantize_row = a2::bf16_dequantize, .vec_dot = a2::bf16_dot, .vec_dot_tile = a2::bf16_tile,
                      .tile_rows = a2::kFloatTileRows, .tile_cols = a2::kFloatTileCols}},
      // Q4_0 / Q5_0 / Q8_0: the row lanes (the AVX-512 level's bits); two or
      // more tokens take the token-lane form.
      {kQ4_0, kAvx2, {.dequantize_row = a2::q4_0_dequantize, .vec_dot = a2::q4_0_dot, .vec_dot_rows = a2::q4_0_rows,
                      .vec_dot_tokens = a2::q4_0_tokens, .pack_tokens = a2::q4_0_tokens_pack,
                      .tokens_pack_bytes = a2::legacy_tokens_pack_bytes, .tokens_min = 2, .tokens_max = kAnyTokens,
                      .vec_dot_tile = a2::q4_0_tile, .tile_rows = a2::kLegacyTileRows,
                      .tile_cols = a2::kLegacyTileCols}},
      {kQ4_1, kAvx2, {.vec_dot = a2::q4_1_dot}},
      {kQ5_0, kAvx2, {.dequantize_row = a2::q5_0_dequantize, .vec_dot = a2::q5_0_dot, .vec_dot_rows = a2::q5_0_rows,
                      .vec_dot_tokens = a2::q5_0_tokens, .pack_tokens = a2::q5_0_tokens_pack,
                      .tokens_pack_bytes = a2::legacy_tokens_pack_bytes, .tokens_min = 2, .tokens_max = kAnyTokens,
                      .vec_dot_tile = a2::q5_0_tile, .tile_rows = a2::kLegacyTileRows,
                      .tile_cols = a2::kLegacyTileCols}},
      {kQ5_1, kAvx2, {.vec_dot = a2::q5_1_dot}},
      {kQ8_0, kAvx2, {.dequantize_row = a2::q8_0_dequantize, .quantize_row = a2::q8_0_quantize,
                      .quantize_row_int4 = a2::q8_0_quantize_int4, .vec_dot = a2::q8_0_dot,
                      .vec_dot_rows = a2::q8_0_rows,
                      .vec_dot_tokens = a2::q8_0_tokens, .pack_tokens = a2::q8_0_tokens_pack,
                      .tokens_pack_bytes = a2::legacy_tokens_pack_bytes, .tokens_min = 2, .tokens_max = kAnyTokens,
                      .vec_dot_tile = a2::q8_0_tile, .tile_rows = a2::kLegacyTileRows,
                      .tile_cols = a2::kLegacyTileCols}},
      {kQ8_1, kAvx2, {.quantize_row = a2::q8_1_quantize}},
      {kQ2_K, kAvx2, {.vec_dot = a2::q2_K_dot, .vec_dot_tile = a2::q2_K_tile, .tile_rows = a2::kKquantsTileRows,
                      .tile_cols = a2::kKquantsTileCols}},
      {kQ3_K, kAvx2, {.vec_dot = a2::q3_K_dot, .vec_dot_tile = a2::q3_K_tile, .tile_rows = a2::kKquantsTileRows,
                      .tile_cols = a2::kKquantsTileCols}},
      // Q4_K, Q5_K, Q6_K: the row lanes (the AVX-512 level's bits).
      {kQ4_K, kAvx2, {.dequantize_row = a2::q4_K_dequantize, .vec_dot = a2::q4_K_dot, .vec_dot_rows = a2::q4_K_rows,
                      .vec_dot_tile = a2::q4_K_tile, .tile_rows = a2::kKquantsLanesTileRows,
                      .tile_cols = a2::kKquantsLanesTileCols}},
      {kQ5_K, kAvx2, {.vec_dot = a2::q5_K_dot, .vec_dot_rows = a2::q5_K_rows, .vec_dot_tile = a2::q5_K_tile,
                      .tile_rows = a2::kKquantsLanesTileRows, .tile_cols = a2::kKquantsLanesTileCols}},
      {kQ6_K, kAvx2, {.dequantize_row = a2::q6_K_dequantize, .vec_dot = a2::q6_K_dot, .vec_dot_rows = a2::q6_K_rows,
                      .vec_dot_tile = a2::q6_K_tile, .tile_rows = a2::kKquantsLanesTileRows,
                      .tile_cols = a2::kKquantsLanesTileCols}},
      {kQ8_K, kAvx2, {.quantize_row = a2::q8_K_quantize}},
      {kMXFP4, kAvx2, {.vec_dot = a2::mxfp4_dot, .vec_dot_rows = a2::mxfp4_rows, .vec_dot_tile = a2::mxfp4_tile,
                       .tile_rows = a2::kMxfp4TileRows, .tile_cols = a2::kMxfp4TileCols}},
      // Interleaved: native decode; Q4_0 / Q5_0 / Q8_0 token lanes from 2
      // tokens (the plain types' pack) and the de-interleaving tile for
      // direct tile calls; Q4_K / Q6_K a native tile.
      {kQ4_0_R16, kAvx2, {.vec_dot_rows = a2::q4_0_r16_rows, .vec_dot_tokens = a2::q4_0_r16_tokens,
                          .pack_tokens = a2::q4_0_tokens_pack, .tokens_pack_bytes = a2::legacy_tokens_pack_bytes,
                          .tokens_min = 2, .tokens_max = kAnyTokens,
                          .vec_dot_tile = deinterleaved_tile(kQ4_0_R16, kAvx2),
                          .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                          .interleaved_native = true}},
      {kQ5_0_R16, kAvx2, {.vec_dot_rows = a2::q5_0_r16_rows, .vec_dot_tokens = a2::q5_0_r16_tokens,
                          .pack_tokens = a2::q5_0_tokens_pack, .tokens_pack_bytes = a2::legacy_tokens_pack_bytes,
                          .tokens_min = 2, .tokens_max = kAnyTokens,
                          .vec_dot_tile = deinterleaved_tile(kQ5_0_R16, kAvx2),
                          .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                          .interleaved_native = true}},
      {kQ8_0_R16, kAvx2, {.vec_dot_rows = a2::q8_0_r16_rows, .vec_dot_tokens = a2::q8_0_r16_tokens,
                          .pack_tokens = a2::q8_0_tokens_pack, .tokens_pack_bytes = a2::legacy_tokens_pack_bytes,
                          .tokens_min = 2, .tokens_max = kAnyTokens,
                          .vec_dot_tile = deinterleaved_tile(kQ8_0_R16, kAvx2),
                          .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                          .interleaved_native = true}},
      {kQ4_K_R16, kAvx2, {.vec_dot_rows = a2::q4_K_r16_rows, .vec_dot_tile = a2::q4_K_r16_tile,
                          .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                          .interleaved_native = true}},
      {kQ6_K_R16, kAvx2, {.vec_dot_rows = a2::q6_K_r16_rows, .vec_dot_tile = a2::q6_K_r16_tile,
                          .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                          .interleaved_native = true}},
      // Sparse: decode and the prefill tile (each row block expanded once for all its tokens).
      {kSQ8, kAvx2, {.vec_dot = a2::sq8_dot, .vec_dot_rows = a2::sq8_rows, .vec_dot_tile = a2::sq8_tile,
                     .tile_rows = a2::kSparseTileRows, .tile_cols = a2::kSparseTileCols}},
      {kSQ4, kAvx2, {.vec_dot = a2::sq4_dot, .vec_dot_rows = a2::sq4_rows, .vec_dot_tile = a2::sq4_tile,
                     .tile_rows = a2::kSparseTileRows, .tile_cols = a2::kSparseTileCols}},

      // ---- avx512 (kernels/cpu/avx512/) ----
      {kF32, kAvx512, {.vec_dot = a5::f32_dot, .vec_dot_rows = a5::f32_rows, .vec_dot_tile = a5::f32_tile,
                       .tile_rows = a5::kFloatTileRows, .tile_cols = a5::kFloatTileCols}},
      {kF16, kAvx512, {.vec_dot = a5::f16_dot, .vec_dot_rows = a5::f16_rows, .vec_dot_tile = a5::f16_tile,
                       .tile_rows = a5::kFloatTileRows, .tile_cols = a5::kFloatTileCols}},
      {kBF16, kAvx512, {.vec_dot = a5::bf16_dot, .vec_dot_rows = a5::bf16_rows, .vec_dot_tile = a5::bf16_tile,
                        .tile_rows = a5::kFloatTileRows, .tile_cols = a5::kFloatTileCols}},
      // The legacy types' lanes (their own bits: kernels/cpu/avx512/legacy_lanes.cpp).
      {kQ4_0, kAvx512, {.vec_dot = a5::q4_0_dot, .vec_dot_rows = a5::q4_0_rows, .vec_dot_tile = a5::q4_0_tile,
                        .tile_rows = a5::kLegacyTileRows, .tile_cols = a5::kLegacyTileCols}},
      {kQ4_1, kAvx512, {.vec_dot = a5::q4_1_dot, .vec_dot_rows = a5::q4_1_rows, .vec_dot_tile = a5::q4_1_tile,
                        .tile_rows = a5::kLegacyTileRows, .tile_cols = a5::kLegacyTileCols}},
      {kQ5_0, kAvx512, {.vec_dot = a5::q5_0_dot, .vec_dot_rows = a5::q5_0_rows, .vec_dot_tile = a5::q5_0_tile,
                        .tile_rows = a5::kLegacyTileRows, .tile_cols = a5::kLegacyTileCols}},
      {kQ5_1, kAvx512, {.vec_dot = a5::q5_1_dot, .vec_dot_rows = a5::q5_1_rows, .vec_dot_tile = a5::q5_1_tile,
                        .tile_rows = a5::kLegacyTileRows, .tile_cols = a5::kLegacyTileCols}},
      {kQ8_0, kAvx512, {.vec_dot = a5::q8_0_dot, .vec_dot_rows = a5::q8_0_rows, .vec_dot_tile = a5::q8_0_tile,
                        .tile_rows = a5::kLegacyTileRows, .tile_cols = a5::kLegacyTileCols}},
      {kQ2_K, kAvx512, {.vec_dot = a5::q2_K_dot, .vec_dot_rows = a5::q2_K_rows, .vec_dot_tile = a5::q2_K_tile,
                        .tile_rows = a5::kKquantsTileRows, .tile_cols = a5::kKquantsTileCols}},
      {kQ3_K, kAvx512, {.vec_dot = a5::q3_K_dot, .vec_dot_rows = a5::q3_K_rows, .vec_dot_tile = a5::q3_K_tile,
                        .tile_rows = a5::kKquantsTileRows, .tile_cols = a5::kKquantsTileCols}},
      // Q4_K, Q5_K, Q6_K: the row lanes; a few tokens (speculative
      // verification, small batches) in the decode form, 12-16 (batched
      // decode) in the token-lane form.
      {kQ4_K, kAvx512, {.vec_dot = a5::q4_K_dot, .vec_dot_rows = a5::q4_K_rows, .vec_dot_few = a5::q4_K_few,
                        .few_max = a5::kKquantsLanesFewMax, .vec_dot_tokens = a5::q4_K_tokens,
                        .pack_tokens = a5::kquants_tokens_pack, .tokens_pack_bytes = a5::kquants_tokens_pack_bytes,
                        .tokens_min = a5::kKquantsTokensMin, .tokens_max = a5::kKquantsTokensMax,
                        .vec_dot_tile = a5::q4_K_tile, .tile_rows = a5::kKquantsLanesTileRows,
                        .tile_cols = a5::kKquantsLanesTileCols}},
      {kQ5_K, kAvx512, {.vec_dot = a5::q5_K_dot, .vec_dot_rows = a5::q5_K_rows, .vec_dot_few = a5::q5_K_few,
                        .few_max = a5::kKquantsLanesFewMax, .vec_dot_tokens = a5::q5_K_tokens,
                        .pack_tokens = a5::kquants_tokens_pack, .tokens_pack_bytes = a5::kquants_tokens_pack_bytes,
                        .tokens_min = a5::kKquantsTokensMin, .tokens_max = a5::kKquantsTokensMax,
                        .vec_dot_tile = a5::q5_K_tile, .tile_rows = a5::kKquantsLanesTileRows,
                        .tile_cols = a5::kKquantsLanesTileCols}},
      {kQ6_K, kAvx512, {.vec_dot = a5::q6_K_dot, .vec_dot_rows = a5::q6_K_rows, .vec_dot_few = a5::q6_K_few,
                        .few_max = a5::kKquantsLanesFewMax, .vec_dot_tokens = a5::q6_K_tokens,
                        .pack_tokens = a5::kquants_tokens_pack, .tokens_pack_bytes = a5::kquants_tokens_pack_bytes,
                        .tokens_min = a5::kKquantsTokensMin, .tokens_max = a5::kKquantsTokensMax,
                        .vec_dot_tile = a5::q6_K_tile, .tile_rows = a5::kKquantsLanesTileRows,
                        .tile_cols = a5::kKquantsLanesTileCols}},
      {kMXFP4, kAvx512, {.vec_dot = a5::mxfp4_dot, .vec_dot_rows = a5::mxfp4_rows, .vec_dot_few = a5::mxfp4_few,
                         .few_max = a5::kMxfp4FewMax, .vec_dot_tile = a5::mxfp4_tile,
                         .tile_rows = a5::kMxfp4TileRows, .tile_cols = a5::kMxfp4TileCols}},
      // Interleaved: native decode, few-token passes and tile; Q4_0 / Q5_0 /
      // Q8_0 a two-group tile (shared activation broadcasts) and above
      // kLegacyR16FewMax tokens the token-lane form (activations packed once
      // per matmul).
      {kQ4_0_R16, kAvx512, {.vec_dot_rows = a5::q4_0_r16_rows, .vec_dot_few = a5::q4_0_r16_few,
                            .few_max = a5::kInterleavedLegacyFewMax, .vec_dot_tokens = a5::q4_0_r16_tokens,
                            .pack_tokens = a5::q4_0_r16_tokens_pack,
                            .tokens_pack_bytes = a5::legacy_r16_tokens_pack_bytes,
                            .tokens_min = a5::kInterleavedLegacyFewMax + 1, .tokens_max = kAnyTokens,
                            .vec_dot_tile = a5::q4_0_r16_tile, .tile_rows = 2 * kInterleavedGroupRows,
                            .tile_cols = kInterleavedTileCols, .interleaved_native = true}},
      {kQ5_0_R16, kAvx512, {.vec_dot_rows = a5::q5_0_r16_rows, .vec_dot_few = a5::q5_0_r16_few,
                            .few_max = a5::kInterleavedLegacyFewMax, .vec_dot_tokens = a5::q5_0_r16_tokens,
                            .pack_tokens = a5::q5_0_r16_tokens_pack,
                            .tokens_pack_bytes = a5::legacy_r16_tokens_pack_bytes,
                            .tokens_min = a5::kInterleavedLegacyFewMax + 1, .tokens_max = kAnyTokens,
                            .vec_dot_tile = a5::q5_0_r16_tile, .tile_rows = 2 * kInterleavedGroupRows,
                            .tile_cols = kInterleavedTileCols, .interleaved_native = true}},
      {kQ8_0_R16, kAvx512, {.vec_dot_rows = a5::q8_0_r16_rows, .vec_dot_few = a5::q8_0_r16_few,
                            .few_max = a5::kInterleavedLegacyFewMax, .vec_dot_tokens = a5::q8_0_r16_tokens,
                            .pack_tokens = a5::q8_0_r16_tokens_pack,
                            .tokens_pack_bytes = a5::legacy_r16_tokens_pack_bytes,
                            .tokens_min = a5::kInterleavedLegacyFewMax + 1, .tokens_max = kAnyTokens,
                            .vec_dot_tile = a5::q8_0_r16_tile, .tile_rows = 2 * kInterleavedGroupRows,
                            .tile_cols = kInterleavedTileCols, .interleaved_native = true}},
      {kQ4_K_R16, kAvx512, {.vec_dot_rows = a5::q4_K_r16_rows, .vec_dot_few = a5::q4_K_r16_few,
                            .few_max = a5::kInterleavedFewMax, .vec_dot_tile = a5::q4_K_r16_tile,
                            .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                            .interleaved_native = true}},
      {kQ6_K_R16, kAvx512, {.vec_dot_rows = a5::q6_K_r16_rows, .vec_dot_few = a5::q6_K_r16_few,
                            .few_max = a5::kInterleavedFewMax, .vec_dot_tile = a5::q6_K_r16_tile,
                            .tile_rows = kInterleavedGroupRows, .tile_cols = kInterleavedTileCols,
                            .interleaved_native = true}},
      // Sparse int8 / int4: vpexpandb needs VBMI2 (not part of the level);
      // without it the AVX2 kernels (the same bits) carry up.
      {kSQ8, kAvx512,
       __builtin_cpu_supports("avx512vbmi2")
           ? KernelSet{.vec_dot = a5::sq8_dot, .vec_dot_rows = a5::sq8_rows, .vec_dot_tile = a5::sq8_tile,
                       .tile_rows = a5::kSparseTileRows, .tile_cols = a5::kSparseTileCols}
           : KernelSet{}},
      {kSQ4, kAvx512,
       __builtin_cpu_supports("avx512vbmi2")
           ? KernelSet{.vec_dot = a5::sq4_dot, .vec_dot_rows = a5::sq4_rows, .vec_dot_tile = a5::sq4_tile,
                       .tile_rows = a5::kSparseTileRows, .tile_cols = a5::kSparseTileCols}
           : KernelSet{}},

      // ---- amx (kernels/cpu/amx/): interleaved layouts only ----
      // Q4_K_R16 / Q6_K_R16 tile kernels from amx::kKquantsR16MinTokens
      // tokens (the few-token form calls the AVX-512 one below that).
      {kQ4_K_R16, kAmx, {.vec_dot_few = amx::q4_K_r16_few, .few_max = a5::kInterleavedFewMax,
                         .vec_dot_tile = amx::q4_K_r16_tile, .tile_rows = amx::kKquantsR16TileRows,
                         .tile_cols = amx::kKquantsR16TileCols}},
      {kQ6_K_R16, kAmx, {.vec_dot_few = amx::q6_K_r16_few, .few_max = a5::kInterleavedFewMax,
                         .vec_dot_tile = amx::q6_K_r16_tile, .tile_rows = amx::kKquantsR16TileRows,
                         .tile_cols = amx::kKquantsR16TileCols}},
      // Q4_0 / Q5_0 / Q8_0: the AMX token lanes (their own pack) where the
      // AVX-512 token lanes ran.
      {kQ4_0_R16, kAmx, {.vec_dot_tokens = amx::q4_0_r16_tokens, .pack_tokens = amx::q4_0_r16_tokens_pack,
                         .tokens_pack_bytes = amx::legacy_r16_tokens_pack_bytes,
                         .tokens_min = a5::kInterleavedLegacyFewMax + 1, .tokens_max = kAnyTokens}},
      {kQ5_0_R16, kAmx, {.vec_dot_tokens = amx::q5_0_r16_tokens, .pack_tokens = amx::q5_0_r16_tokens_pack,
                         .tokens_pack_bytes = amx::legacy_r16_tokens_pack_bytes,
                         .tokens_min = a5::kInterleavedLegacyFewMax + 1, .tokens_max = kAnyTokens}},
      {kQ8_0_R16, kAmx, {.vec_dot_tokens = amx::q8_0_r16_tokens, .pack_tokens = amx::q8_0_r16_tokens_pack,
                         .tokens_pack_bytes = amx::legacy_r16_tokens_pack_bytes,
                         .tokens_min = a5::kInterleavedLegacyFewMax + 1, .tokens_max = kAnyTokens}},
  };
}

// k's null fields from the level below (the rules in the header).
void inherit(KernelSet& k, const KernelSet& lower) {
  if (!k.dequantize_row) k.dequantize_row = lower.dequantize_row;
  if (!k.quantize_row) k.quantize_row = lower.quantize_row;
  if (!k.quantize_row_int4) k.quantize_row_int4 = lower.quantize_row_int4;
  if (!k.vec_dot) k.vec_dot = lower.vec_dot;
  if (k.vec_dot != lower.vec_dot) return;  // the forms reproduce one vec_dot: none of the lower level's
  if (!k.vec_dot_rows) {
    k.vec_dot_rows = lower.vec_dot_rows;
    k.interleaved_native = lower.interleaved_native;
  }
  if (!k.vec_dot_few) {
    k.vec_dot_few = lower.vec_dot_few;
    k.few_max = lower.few_max;
  }
  if (!k.vec_dot_tokens) {
    k.vec_dot_tokens = lower.vec_dot_tokens;
    k.pack_tokens = lower.pack_tokens;
    k.tokens_pack_bytes = lower.tokens_pack_bytes;
    k.tokens_min = lower.tokens_min;
    k.tokens_max = lower.tokens_max;
  }
  if (!k.vec_dot_tile) {
    k.vec_dot_tile = lower.vec_dot_tile;
    k.tile_rows = lower.tile_rows;
    k.tile_cols = lower.tile_cols;
  }
}

Table build_table(Isa max) {
  Table t{};
  const std::vector<Row> table = rows();
  for (int l = 0; l <= static_cast<int>(max); ++l) {
    for (const Row& r : table)
      if (static_cast<int>(r.isa) == l) t[static_cast<size_t>(slot(r.type))][l] = r.k;
    if (l > 0)
      for (auto& per_type : t) inherit(per_type[l], per_type[l - 1]);
  }
  return t;
}

const Table& table() {
  static const Table t = build_table(cpu_max_isa());
  return t;
}

}  // namespace

KernelSet registry_entry(DType t, Isa isa, Isa max) {
  const int s = slot(t);
  if (s < 0 || isa > max) return {};
  return build_table(max)[static_cast<size_t>(s)][static_cast<int>(isa)];
}

DType vec_dot_type(DType weight_type) {
  if (dtype_is_sparse(weight_type)) return DType::kQ8_0;
  switch (dtype_layout_base(weight_type)) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kMXFP4:
      return DType::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ8_1:
      return DType::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
      return DType::kQ8_K;
    default:
      return DType::kF32;  // F32/F16/BF16 (and types without a vec_dot)
  }
}

const KernelSet& kernels(DType t, Isa isa) {
  static const KernelSet kNone{};
  const int s = slot(t);
  if (s < 0) return kNone;
  const Isa max = cpu_max_isa();
  if (isa > max) isa = max;
  if (isa < Isa::kScalar) isa = Isa::kScalar;
  return table()[static_cast<size_t>(s)][static_cast<int>(isa)];
}

}  // namespace ember
