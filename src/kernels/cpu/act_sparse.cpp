// Activation-sparse decode on the CPU: the column copy of a matrix, the
// active lists of activation rows, the kernel of each level and the sweep
// of a task's panels; see kernels/act_sparse.h.
#include "kernels/act_sparse.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/interleave.h"
#include "quant/block_utils.h"
#include "quant/blocks.h"

namespace ember {

namespace {

// Per row of a panel: header bytes of a block, level bytes of a channel (x2).
size_t header_bytes(DType t, int64_t p) {
  return static_cast<size_t>(p) * (t == DType::kQ8_0 ? 2 : t == DType::kQ4_K ? 20 : 18);
}
size_t channel_bytes(DType t, int64_t p) { return static_cast<size_t>(t == DType::kQ4_K ? p / 2 : p); }

// 2 MiB aligned and marked for transparent huge pages: the kernels jump
// between channels, so fewer TLB misses matter.
std::shared_ptr<uint8_t> col_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = std::max(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) return nullptr;
  madvise(p, rounded, MADV_HUGEPAGE);
  std::memset(p, 0, rounded);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// Writes row r (of P) of one block of the panel from the base-type block
// `src` (its bytes in the file's layout).
void put_row_block(DType t, const uint8_t* src, int64_t r, int64_t P, uint8_t* blk) {
  auto put_f16 = [&](uint8_t* dst, f16_t v) { std::memcpy(dst + 2 * r, &v, 2); };
  auto put8 = [&](uint8_t* levels, int c, int u) {
    levels[static_cast<size_t>(c * P + ref::act_cols_byte8(r))] = static_cast<uint8_t>(u);
  };
  if (t == DType::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
    put_f16(blk, b->d);
    for (int c = 0; c < kQK; ++c) put8(blk + 2 * P, c, b->qs[c] + 128);
  } else if (t == DType::kQ4_K) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(src);
    put_f16(blk, b->d);
    put_f16(blk + 2 * P, b->dmin);
    for (int j = 0; j < 8; ++j) quant::get_scale_min_k4(j, b->scales, &blk[(4 + j) * P + r], &blk[(12 + j) * P + r]);
    int8_t q[kQK_K];
    quant::unpack_q4_K(*b, q);
    uint8_t* levels = blk + 20 * P;
    for (int c = 0; c < kQK_K; ++c) {
      uint8_t& byte = levels[static_cast<size_t>(c * (P / 2) + ref::act_cols_byte4(r))];
      byte = static_cast<uint8_t>(ref::act_cols_high4(r) ? (byte & 0x0F) | (q[c] << 4) : (byte & 0xF0) | q[c]);
    }
  } else {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(src);
    put_f16(blk, b->d);
    for (int j = 0; j < 16; ++j) blk[(2 + j) * P + r] = static_cast<uint8_t>(b->scales[j]);
    int8_t q[kQK_K];
    quant::unpack_q6_K(*b, q);
    for (int c = 0; c < kQK_K; ++c) put8(blk + 18 * P, c, q[c] + 32);
  }
}

}  // namespace

bool col_supported(DType base) {
  return base == DType::kQ8_0 || base == DType::kQ4_K || base == DType::kQ6_K;
}

int col_block_inputs(DType base) { return base == DType::kQ8_0 ? kQK : kQK_K; }

int64_t col_panel_rows(int64_t n_out, int threads) {
  const int64_t t = std::max(1, threads);
  const int64_t per = (n_out + t - 1) / t;
  return std::clamp<int64_t>((per + kColRowUnit - 1) / kColRowUnit * kColRowUnit, kColRowUnit, kColMaxPanelRows);
}

Result<ColumnWeights> make_column_weights(const TensorView& w, int64_t max_panel_rows) {
  const DType base = dtype_layout_base(w.type);
  if (!col_supported(base))
    return Status::errorf("activation-sparse columns: type {} has no column layout (Q8_0, Q4_K, Q6_K do)",
                          dtype_name(w.type));
  const int64_t n_in = w.ne[0], n_out = w.ne[1];
  const int bi = col_block_inputs(base);
  if (n_in % bi != 0 || n_in > 65536 || n_in <= 0 || n_out <= 0)
    return Status::errorf("activation-sparse columns: a [{}, {}] matrix (inputs must be a multiple of {}, <= 65536)",
                          n_out, n_in, bi);
  if (max_panel_rows < kColRowUnit || max_panel_rows % kColRowUnit != 0)
    return Status::errorf("activation-sparse columns: panels of {} rows (a positive multiple of {})", max_panel_rows,
                          kColRowUnit);
  ColumnWeights c;
  c.type = base;
  c.n_in = n_in;
  c.n_out = n_out;
  c.n_panels = (n_out + max_panel_rows - 1) / max_panel_rows;
  const int64_t per = (n_out + c.n_panels - 1) / c.n_panels;  // the fewest padded rows
  c.panel_rows = (per + kColRowUnit - 1) / kColRowUnit * kColRowUnit;
  const int64_t P = c.panel_rows;
  c.block_bytes = header_bytes(base, P) + static_cast<size_t>(bi) * channel_bytes(base, P);
  c.panel_bytes = c.block_bytes * static_cast<size_t>(n_in / bi);
  c.data = col_buffer(c.bytes());
  if (!c.data) return Status::errorf("activation-sparse columns: out of memory ({} bytes)", c.bytes());
  const size_t src_block = dtype_row_size(base, bi);
  if (base != DType::kQ4_K) {  // padded rows: levels of q = 0
    const int off = base == DType::kQ8_0 ? 128 : 32;
    for (int64_t p = 0; p < c.n_panels; ++p)
      for (int64_t b = 0; b < n_in / bi; ++b)
        std::memset(c.data.get() + p * c.panel_bytes + b * c.block_bytes + header_bytes(base, P), off,
                    static_cast<size_t>(bi) * channel_bytes(base, P));
  }
  std::vector<uint8_t> row(w.row_bytes());
  for (int64_t o = 0; o < n_out; ++o) {
    copy_row_bytes(w, o, row.data());
    uint8_t* panel = c.data.get() + static_cast<size_t>(o / P) * c.panel_bytes;
    for (int64_t b = 0; b < n_in / bi; ++b)
      put_row_block(base, row.data() + b * src_block, o % P, P, panel + b * c.block_bytes);
  }
  return c;
}

