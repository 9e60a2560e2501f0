// Kernel registry: a static [dtype][isa] table of KernelSets, built once on
// first use by explicit assignments (no self-registration, so nothing depends
// on static-initializer order or on the linker keeping unreferenced objects).
// Level order: scalar reference -> AVX2 -> AVX-512 -> AMX; every field left null at a
// level inherits the next lower level's entry, so a lookup always yields the
// best implementation available at or below the requested level (a tile
// kernel is inherited only together with the vec_dot it reproduces). AVX-512
// entries are only installed when the CPU supports that level.
#include "kernels/registry.h"

#include <array>
#include <cstring>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/ref/dot.h"
#include "quant/quantize.h"

namespace ember {
namespace {

constexpr int kMaxTypeId = 31;  // file DType ids are < 31 (BF16 = 30)
constexpr int kLevels = kNumIsaLevels;

// Slots: file types by id, then the interleaved layouts by their base's id.
using Table = std::array<std::array<KernelSet, kLevels>, 2 * kMaxTypeId>;

int slot(DType t) {
  const auto id = static_cast<uint32_t>(t);
  if (id < static_cast<uint32_t>(kMaxTypeId)) return static_cast<int>(id);
  const auto base = static_cast<uint32_t>(dtype_layout_base(t));
  if (dtype_row_group(t) > 1 && base < static_cast<uint32_t>(kMaxTypeId)) return kMaxTypeId + static_cast<int>(base);
  return -1;
}

// F32 rows are their own "quantized" form.
void copy_row_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }
void copy_row_f32_out(const void* x, float* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

KernelSet& at(Table& t, DType type, Isa isa) { return t[slot(type)][static_cast<int>(isa)]; }

// Interleaved layouts: the de-interleaving kernels at every level (native
// ones replace them where a level has them).
void fill_interleaved(Table& t, Isa max) {
  for (DType type : kInterleavedTypes)
    for (int l = 0; l <= static_cast<int>(max); ++l) set_interleaved_generic(at(t, type, static_cast<Isa>(l)), type, static_cast<Isa>(l));
}

void set_tile(KernelSet& k, VecDotTileFn f, int rows, int cols) {
  k.vec_dot_tile = f;
  k.tile_rows = rows;
  k.tile_cols = cols;
}

void set_tokens(KernelSet& k, VecDotTokensFn f, PackTokensFn pack, TokensPackBytesFn bytes, int min, int max) {
  k.vec_dot_tokens = f;
  k.pack_tokens = pack;
  k.tokens_pack_bytes = bytes;
  k.tokens_min = min;
  k.tokens_max = max;
}

void fill_scalar(Table& t) {
  const Isa s = Isa::kScalar;
  at(t, DType::kF32, s) = {copy_row_f32_out, copy_row_f32, ref::f32_dot};
  at(t, DType::kF16, s) = {dequantize_row_f16_ref, quantize_row_f16_ref, ref::f16_dot};
  at(t, DType::kBF16, s) = {dequantize_row_bf16_ref, quantize_row_bf16_ref, ref::bf16_dot};
  at(t, DType::kQ4_0, s) = {dequantize_row_q4_0_ref, quantize_row_q4_0_ref, ref::q4_0_dot};
  at(t, DType::kQ4_1, s) = {dequantize_row_q4_1_ref, quantize_row_q4_1_ref, ref::q4_1_dot};
  at(t, DType::kQ5_0, s) = {dequantize_row_q5_0_ref, quantize_row_q5_0_ref, ref::q5_0_dot};
  at(t, DType::kQ5_1, s) = {dequantize_row_q5_1_ref, quantize_row_q5_1_ref, ref::q5_1_dot};
  at(t, DType::kQ8_0, s) = {dequantize_row_q8_0_ref, quantize_row_q8_0_ref, ref::q8_0_dot};
  at(t, DType::kQ8_0, s).quantize_row_int4 = quantize_row_q8_0_int4_ref;
  at(t, DType::kQ8_1, s) = {dequantize_row_q8_1_ref, quantize_row_q8_1_ref, nullptr};
  at(t, DType::kQ2_K, s) = {dequantize_row_q2_K_ref, quantize_row_q2_K_ref, ref::q2_K_dot};
  at(t, DType::kQ3_K, s) = {dequantize_row_q3_K_ref, quantize_row_q3_K_ref, ref::q3_K_dot};
  at(t, DType::kQ4_K, s) = {dequantize_row_q4_K_ref, quantize_row_q4_K_ref, ref::q4_K_dot};
  at(t, DType::kQ5_K, s) = {dequantize_row_q5_K_ref, quantize_row_q5_K_ref, ref::q5_K_dot};
  at(t, DType::kQ6_K, s) = {dequantize_row_q6_K_ref, quantize_row_q6_K_ref, ref::q6_K_dot};
  at(t, DType::kQ8_K, s) = {dequantize_row_q8_K_ref, quantize_row_q8_K_ref, ref::q8_K_dot};
}

void fill_avx2(Table& t) {
  const Isa a = Isa::kAvx2;
  at(t, DType::kF32, a).vec_dot = avx2::f32_dot;
  at(t, DType::kF16, a) = {avx2::f16_dequantize, nullptr, avx2::f16_dot};
  at(t, DType::kBF16, a) = {avx2::bf16_dequantize, nullptr, avx2::bf16_dot};
  at(t, DType::kQ4_0, a) = {avx2::q4_0_dequantize, nullptr, avx2::q4_0_dot};
  at(t, DType::kQ4_1, a).vec_dot = avx2::q4_1_dot;
  at(t, DType::kQ5_0, a) = {avx2::q5_0_dequantize, nullptr, avx2::q5_0_dot};
  at(t, DType::kQ5_1, a).vec_dot = avx2::q5_1_dot;
  at(t, DType::kQ8_0, a) = {avx2::q8_0_dequantize, avx2::q8_0_quantize, avx2::q8_0_dot};
  at(t, DType::kQ8_0, a).quantize_row_int4 = avx2::q8_0_quantize_int4;
  at(t, DType::kQ8_1, a).quantize_row = avx2::q8_1_quantize;
  at(t, DType::kQ2_K, a).vec_dot = avx2::q2_K_dot;
  at(t, DType::kQ3_K, a).vec_dot = avx2::q3_K_dot;
  at(t, DType::kQ4_K, a).dequantize_row = avx2::q4_K_dequantize;
  at(t, DType::kQ6_K, a).dequantize_row = avx2::q6_K_dequantize;
  at(t, DType::kQ8_K, a).quantize_row = avx2::q8_K_quantize;
  // Q4_0 / Q5_0 / Q8_0: the row-lane kernels (one arithmetic with the AVX-512
  // level's); two or more tokens take the token-lane form.
  struct Legacy {
    DType type;
    VecDotRowsFn rows;
    VecDotTileFn tile;
    VecDotTokensFn tokens;
    PackTokensFn pack;
  };
  const Legacy legacy[] = {
      {DType::kQ4_0, avx2::q4_0_rows, avx2::q4_0_tile, avx2::q4_0_tokens,
       avx2::q4_0_tokens_pack},
      {DType::kQ5_0, avx2::q5_0_rows, avx2::q5_0_tile, avx2::q5_0_tokens,
       avx2::q5_0_tokens_pack},
      {DType::kQ8_0, avx2::q8_0_rows, avx2::q8_0_tile, avx2::q8_0_tokens,
       avx2::q8_0_tokens_pack},
  };
  for (const Legacy& l : legacy) {
    KernelSet& k = at(t, l.type, a);
    k.vec_dot_rows = l.rows;
    set_tile(k, l.tile, avx2::kLegacyTileRows, avx2::kLegacyTileCols);
    set_tokens(k, l.tokens, l.pack, avx2::legacy_tokens_pack_bytes, 2, 1 << 30);
  }
  set_tile(at(t, DType::kQ2_K, a), avx2::q2_K_tile, avx2::kKquantsTileRows, avx2::kKquantsTileCols);
  set_tile(at(t, DType::kQ3_K, a), avx2::q3_K_tile, avx2::kKquantsTileRows, avx2::kKquantsTileCols);
  set_tile(at(t, DType::kF32, a), avx2::f32_tile, avx2::kFloatTileRows, avx2::kFloatTileCols);
  set_tile(at(t, DType::kF16, a), avx2::f16_tile, avx2::kFloatTileRows, avx2::kFloatTileCols);
  set_tile(at(t, DType::kBF16, a), avx2::bf16_tile, avx2::kFloatTileRows, avx2::kFloatTileCols);
  // Q4_K, Q6_K: the row-lane kernels (the AVX-512 lanes' arithmetic).
  at(t, DType::kQ4_K, a).vec_dot = avx2::q4_K_dot;
  at(t, DType::kQ4_K, a).vec_dot_rows = avx2::q4_K_rows;
  set_tile(at(t, DType::kQ4_K, a), avx2::q4_K_tile, avx2::kKquantsLanesTileRows, avx2::kKquantsLanesTileCols);
  at(t, DType::kQ5_K, a).vec_dot = avx2::q5_K_dot;
  at(t, DType::kQ5_K, a).vec_dot_rows = avx2::q5_K_rows;
  set_tile(at(t, DType::kQ5_K, a), avx2::q5_K_tile, avx2::kKquantsLanesTileRows, avx2::kKquantsLanesTileCols);
  at(t, DType::kQ6_K, a).vec_dot = avx2::q6_K_dot;
  at(t, DType::kQ6_K, a).vec_dot_rows = avx2::q6_K_rows;
  set_tile(at(t, DType::kQ6_K, a), avx2::q6_K_tile, avx2::kKquantsLanesTileRows, avx2::kKquantsLanesTileCols);
}

void fill_avx512(Table& t) {
  const Isa v = Isa::kAvx512;
  at(t, DType::kF32, v).vec_dot = avx512::f32_dot;
  at(t, DType::kF16, v).vec_dot = avx512::f16_dot;
  at(t, DType::kBF16, v).vec_dot = avx512::bf16_dot;
  set_tile(at(t, DType::kF32, v), avx512::f32_tile, avx512::kFloatTileRows, avx512::kFloatTileCols);
  set_tile(at(t, DType::kF16, v), avx512::f16_tile, avx512::kFloatTileRows, avx512::kFloatTileCols);
  set_tile(at(t, DType::kBF16, v), avx512::bf16_tile, avx512::kFloatTileRows, avx512::kFloatTileCols);
  at(t, DType::kF32, v).vec_dot_rows = avx512::f32_rows;
  at(t, DType::kF16, v).vec_dot_rows = avx512::f16_rows;
  at(t, DType::kBF16, v).vec_dot_rows = avx512::bf16_rows;
  at(t, DType::kQ4_0, v).vec_dot = avx512::q4_0_dot;
  at(t, DType::kQ4_1, v).vec_dot = avx512::q4_1_dot;
  at(t, DType::kQ5_0, v).vec_dot = avx512::q5_0_dot;
  at(t, DType::kQ5_1, v).vec_dot = avx512::q5_1_dot;
  at(t, DType::kQ8_0, v).vec_dot = avx512::q8_0_dot;
  at(t, DType::kQ2_K, v).vec_dot = avx512::q2_K_dot;
  at(t, DType::kQ3_K, v).vec_dot = avx512::q3_K_dot;
  set_tile(at(t, DType::kQ4_0, v), avx512::q4_0_tile, avx512::kLegacyTileRows, avx512::kLegacyTileCols);
  at(t, DType::kQ4_0, v).vec_dot_rows = avx512::q4_0_rows;
  set_tile(at(t, DType::kQ4_1, v), avx512::q4_1_tile, avx512::kLegacyTileRows, avx512::kLegacyTileCols);
  set_tile(at(t, DType::kQ5_1, v), avx512::q5_1_tile, avx512::kLegacyTileRows, avx512::kLegacyTileCols);
  at(t, DType::kQ4_1, v).vec_dot_rows = avx512::q4_1_rows;
  at(t, DType::kQ5_1, v).vec_dot_rows = avx512::q5_1_rows;
  set_tile(at(t, DType::kQ5_0, v), avx512::q5_0_tile, avx512::kLegacyTileRows, avx512::kLegacyTileCols);
  set_tile(at(t, DType::kQ8_0, v), avx512::q8_0_tile, avx512::kLegacyTileRows, avx512::kLegacyTileCols);
  at(t, DType::kQ5_0, v).vec_dot_rows = avx512::q5_0_rows;
  at(t, DType::kQ8_0, v).vec_dot_rows = avx512::q8_0_rows;
  set_tile(at(t, DType::kQ2_K, v), avx512::q2_K_tile, avx512::kKquantsTileRows, avx512::kKquantsTileCols);
  set_tile(at(t, DType::kQ3_K, v), avx512::q3_K_tile, avx512::kKquantsTileRows, avx512::kKquantsTileCols);
  at(t, DType::kQ2_K, v).vec_dot_rows = avx512::q2_K_rows;
  at(t, DType::kQ3_K, v).vec_dot_rows = avx512::q3_K_rows;
  // Q4_K, Q5_K, Q6_K: the row-lane kernels (one arithmetic for vec_dot,
  // decode, tiles), their decode form for a few tokens (speculative
  // verification, small batches) and their token-lane form for 12-16 tokens
  // (batched decode).
  struct LanesK {
    DType type;
    VecDotFn dot;
    VecDotRowsFn rows;
    VecDotTileFn tile;
    VecDotFewFn few;
    VecDotTokensFn tokens;
  };
  const LanesK lanes_k[] = {
      {DType::kQ4_K, avx512::q4_K_dot, avx512::q4_K_rows,
       avx512::q4_K_tile, avx512::q4_K_few,
       avx512::q4_K_tokens},
      {DType::kQ5_K, avx512::q5_K_dot, avx512::q5_K_rows,
       avx512::q5_K_tile, avx512::q5_K_few,
       avx512::q5_K_tokens},
      {DType::kQ6_K, avx512::q6_K_dot, avx512::q6_K_rows,
       avx512::q6_K_tile, avx512::q6_K_few,
       avx512::q6_K_tokens},
  };
  for (const LanesK& l : lanes_k) {
    KernelSet& k = at(t, l.type, v);
    k.vec_dot = l.dot;
    k.vec_dot_rows = l.rows;
    set_tile(k, l.tile, avx512::kKquantsLanesTileRows, avx512::kKquantsLanesTileCols);
    k.vec_dot_few = l.few;
    k.few_max = avx512::kKquantsLanesFewMax;
    set_tokens(k, l.tokens, avx512::kquants_tokens_pack, avx512::kquants_tokens_pack_bytes, avx512::kKquantsTokensMin,
               avx512::kKquantsTokensMax);
  }
}

// Fills null fields at each level from the level below.
void inherit_lower_levels(Table& t) {
  for (auto& per_type : t) {
    for (int l = 1; l < kLevels; ++l) {
      KernelSet& k = per_type[l];
      const KernelSet& lower = per_type[l - 1];
      if (!k.dequantize_row) k.dequantize_row = lower.dequantize_row;
      if (!k.quantize_row) k.quantize_row = lower.quantize_row;
      if (!k.quantize_row_int4) k.quantize_row_int4 = lower.quantize_row_int4;
      if (!k.vec_dot) k.vec_dot = lower.vec_dot;
      // A tile kernel matches one vec_dot bit for bit: inherit it only along
      // with that same vec_dot.
      if (!k.vec_dot_tile && k.vec_dot == lower.vec_dot) {
        k.vec_dot_tile = lower.vec_dot_tile;
        k.tile_rows = lower.tile_rows;
        k.tile_cols = lower.tile_cols;
      }
      if (!k.vec_dot_few && k.vec_dot == lower.vec_dot) {
        k.vec_dot_few = lower.vec_dot_few;
        k.few_max = lower.few_max;
      }
      if (!k.vec_dot_tokens && k.vec_dot == lower.vec_dot)
        set_tokens(k, lower.vec_dot_tokens, lower.pack_tokens, lower.tokens_pack_bytes, lower.tokens_min,
                   lower.tokens_max);
    }
  }
}

Table build_table() {
  Table t{};
  fill_scalar(t);
  const Isa max = cpu_max_isa();
  if (max >= Isa::kAvx2) fill_avx2(t);
  if (max >= Isa::kAvx512) fill_avx512(t);
  inherit_lower_levels(t);
  fill_interleaved(t, max);
  if (max >= Isa::kAvx2) {
    // AVX2: native decode over every interleaved layout; 2+ tokens take the
    // native tile (K-quants) or the token-lane form (Q4_0 / Q5_0 / Q8_0, the
    // plain types' pack; their generic tile stays for direct tile calls).
    struct Native {
      DType type;
      VecDotRowsFn rows;
      VecDotTileFn tile;       // null: keep the generic tile
      VecDotTokensFn tokens;   // null: none
      PackTokensFn pack;
    };
    const Native natives[] = {
        {DType::kQ4_K_R16, avx2::q4_K_r16_rows, avx2::q4_K_r16_tile, nullptr, nullptr},
        {DType::kQ6_K_R16, avx2::q6_K_r16_rows, avx2::q6_K_r16_tile, nullptr, nullptr},
        {DType::kQ4_0_R16, avx2::q4_0_r16_rows, nullptr, avx2::q4_0_r16_tokens,
         avx2::q4_0_tokens_pack},
        {DType::kQ5_0_R16, avx2::q5_0_r16_rows, nullptr, avx2::q5_0_r16_tokens,
         avx2::q5_0_tokens_pack},
        {DType::kQ8_0_R16, avx2::q8_0_r16_rows, nullptr, avx2::q8_0_r16_tokens,
         avx2::q8_0_tokens_pack},
    };
    for (const Native& n : natives) {
      KernelSet& k = at(t, n.type, Isa::kAvx2);
      k.vec_dot_rows = n.rows;
      if (n.tile) k.vec_dot_tile = n.tile;
      if (n.tokens) set_tokens(k, n.tokens, n.pack, avx2::legacy_tokens_pack_bytes, 2, 1 << 30);
      k.interleaved_native = true;
    }
  }
  if (max >= Isa::kAvx512) {
    struct Native {
      DType type;
      VecDotRowsFn rows;
      VecDotFewFn few;
      VecDotTileFn tile;
    };
    const Native natives[] = {
        {DType::kQ4_0_R16, avx512::q4_0_r16_rows, avx512::q4_0_r16_few,
         avx512::q4_0_r16_tile},
        {DType::kQ5_0_R16, avx512::q5_0_r16_rows, avx512::q5_0_r16_few,
         avx512::q5_0_r16_tile},
        {DType::kQ8_0_R16, avx512::q8_0_r16_rows, avx512::q8_0_r16_few,
         avx512::q8_0_r16_tile},
        {DType::kQ4_K_R16, avx512::q4_K_r16_rows, avx512::q4_K_r16_few,
         avx512::q4_K_r16_tile},
        {DType::kQ6_K_R16, avx512::q6_K_r16_rows, avx512::q6_K_r16_few,
         avx512::q6_K_r16_tile},
    };
    for (const Native& n : natives) {
      KernelSet& k = at(t, n.type, Isa::kAvx512);
      k.vec_dot_rows = n.rows;
      k.vec_dot_few = n.few;
      k.few_max = avx512::kInterleavedFewMax;
      k.vec_dot_tile = n.tile;
      // Q4_0 / Q5_0 / Q8_0: the tile takes two groups (shared activation broadcasts)
      // and beats the one-group passes above 16 tokens.
      if (n.type == DType::kQ4_0_R16 || n.type == DType::kQ5_0_R16 || n.type == DType::kQ8_0_R16) {
        k.tile_rows = 32;
        k.few_max = avx512::kInterleavedLegacyFewMax;
      }
      k.interleaved_native = true;
    }
    // Q4_0 / Q5_0 / Q8_0 above few_max tokens: the token-lane form (the
    // activations packed once per matmul) instead of the tile.
    struct Tokens {
      DType type;
      VecDotTokensFn fn;
      PackTokensFn pack;
    };
    const Tokens tokens[] = {
        {DType::kQ4_0_R16, avx512::q4_0_r16_tokens, avx512::q4_0_r16_tokens_pack},
        {DType::kQ5_0_R16, avx512::q5_0_r16_tokens, avx512::q5_0_r16_tokens_pack},
        {DType::kQ8_0_R16, avx512::q8_0_r16_tokens, avx512::q8_0_r16_tokens_pack},
    };
    for (const Tokens& n : tokens)
      set_tokens(at(t, n.type, Isa::kAvx512), n.fn, n.pack, avx512::legacy_r16_tokens_pack_bytes,
                 avx512::kInterleavedLegacyFewMax + 1, 1 << 30);
  }
  if (max >= Isa::kAmx) {
    // AMX: the AVX-512 kernels of every interleaved layout, and for Q4_K_R16
    // / Q6_K_R16 the tile kernels from amx::kKquantsR16MinTokens tokens (they call
    // the AVX-512 ones below that).
    for (DType type : kInterleavedTypes) at(t, type, Isa::kAmx) = at(t, type, Isa::kAvx512);
    struct Amx {
      DType type;
      VecDotFewFn few;
      VecDotTileFn tile;
    };
    const Amx amx_kernels[] = {
        {DType::kQ4_K_R16, amx::q4_K_r16_few, amx::q4_K_r16_tile},
        {DType::kQ6_K_R16, amx::q6_K_r16_few, amx::q6_K_r16_tile},
    };
    for (const Amx& a : amx_kernels) {
      KernelSet& k = at(t, a.type, Isa::kAmx);
      k.vec_dot_few = a.few;
      set_tile(k, a.tile, amx::kKquantsR16TileRows, amx::kKquantsR16TileCols);
    }
    // Q4_0 / Q5_0 / Q8_0: the AMX token-lane form (its own pack) where the
    // AVX-512 token lanes ran.
    struct AmxTokens {
      DType type;
      VecDotTokensFn fn;
      PackTokensFn pack;
    };
    const AmxTokens amx_tokens[] = {
        {DType::kQ4_0_R16, amx::q4_0_r16_tokens, amx::q4_0_r16_tokens_pack},
        {DType::kQ5_0_R16, amx::q5_0_r16_tokens, amx::q5_0_r16_tokens_pack},
        {DType::kQ8_0_R16, amx::q8_0_r16_tokens, amx::q8_0_r16_tokens_pack},
    };
    for (const AmxTokens& a : amx_tokens) {
      KernelSet& k = at(t, a.type, Isa::kAmx);
      set_tokens(k, a.fn, a.pack, amx::legacy_r16_tokens_pack_bytes, k.tokens_min, k.tokens_max);
    }
  }
  return t;
}

const Table& table() {
  static const Table t = build_table();
  return t;
}

}  // namespace

DType vec_dot_type(DType weight_type) {
  switch (dtype_layout_base(weight_type)) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
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
