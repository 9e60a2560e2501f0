// Quantized matrix products driver; see matmul.h.
#include "kernels/matmul.h"

#include <algorithm>

#include "kernels/registry.h"

namespace ember {

namespace {

constexpr int64_t kRowTile = 16;     // weight rows per task without a tile kernel
constexpr int64_t kTokenTile = 64;   // tokens per inner sweep (activation rows stay in L2)
constexpr int64_t kPanelRows = 32;   // weight rows per prefill task with a tile kernel
constexpr int64_t kDecodeRows = 64;  // weight rows per decode task (dynamic: balances threads)
// Activation bytes swept per pass over a row tile: stays in L2 next to the
// other thread's share.
constexpr size_t kTokenBlockBytes = 192 * 1024;

// Rows [rb, re) x all tokens with the tile kernel: for each token block (L2
// sized), each tile of tile_rows weight rows (L1) sweeps the block's tokens
// tile_cols at a time. A single token goes to the row kernels instead (the
// one-token rule lives here, not in every tile kernel).
void tile_rows_range(const KernelSet& wk, int64_t n_in, int64_t rb, int64_t re, const uint8_t* wrows,
                     size_t w_row_bytes, const uint8_t* xq, size_t x_row_bytes, int64_t n_tokens, float* y,
                     int64_t ldy) {
  const int64_t tr = wk.tile_rows, tc = wk.tile_cols;
  int64_t tb = static_cast<int64_t>(kTokenBlockBytes / std::max<size_t>(x_row_bytes, 1));
  tb = std::max<int64_t>(tc, tb / tc * tc);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += tb) {
    const int64_t t1 = std::min(n_tokens, t0 + tb);
    for (int64_t r = rb; r < re; r += tr) {
      const int nr = static_cast<int>(std::min(tr, re - r));
      const uint8_t* wr = wrows + static_cast<size_t>(r) * w_row_bytes;
      for (int64_t t = t0; t < t1; t += tc) {
        const int nc = static_cast<int>(std::min(tc, t1 - t));
        const uint8_t* xt = xq + static_cast<size_t>(t) * x_row_bytes;
        if (nc == 1) {  // one token: nothing to share between rows; the row kernels are faster
          if (wk.vec_dot_rows) {
            wk.vec_dot_rows(n_in, y + t * ldy + r, wr, w_row_bytes, xt, nr);
          } else {
            for (int i = 0; i < nr; ++i) wk.vec_dot(n_in, y + t * ldy + r + i, wr + i * w_row_bytes, xt);
          }
          continue;
        }
        wk.vec_dot_tile(n_in, y + t * ldy + r, ldy, wr, w_row_bytes, xt, x_row_bytes, nr, nc);
      }
    }
  }
}

}  // namespace

void matmul_rows(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x, int64_t ldx, float* y,
                 int64_t ldy, int64_t n_tokens, ThreadPool& pool, MatmulScratch& scratch) {
  const int64_t n_in = w.ne[0];
  const DType act_type = vec_dot_type(w.type);
  const KernelSet& wk = kernels(w.type);
  const KernelSet& ak = kernels(act_type);
  const size_t w_row_bytes = w.row_bytes();
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);

  // 1. Activations -> vec_dot_type rows (f32 stays as is).
  const uint8_t* xq;
  size_t x_row_bytes;
  if (act_type == DType::kF32) {
    xq = reinterpret_cast<const uint8_t*>(x);
    x_row_bytes = static_cast<size_t>(ldx) * sizeof(float);
  } else {
    x_row_bytes = dtype_row_size(act_type, n_in);
    uint8_t* buf = scratch.get(x_row_bytes * static_cast<size_t>(n_tokens));
    auto quantize = ak.quantize_row;
    pool.parallel_for(n_tokens, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) quantize(x + t * ldx, buf + t * x_row_bytes, n_in);
    });
    xq = buf;
  }

  // 2. Output rows split over threads. Every output element comes from the
  // same kernel arithmetic (tile kernels reproduce vec_dot bit for bit), so
  // the split and the token count never change results.
  const int64_t n_rows = row_end - row_begin;
  const uint8_t* wrows = wdata + static_cast<size_t>(row_begin) * w_row_bytes;
  if (n_tokens == 1 && wk.vec_dot_rows) {
    // Long runs of rows per call: the kernel prefetches the rows ahead within
    // its call (hardware prefetchers miss its access pattern).
    auto rows_fn = wk.vec_dot_rows;
    const int64_t per_thread = n_rows / (4 * static_cast<int64_t>(pool.size()));
    const int64_t grain = std::max<int64_t>(kDecodeRows, per_thread / 8 * 8);
    pool.parallel_for(n_rows, grain, [&](int64_t rb, int64_t re, int) {
      rows_fn(n_in, y + rb, wrows + static_cast<size_t>(rb) * w_row_bytes, w_row_bytes, xq, re - rb);
    });
    return;
  }
  if (wk.vec_dot_tile) {
    // Panels of consecutive tiles per task (several per thread for balance):
    // tile kernels prefetch the rows that follow them.
    const int64_t tr = wk.tile_rows;
    const int64_t panel = std::max<int64_t>(kPanelRows, n_rows / (8 * static_cast<int64_t>(pool.size())) / tr * tr);
    const int64_t grain = n_tokens == 1 ? kDecodeRows : panel;
    pool.parallel_for(n_rows, grain, [&](int64_t rb, int64_t re, int) {
      tile_rows_range(wk, n_in, rb, re, wrows, w_row_bytes, xq, x_row_bytes, n_tokens, y, ldy);
    });
    return;
  }
  auto vec_dot = wk.vec_dot;
  const int64_t grain = n_tokens == 1 ? kDecodeRows : kRowTile;
  pool.parallel_for(n_rows, grain, [&](int64_t rb, int64_t re, int) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
      const int64_t t1 = std::min(n_tokens, t0 + kTokenTile);
      for (int64_t r = rb; r < re; ++r) {
        const uint8_t* wrow = wrows + static_cast<size_t>(r) * w_row_bytes;
        for (int64_t t = t0; t < t1; ++t) vec_dot(n_in, y + t * ldy + r, wrow, xq + t * x_row_bytes);
      }
    }
  });
}

void matmul(const TensorView& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens, ThreadPool& pool,
            MatmulScratch& scratch) {
  matmul_rows(w, 0, w.ne[1], x, ldx, y, ldy, n_tokens, pool, scratch);
}

void dequantize_row(const TensorView& w, int64_t row, float* out) {
  kernels(w.type).dequantize_row(w.row(row), out, w.ne[0]);
}

}  // namespace ember