size_t col_active_bytes(int64_t n_in, int n_tok) {
  const auto cap = static_cast<size_t>(col_active_capacity(n_in));
  const auto groups = static_cast<size_t>(n_in / kColGroup);
  const size_t lists = (cap * 2 + cap * static_cast<size_t>(n_tok) + 3) / 4 * 4;
  return lists + (groups + 1) * 4 + groups * static_cast<size_t>(n_tok) * 4;
}

ColActive col_active_build(DType act, const uint8_t* xq, size_t x_row_bytes, int n_tok, int64_t n_in, uint8_t* buf,
                           int64_t* n_union) {
  const bool k = act == DType::kQ8_K;
  const int bi = k ? kQK_K : kQK;
  const size_t bb = k ? sizeof(BlockQ8_K) : sizeof(BlockQ8_0);
  const size_t qs_off = k ? offsetof(BlockQ8_K, qs) : offsetof(BlockQ8_0, qs);
  const int64_t cap = col_active_capacity(n_in), groups = n_in / kColGroup;
  auto* idx = reinterpret_cast<uint16_t*>(buf);
  auto* val = reinterpret_cast<int8_t*>(buf + 2 * cap);
  auto* start = reinterpret_cast<int32_t*>(buf + (cap * 2 + cap * n_tok + 3) / 4 * 4);
  int32_t* gsum = start + groups + 1;
  int32_t e = 0;
  int64_t nnz = 0;
  for (int64_t g = 0; g < groups; ++g) {
    start[g] = e;
    const int64_t c0 = g * kColGroup;
    const size_t at = static_cast<size_t>(c0 / bi) * bb + qs_off + static_cast<size_t>(c0 % bi);
    uint32_t any = 0;  // bit i: channel c0 + i is non-zero for some token
    for (int t = 0; t < n_tok; ++t) {
      const auto* q = reinterpret_cast<const int8_t*>(xq + t * x_row_bytes + at);
      int32_t s = 0;
      for (int i = 0; i < kColGroup; ++i) {
        any |= static_cast<uint32_t>(q[i] != 0) << i;
        s += q[i];
      }
      gsum[t * groups + g] = s;
    }
    for (int i = 0; i < kColGroup; ++i)
      if (any >> i & 1) {
        idx[e] = static_cast<uint16_t>(c0 + i);
        for (int t = 0; t < n_tok; ++t) val[t * cap + e] = reinterpret_cast<const int8_t*>(xq + t * x_row_bytes + at)[i];
        ++e;
      }
    nnz += e - start[g];
    while ((e - start[g]) % 4) {
      idx[e] = static_cast<uint16_t>(c0);
      for (int t = 0; t < n_tok; ++t) val[t * cap + e] = 0;
      ++e;
    }
  }
  start[groups] = e;
  *n_union = nnz;
  ColActive a;
  a.n_tok = n_tok;
  a.cap = cap;
  a.idx = idx;
  a.val = val;
  a.start = start;
  a.gsum = gsum;
  a.xq = xq;
  a.x_row_bytes = x_row_bytes;
  return a;
}

ColAutoRule col_auto_rule(DType base) {
  // Q8_0: one token reading at most 55% of the columns (measured end to end
  // on the Llama-3.2-1B shape, 2 threads: 50% sparsity 1.11x in CPU time,
  // 40% 0.88x; two tokens lose at either).
  if (base == DType::kQ8_0) return {1, 0.55};
  return {};
}

bool col_auto_pays(DType base) { return col_auto_rule(base).max_tokens > 0 && col_kernel(base).fast; }

ColKernel col_kernel(DType base, Isa isa) {
  if (!col_supported(base)) return {};
  if (isa == Isa::kScalar) return {ref::act_cols_ref, false};
  if (isa >= Isa::kAvx512 && cpu_max_isa() >= Isa::kAvx512) return {avx512::act_cols, true};
  return {ref::act_cols_lanes, false};
}

void col_matmul_rows(const ColumnWeights& w, ColDotFn fn, const ColActive& a, int64_t r0, int64_t r1, float* y,
                     int64_t ldy) {
  const int64_t P = w.panel_rows;
  r1 = std::min(r1, w.n_out);
  for (int64_t p = r0 / P; p * P < r1; ++p) {
    const int64_t lo = std::max(r0, p * P) - p * P, hi = std::min(r1 - p * P, P);
    fn(w, p, lo, std::min(P, (hi + kColRowUnit - 1) / kColRowUnit * kColRowUnit), a, y, ldy);
  }
}

}  // namespace ember
