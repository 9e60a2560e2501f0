// Interleaved layouts (kernels/interleave.h): the field tables, the
// (de)interleaving copies, and the interleaved kernels of the ISA levels
// without native ones: each 16-row group de-interleaved into base-type rows
// and run through the base type's kernels at the same level (so results
// equal the base type's at that level bit for bit).
#include "kernels/interleave.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/registry.h"
#include "quant/blocks.h"

namespace ember {
namespace {

constexpr int kG = kInterleavedGroupRows;

// A field of the base block: byte offset, unit (bytes) and units per row.
// A bit field (Q5_0's qh: one 4-byte unit) is stored transposed instead:
// 8 little-endian 64-bit masks, bit 4 q + b % 4 of mask b / 4 = bit b of
// row q's field, i.e. mask k (k < 4) marks the bytes of qs vector k whose
// low nibbles have the high bit, mask 4 + k those whose high nibbles do
// (the byte masks of the kernel's masked adds).
struct Field {
  int offset, unit, count;
  bool bits = false;
};
struct Layout {
  DType type, base;
  size_t block;  // base block bytes
  Field fields[4];
};
constexpr Layout kLayouts[] = {
    {DType::kQ4_0_R16, DType::kQ4_0, 18, {{0, 2, 1}, {2, 4, 4}, {0, 0, 0}, {0, 0, 0}}},
    {DType::kQ5_0_R16, DType::kQ5_0, 22, {{0, 2, 1}, {2, 4, 1, true}, {6, 4, 4}, {0, 0, 0}}},
    {DType::kQ8_0_R16, DType::kQ8_0, 34, {{0, 2, 1}, {2, 4, 8}, {0, 0, 0}, {0, 0, 0}}},
    {DType::kQ4_K_R16, DType::kQ4_K, 144, {{0, 2, 1}, {2, 2, 1}, {4, 4, 3}, {16, 4, 32}}},
    {DType::kQ6_K_R16, DType::kQ6_K, 210, {{208, 2, 1}, {192, 1, 16}, {0, 4, 32}, {128, 4, 16}}},
};

const Layout* layout_of(DType t) {
  for (const Layout& l : kLayouts)
    if (l.type == t || l.base == t) return &l;
  return nullptr;
}

// f(offset in row q's base block, offset in the group's super-block, unit)
// for every unit of row q; bits(offset in the base block, offset of the
// field's masks) for a bit field.
template <class F, class B>
inline void for_units(const Layout& l, int q, F&& f, B&& bits) {
  size_t dst = 0;
  for (const Field& fd : l.fields) {
    if (fd.bits) {
      bits(static_cast<size_t>(fd.offset), dst);
    } else {
      for (int k = 0; k < fd.count; ++k)
        f(static_cast<size_t>(fd.offset + k * fd.unit), dst + static_cast<size_t>((k * kG + q) * fd.unit), fd.unit);
    }
    dst += static_cast<size_t>(kG * fd.unit * fd.count);
  }
}

// Row q's 32-bit field `v` into / out of the transposed masks at m: nibble
// k of v (bits 4k .. 4k+3) is nibble q of mask k.
inline void put_bits(uint8_t* m, int q, uint32_t v) {
  for (int k = 0; k < 8; ++k) {
    uint64_t mk;
    std::memcpy(&mk, m + 8 * k, 8);
    mk |= static_cast<uint64_t>(v >> (4 * k) & 0xF) << (4 * q);
    std::memcpy(m + 8 * k, &mk, 8);
  }
}
inline uint32_t get_bits(const uint8_t* m, int q) {
  uint32_t v = 0;
  for (int k = 0; k < 8; ++k) {
    uint64_t mk;
    std::memcpy(&mk, m + 8 * k, 8);
    v |= static_cast<uint32_t>(mk >> (4 * q) & 0xF) << (4 * k);
  }
  return v;
}

// Fixed-size copies (inlined; a memcpy call per 1-4 bytes dominated 8B loads).
inline void copy_unit(uint8_t* dst, const uint8_t* src, int unit) {
  switch (unit) {
    case 4: std::memcpy(dst, src, 4); break;
    case 2: std::memcpy(dst, src, 2); break;
    default: *dst = *src; break;
  }
}

template <Isa kIsa>
void rows_via_base(const Layout& l, int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const KernelSet& b = kernels(l.base, kIsa);
  thread_local std::vector<uint8_t> raw;
  raw.resize(kG * w_row_bytes);
  for (int64_t r0 = 0; r0 < nr; r0 += kG) {
    deinterleave_group(l.type, static_cast<const uint8_t*>(w) + static_cast<size_t>(r0) * w_row_bytes, n, raw.data());
    const int gr = static_cast<int>(std::min<int64_t>(kG, nr - r0));
    if (b.vec_dot_rows) {
      b.vec_dot_rows(n, s + r0, raw.data(), w_row_bytes, x, gr);
    } else {
      for (int r = 0; r < gr; ++r) b.vec_dot(n, s + r0 + r, raw.data() + r * w_row_bytes, x);
    }
  }
}

template <Isa kIsa>
void tile_via_base(const Layout& l, int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                   size_t x_row_bytes, int nr, int nc) {
  const KernelSet& b = kernels(l.base, kIsa);
  thread_local std::vector<uint8_t> raw;
  raw.resize(kG * w_row_bytes);
  deinterleave_group(l.type, w, n, raw.data());
  const auto* xb = static_cast<const uint8_t*>(x);
  if (!b.vec_dot_tile) {
    for (int c = 0; c < nc; ++c)
      for (int r = 0; r < nr; ++r) b.vec_dot(n, s + c * lds + r, raw.data() + r * w_row_bytes, xb + c * x_row_bytes);
    return;
  }
  for (int r = 0; r < nr; r += b.tile_rows)
    for (int c = 0; c < nc; c += b.tile_cols)
      b.vec_dot_tile(n, s + c * lds + r, lds, raw.data() + r * w_row_bytes, w_row_bytes, xb + c * x_row_bytes,
                     x_row_bytes, std::min(b.tile_rows, nr - r), std::min(b.tile_cols, nc - c));
}

template <DType kT, Isa kIsa>
void rows_fn(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows_via_base<kIsa>(*layout_of(kT), n, s, w, w_row_bytes, x, nr);
}
template <DType kT, Isa kIsa>
void tile_fn(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
             int nr, int nc) {
  tile_via_base<kIsa>(*layout_of(kT), n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

template <DType kT>
KernelSet generic(Isa isa) {
  KernelSet k;
  switch (isa) {
    case Isa::kScalar:
      k.vec_dot_rows = rows_fn<kT, Isa::kScalar>;
      k.vec_dot_tile = tile_fn<kT, Isa::kScalar>;
      break;
    case Isa::kAvx2:
      k.vec_dot_rows = rows_fn<kT, Isa::kAvx2>;
      k.vec_dot_tile = tile_fn<kT, Isa::kAvx2>;
      break;
    case Isa::kAvx512:
    case Isa::kAmx:
      k.vec_dot_rows = rows_fn<kT, Isa::kAvx512>;
      k.vec_dot_tile = tile_fn<kT, Isa::kAvx512>;
      break;
  }
  k.tile_rows = kInterleavedGroupRows;
  k.tile_cols = kInterleavedTileCols;
  return k;
}

}  // namespace

KernelSet deinterleaved(DType t, Isa isa) {
  switch (t) {
    case DType::kQ4_0_R16: return generic<DType::kQ4_0_R16>(isa);
    case DType::kQ5_0_R16: return generic<DType::kQ5_0_R16>(isa);
    case DType::kQ8_0_R16: return generic<DType::kQ8_0_R16>(isa);
    case DType::kQ4_K_R16: return generic<DType::kQ4_K_R16>(isa);
    case DType::kQ6_K_R16: return generic<DType::kQ6_K_R16>(isa);
    default: return {};
  }
}

VecDotTileFn deinterleaved_tile(DType t, Isa isa) { return deinterleaved(t, isa).vec_dot_tile; }

DType interleaved_type(DType base) {
  const Layout* l = layout_of(base);
  return l && l->base == base ? l->type : base;
}

bool interleave_pays(DType base, int64_t rows) {
  if (interleaved_type(base) == base || rows <= 0 || rows % kG != 0) return false;
  return kernels(interleaved_type(base)).interleaved_native;
}

void interleave_rows(DType base, const void* src, int64_t rows, int64_t n, void* dst) {
  const Layout* l = layout_of(base);
  EMBER_CHECK(l && l->base == base && rows % kG == 0);
  const int64_t nb = n / dtype_block_size(l->base);
  const size_t rb = l->block * static_cast<size_t>(nb);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kG; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* out = d + static_cast<size_t>(g * kG) * rb + static_cast<size_t>(i) * kG * l->block;
      std::memset(out, 0, kG * l->block);  // bit fields are or-ed in
      for (int q = 0; q < kG; ++q) {
        const uint8_t* in = s + static_cast<size_t>(g * kG + q) * rb + static_cast<size_t>(i) * l->block;
        for_units(
            *l, q, [&](size_t so, size_t dof, int unit) { copy_unit(out + dof, in + so, unit); },
            [&](size_t so, size_t dof) {
              uint32_t v;
              std::memcpy(&v, in + so, 4);
              put_bits(out + dof, q, v);
            });
      }
    }
}

void deinterleave_row(DType t, const void* group, int q, int64_t n, void* dst) {
  const Layout* l = layout_of(t);
  EMBER_CHECK(l && l->type == t && q >= 0 && q < kG);
  const int64_t nb = n / dtype_block_size(l->base);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* in = static_cast<const uint8_t*>(group) + static_cast<size_t>(i) * kG * l->block;
    uint8_t* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(i) * l->block;
    for_units(
        *l, q, [&](size_t so, size_t dof, int unit) { copy_unit(out + so, in + dof, unit); },
        [&](size_t so, size_t dof) {
          const uint32_t v = get_bits(in + dof, q);
          std::memcpy(out + so, &v, 4);
        });
  }
}

void deinterleave_group(DType t, const void* group, int64_t n, void* dst) {
  const size_t rb = dtype_row_size(t, n);
  for (int q = 0; q < kG; ++q) deinterleave_row(t, group, q, n, static_cast<uint8_t*>(dst) + q * rb);
}

void copy_row_bytes(const TensorView& w, int64_t r, void* dst) {
  const int g = dtype_row_group(w.type);
  if (g == 1) {
    std::memcpy(dst, w.row(r), w.row_bytes());
    return;
  }
  deinterleave_row(w.type, w.row(r - r % g), static_cast<int>(r % g), w.ne[0], dst);
}

}  // namespace ember
