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

constexpr int R = kColPanelRows;

size_t header_bytes(DType t) { return t == DType::kQ8_0 ? 2 * R : t == DType::kQ4_K ? 20 * R : 18 * R; }
size_t channel_bytes(DType t) { return t == DType::kQ4_K ? R / 2 : R; }

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

// Writes row r (0..127) of one block of the panel from the base-type block
// `src` (its bytes in the file's layout).
void put_row_block(DType t, const uint8_t* src, int r, uint8_t* blk) {
  auto put_f16 = [&](uint8_t* dst, f16_t v) { std::memcpy(dst + 2 * r, &v, 2); };
  auto put8 = [&](uint8_t* levels, int c, int u) {
    levels[static_cast<size_t>(c) * R + 64 * (r / 64) + ref::act_cols_byte(r)] = static_cast<uint8_t>(u);
  };
  if (t == DType::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
    put_f16(blk, b->d);
    for (int c = 0; c < kQK; ++c) put8(blk + 2 * R, c, b->qs[c] + 128);
  } else if (t == DType::kQ4_K) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(src);
    put_f16(blk, b->d);
    put_f16(blk + 2 * R, b->dmin);
    for (int j = 0; j < 8; ++j) quant::get_scale_min_k4(j, b->scales, &blk[4 * R + j * R + r], &blk[12 * R + j * R + r]);
    int8_t q[kQK_K];
    quant::unpack_q4_K(*b, q);
    uint8_t* levels = blk + 20 * R;
    for (int c = 0; c < kQK_K; ++c) {
      uint8_t& byte = levels[static_cast<size_t>(c) * (R / 2) + ref::act_cols_byte(r)];
      byte = static_cast<uint8_t>(r < 64 ? (byte & 0xF0) | q[c] : (byte & 0x0F) | (q[c] << 4));
    }
  } else {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(src);
    put_f16(blk, b->d);
    for (int j = 0; j < 16; ++j) blk[2 * R + j * R + r] = static_cast<uint8_t>(b->scales[j]);
    int8_t q[kQK_K];
    quant::unpack_q6_K(*b, q);
    for (int c = 0; c < kQK_K; ++c) put8(blk + 18 * R, c, q[c] + 32);
  }
}

}  // namespace

bool col_supported(DType base) {
  return base == DType::kQ8_0 || base == DType::kQ4_K || base == DType::kQ6_K;
}

int col_block_inputs(DType base) { return base == DType::kQ8_0 ? kQK : kQK_K; }

Result<ColumnWeights> make_column_weights(const TensorView& w) {
  const DType base = dtype_layout_base(w.type);
  if (!col_supported(base))
    return Status::errorf("activation-sparse columns: type {} has no column layout (Q8_0, Q4_K, Q6_K do)",
                          dtype_name(w.type));
  const int64_t n_in = w.ne[0], n_out = w.ne[1];
  const int bi = col_block_inputs(base);
  if (n_in % bi != 0 || n_in > 65536 || n_in <= 0 || n_out <= 0)
    return Status::errorf("activation-sparse columns: a [{}, {}] matrix (inputs must be a multiple of {}, <= 65536)",
                          n_out, n_in, bi);
  ColumnWeights c;
  c.type = base;
  c.n_in = n_in;
  c.n_out = n_out;
  c.n_panels = (n_out + R - 1) / R;
  c.block_bytes = header_bytes(base) + static_cast<size_t>(bi) * channel_bytes(base);
  c.panel_bytes = c.block_bytes * static_cast<size_t>(n_in / bi);
  c.data = col_buffer(c.bytes());
  if (!c.data) return Status::errorf("activation-sparse columns: out of memory ({} bytes)", c.bytes());
  const size_t src_block = dtype_row_size(base, bi);
  std::vector<uint8_t> row(w.row_bytes());
  if (base == DType::kQ8_0) {  // padded rows: levels of q = 0
    for (int64_t p = 0; p < c.n_panels; ++p)
      for (int64_t b = 0; b < n_in / bi; ++b)
        std::memset(c.data.get() + p * c.panel_bytes + b * c.block_bytes + 2 * R, 128, static_cast<size_t>(bi) * R);
  } else if (base == DType::kQ6_K) {
    for (int64_t p = 0; p < c.n_panels; ++p)
      for (int64_t b = 0; b < n_in / bi; ++b)
        std::memset(c.data.get() + p * c.panel_bytes + b * c.block_bytes + 18 * R, 32, static_cast<size_t>(bi) * R);
  }
  for (int64_t o = 0; o < n_out; ++o) {
    copy_row_bytes(w, o, row.data());
    uint8_t* panel = c.data.get() + static_cast<size_t>(o / R) * c.panel_bytes;
    for (int64_t b = 0; b < n_in / bi; ++b)
      put_row_block(base, row.data() + b * src_block, static_cast<int>(o % R), panel + b * c.block_bytes);
  }
  return c;
}

int64_t col_active_build(DType act, const void* xq, int64_t n_in, uint16_t* idx, int8_t* val, int32_t* start,
                         int32_t* gsum) {
  const auto* bytes = static_cast<const uint8_t*>(xq);
  const bool k = act == DType::kQ8_K;
  const int bi = k ? kQK_K : kQK;
  const size_t bb = k ? sizeof(BlockQ8_K) : sizeof(BlockQ8_0);
  const size_t qs_off = k ? offsetof(BlockQ8_K, qs) : offsetof(BlockQ8_0, qs);
  int32_t e = 0;
  int64_t nnz = 0;
  for (int64_t g = 0; g < n_in / kColGroup; ++g) {
    start[g] = e;
    int32_t s = 0;
    const int64_t c0 = g * kColGroup;
    const auto* q = reinterpret_cast<const int8_t*>(bytes + static_cast<size_t>(c0 / bi) * bb + qs_off) + c0 % bi;
    for (int i = 0; i < kColGroup; ++i)
      if (q[i]) {
        idx[e] = static_cast<uint16_t>(c0 + i);
        val[e++] = q[i];
        s += q[i];
      }
    nnz += e - start[g];
    while ((e - start[g]) % 4) {
      idx[e] = static_cast<uint16_t>(c0);
      val[e++] = 0;
    }
    gsum[g] = s;
  }
  start[n_in / kColGroup] = e;
  return nnz;
}

ColKernel col_kernel(DType base, Isa isa) {
  if (!col_supported(base)) return {};
  if (isa == Isa::kScalar) return {ref::act_cols_ref, false};
  if (isa >= Isa::kAvx512 && cpu_max_isa() >= Isa::kAvx512) return {avx512::act_cols, true};
  return {ref::act_cols_lanes, false};
}

void col_matmul_rows(const ColumnWeights& w, ColDotFn fn, const ColActive* toks, int n_tok, int64_t r0, int64_t r1,
                     float* y, int64_t ldy) {
  constexpr int kMaxTok = 16;
  constexpr size_t kChunkBytes = 96 * 1024;  // a panel's blocks swept by every token while in L2
  const int64_t nb = w.n_in / col_block_inputs(w.type);
  const int64_t chunk = n_tok == 1 ? nb : std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / w.block_bytes));
  alignas(64) float state[kMaxTok][2 * R];
  for (int t0 = 0; t0 < n_tok; t0 += kMaxTok) {
    const int nt = std::min(kMaxTok, n_tok - t0);
    for (int64_t p = r0 / R; p * R < r1; ++p) {
      for (int t = 0; t < nt; ++t) std::fill(state[t], state[t] + 2 * R, 0.0f);
      for (int64_t b = 0; b < nb; b += chunk)
        for (int t = 0; t < nt; ++t) fn(w, p, toks[t0 + t], b, std::min(nb, b + chunk), state[t]);
      const int64_t lo = std::max(r0, p * R), hi = std::min({r1, (p + 1) * R, w.n_out});
      for (int t = 0; t < nt; ++t)
        for (int64_t r = lo; r < hi; ++r) y[(t0 + t) * ldy + r] = state[t][r - p * R] - state[t][R + r - p * R];
    }
  }
}

}  // namespace ember
