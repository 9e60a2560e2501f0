// The CPU matmul driver (kernels/matmul.h): activations converted once per
// activation type, then every target's output rows swept by the registry's
// kernels, all targets' rows in one parallel section.
#include "kernels/matmul.h"
#include "kernels/cpu/matmul_jobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/interleave.h"
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
constexpr int kMaxActTypes = 5;  // F32, Q8_0, Q8_1, Q8_K, Q8_0 with 4-bit levels
constexpr size_t kActAlign = 64;

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

namespace matmul_jobs {

// Rows per task of the row-streaming paths (decode, few tokens, token lanes):
// long runs (the kernels prefetch within a call), a multiple of `unit`,
// about four tasks per thread.
int64_t streaming_grain(int64_t n_rows, int n_threads, int64_t unit) {
  return std::max<int64_t>(kDecodeRows, n_rows / (4 * static_cast<int64_t>(n_threads)) / unit * unit);
}

Job plan(const TensorView& w, float* y, int64_t ldy, int64_t n_tokens, int n_threads) {
  Job j;
  j.wk = &kernels(w.type);
  j.n_rows = w.ne[1];
  j.w_row_bytes = w.row_bytes();
  j.wrows = static_cast<const uint8_t*>(w.data);
  j.y = y;
  j.ldy = ldy;
  if (n_tokens == 1 && j.wk->vec_dot_rows) {
    // Long runs of rows per call: the kernel prefetches the rows ahead within
    // its call (hardware prefetchers miss its access pattern).
    j.path = Path::kRows;
    j.grain = streaming_grain(j.n_rows, n_threads, std::max(8, dtype_row_group(w.type)));
  } else if (j.wk->vec_dot_few && n_tokens <= j.wk->few_max) {
    // 2 .. few_max tokens: decode's row kernel, each row unpacked once for all of them.
    j.path = Path::kFew;
    j.grain = streaming_grain(j.n_rows, n_threads, 16);
  } else if (j.wk->vec_dot_tokens && n_tokens >= std::max(2, j.wk->tokens_min) && n_tokens <= j.wk->tokens_max) {
    // A few tokens (batched decode): each weight row streamed once for all of
    // them, in runs of rows as long as decode's.
    j.path = Path::kTokens;
    j.grain = streaming_grain(j.n_rows, n_threads, 16);
  } else if (j.wk->vec_dot_tile) {
    // Panels of consecutive tiles per task (several per thread for balance):
    // tile kernels prefetch the rows that follow them.
    j.path = Path::kTile;
    const int64_t tr = j.wk->tile_rows;
    const int64_t panel =
        std::max<int64_t>(kPanelRows, j.n_rows / (8 * static_cast<int64_t>(n_threads)) / tr * tr);
    j.grain = n_tokens == 1 ? kDecodeRows : panel;
  } else {
    j.path = Path::kDots;
    j.grain = n_tokens == 1 ? kDecodeRows : kRowTile;
  }
  if (n_threads == 1) j.grain = std::max<int64_t>(1, j.n_rows);  // one thread: one sweep of all rows
  return j;
}

// Output rows [rb, re) of one job for all tokens.
void run(const Job& j, int64_t n_in, int64_t n_tokens, int64_t rb, int64_t re) {
  switch (j.path) {
    case Path::kRows:
      j.wk->vec_dot_rows(n_in, j.y + rb, j.wrows + static_cast<size_t>(rb) * j.w_row_bytes, j.w_row_bytes, j.xq,
                         re - rb);
      return;
    case Path::kFew:
      j.wk->vec_dot_few(n_in, j.y + rb, j.ldy, j.wrows + static_cast<size_t>(rb) * j.w_row_bytes, j.w_row_bytes, j.xq,
                        j.x_row_bytes, re - rb, static_cast<int>(n_tokens));
      return;
    case Path::kTokens:
      j.wk->vec_dot_tokens(n_in, j.y + rb, j.ldy, j.wrows + static_cast<size_t>(rb) * j.w_row_bytes, j.w_row_bytes,
                           j.packed, re - rb, static_cast<int>(n_tokens));
      return;
    case Path::kTile:
      tile_rows_range(*j.wk, n_in, rb, re, j.wrows, j.w_row_bytes, j.xq, j.x_row_bytes, n_tokens, j.y, j.ldy);
      return;
    case Path::kCols:
      col_matmul_rows(*j.cols, j.col_fn, *j.col_list, rb, re, j.y, j.ldy);
      return;
    case Path::kDots:
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
        const int64_t t1 = std::min(n_tokens, t0 + kTokenTile);
        for (int64_t r = rb; r < re; ++r) {
          const uint8_t* wrow = j.wrows + static_cast<size_t>(r) * j.w_row_bytes;
          for (int64_t t = t0; t < t1; ++t) j.wk->vec_dot(n_in, j.y + t * j.ldy + r, wrow, j.xq + t * j.x_row_bytes);
        }
      }
      return;
  }
}

}  // namespace matmul_jobs

namespace {

using namespace matmul_jobs;

// An activation format: a vec_dot_type, in its own levels or in 4-bit ones.
struct ActType {
  DType type = DType::kF32;
  bool int4 = false;
  bool operator==(const ActType&) const = default;
};

// Activation sparsity of a call (MatmulTarget::act_threshold, cols, skip).
struct Sparsity {
  float threshold = 0.0f;
  const MatmulTarget* targets = nullptr;  // [n_jobs]: their cols and skip
};

// The shared driver: jobs[i] reads the activations in act[i]'s format.
void run_jobs(Job* jobs, const ActType* act, int n_jobs, const float* x, int64_t ldx, int64_t n_in, int64_t n_tokens,
              ThreadPool& pool, MatmulScratch& scratch, const Sparsity& sp = {}) {
  // 1. Activations -> each distinct format once (f32 stays as is), after
  // the activation-sparsity threshold (x' = x * [|x| > t]) when there is one.
  ActType types[kMaxActTypes];
  size_t offset[kMaxActTypes], row_bytes[kMaxActTypes];
  int n_types = 0;
  size_t total = 0;
  const size_t sparse_bytes =
      sp.threshold > 0.0f ? (static_cast<size_t>(n_tokens * n_in) * sizeof(float) + kActAlign - 1) / kActAlign * kActAlign
                          : 0;
  total += sparse_bytes;
  for (int i = 0; i < n_jobs; ++i) {
    if (act[i].type == DType::kF32 || std::find(types, types + n_types, act[i]) != types + n_types) continue;
    EMBER_CHECK(n_types < kMaxActTypes);
    types[n_types] = act[i];
    row_bytes[n_types] = dtype_row_size(act[i].type, n_in);
    offset[n_types] = total;
    total += (row_bytes[n_types] * static_cast<size_t>(n_tokens) + kActAlign - 1) / kActAlign * kActAlign;
    ++n_types;
  }
  // Token-lane packs: each (format, pack function) once.
  struct Pack {
    int act;
    PackTokensFn fn;
    size_t offset;
  };
  Pack packs[kMaxMatmulTargets];
  int n_packs = 0;
  for (int i = 0; i < n_jobs; ++i) {
    if (jobs[i].path != Path::kTokens) continue;
    const int a = static_cast<int>(std::find(types, types + n_types, act[i]) - types);
    EMBER_CHECK(a < n_types);
    int p = 0;
    while (p < n_packs && !(packs[p].act == a && packs[p].fn == jobs[i].wk->pack_tokens)) ++p;
    jobs[i].pack = p;
    if (p < n_packs) continue;
    packs[n_packs++] = {a, jobs[i].wk->pack_tokens, total};
    const size_t bytes = jobs[i].wk->tokens_pack_bytes(n_in, static_cast<int>(n_tokens));
    total += (bytes + kActAlign - 1) / kActAlign * kActAlign;
  }
  // Column candidates (kernels/act_sparse.h): the jobs with a column copy
  // and a kernel, a few tokens, not switched off; one union active list of
  // the tokens per activation format they read.
  int col_act[kMaxMatmulTargets];
  ColKernel col_k[kMaxMatmulTargets];
  bool col_format[kMaxActTypes] = {};
  size_t list_offset[kMaxActTypes] = {};
  bool any_col = false;
  for (int i = 0; i < n_jobs; ++i) {
    col_act[i] = -1;
    if (!sp.targets || !sp.targets[i].cols || sp.targets[i].skip == ActSkip::kOff || n_tokens > kColMaxTokens)
      continue;
    col_k[i] = col_kernel(sp.targets[i].cols->type);
    if (!col_k[i].fn || (sp.targets[i].skip == ActSkip::kAuto &&
                         (!col_k[i].fast || n_tokens > col_auto_rule(sp.targets[i].cols->type).max_tokens)))
      continue;
    const int a = static_cast<int>(std::find(types, types + n_types, act[i]) - types);
    if (a >= n_types) continue;
    col_act[i] = a;
    any_col = true;
    if (!col_format[a]) {
      col_format[a] = true;
      list_offset[a] = total;
      total += (col_active_bytes(n_in, static_cast<int>(n_tokens)) + kActAlign - 1) / kActAlign * kActAlign;
    }
  }

  uint8_t* buf = n_types || sparse_bytes ? scratch.get(total) : nullptr;
  if (sparse_bytes) {
    auto* xs = reinterpret_cast<float*>(buf);
    const float t = sp.threshold;
    pool.parallel_for(n_tokens, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t i = 0; i < n_in; ++i) {
          const float v = x[r * ldx + i];
          xs[r * n_in + i] = std::fabs(v) > t ? v : 0.0f;
        }
    });
    x = xs;
    ldx = n_in;
  }
  if (n_types) {
    QuantizeRowFn quantize[kMaxActTypes];
    for (int a = 0; a < n_types; ++a) {
      const KernelSet& k = kernels(types[a].type);
      quantize[a] = types[a].int4 ? k.quantize_row_int4 : k.quantize_row;
      EMBER_CHECK_MSG(quantize[a], "no 4-bit form of this activation type (checked at model load)");
    }
    pool.parallel_for(n_tokens, 8, [&](int64_t b, int64_t e, int) {
      for (int a = 0; a < n_types; ++a)
        for (int64_t t = b; t < e; ++t)
          quantize[a](x + t * ldx, buf + offset[a] + static_cast<size_t>(t) * row_bytes[a], n_in);
    });
    scratch.count_converted(n_types * n_tokens);
    for (int p = 0; p < n_packs; ++p) {
      const int a = packs[p].act;
      const PackTokensFn fn = packs[p].fn;
      pool.parallel_for(n_in / dtype_block_size(types[a].type), 1, [&](int64_t b, int64_t e, int) {
        fn(n_in, buf + offset[a], row_bytes[a], static_cast<int>(n_tokens), buf + packs[p].offset, b, e);
      });
    }
  }
  // The union active list of the tokens, and the choice per format (the
  // same bits either way: only speed depends on it).
  ColActive lists[kMaxActTypes];
  double union_frac[kMaxActTypes] = {};
  for (int a = 0; a < n_types && any_col; ++a) {
    if (!col_format[a]) continue;
    int64_t n_union = 0;
    lists[a] = col_active_build(types[a].type, buf + offset[a], row_bytes[a], static_cast<int>(n_tokens), n_in,
                                buf + list_offset[a], &n_union);
    union_frac[a] = static_cast<double>(n_union) / static_cast<double>(n_in);
  }
  for (int i = 0; i < n_jobs; ++i) {
    const int a = col_act[i];
    if (a < 0 || !(sp.targets[i].skip == ActSkip::kOn ||
                   union_frac[a] <= col_auto_rule(sp.targets[i].cols->type).max_union))
      continue;
    Job& j = jobs[i];
    j.path = Path::kCols;
    j.cols = sp.targets[i].cols;
    j.col_fn = col_k[i].fn;
    j.col_list = &lists[a];
    // Tasks of whole row units, one per thread: the longest streams per
    // channel (a task reads its rows of every active channel), and one
    // start of the kernel's prefetch cursor per thread.
    const int64_t units = (j.n_rows + kColRowUnit - 1) / kColRowUnit;
    j.grain = pool.size() == 1 ? j.n_rows
                               : kColRowUnit * std::max<int64_t>(1, (units + pool.size() - 1) / pool.size());
  }
  for (int i = 0; i < n_jobs; ++i) {
    if (act[i].type == DType::kF32) {
      jobs[i].xq = reinterpret_cast<const uint8_t*>(x);
      jobs[i].x_row_bytes = static_cast<size_t>(ldx) * sizeof(float);
      continue;
    }
    const int a = static_cast<int>(std::find(types, types + n_types, act[i]) - types);
    jobs[i].xq = buf + offset[a];
    jobs[i].x_row_bytes = row_bytes[a];
    if (jobs[i].pack >= 0) jobs[i].packed = buf + packs[jobs[i].pack].offset;
  }

  // 2. Every job's output rows, cut into tasks of its grain, in one parallel
  // section. Every output element comes from the same kernel arithmetic
  // (tile and row kernels reproduce vec_dot bit for bit), so neither the
  // split, the token count nor the other jobs ever change results.
  int64_t first_task[kMaxMatmulTargets + 1];
  first_task[0] = 0;
  for (int i = 0; i < n_jobs; ++i)
    first_task[i + 1] = first_task[i] + (jobs[i].n_rows + jobs[i].grain - 1) / jobs[i].grain;
  auto task = [&](int64_t k) {
    int i = 0;
    while (k >= first_task[i + 1]) ++i;
    const int64_t rb = (k - first_task[i]) * jobs[i].grain;
    run(jobs[i], n_in, n_tokens, rb, std::min(jobs[i].n_rows, rb + jobs[i].grain));
  };
  pool.parallel_for(first_task[n_jobs], 1, [&](int64_t b, int64_t e, int) {
    for (int64_t k = b; k < e; ++k) task(k);
  });
}

}  // namespace

void matmul(const float* x, int64_t ldx, int64_t n_tokens, const MatmulTarget* targets, int n_targets,
            ThreadPool& pool, MatmulScratch& scratch) {
  if (n_tokens <= 0 || n_targets <= 0) return;
  const int64_t n_in = targets[0].w->ne[0];
  for (int g = 0; g < n_targets; g += kMaxMatmulTargets) {
    const int ng = std::min(kMaxMatmulTargets, n_targets - g);
    Job jobs[kMaxMatmulTargets];
    ActType act[kMaxMatmulTargets];
    Sparsity sp;
    sp.threshold = targets[0].act_threshold;
    sp.targets = targets + g;
    for (int i = 0; i < ng; ++i) {
      const MatmulTarget& tg = targets[g + i];
      EMBER_CHECK(tg.w->ne[0] == n_in);  // every target reads the same activation rows
      EMBER_CHECK(tg.act_threshold == sp.threshold);  // and the same thresholded ones
      jobs[i] = plan(*tg.w, tg.y, tg.ldy, n_tokens, pool.size());
      act[i].type = vec_dot_type(tg.w->type);
      act[i].int4 = tg.act_bits == 4 && act[i].type != DType::kF32;
    }
    run_jobs(jobs, act, ng, x, ldx, n_in, n_tokens, pool, scratch, sp);
  }
}

void matmul(const TensorView& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens, ThreadPool& pool,
            MatmulScratch& scratch) {
  const MatmulTarget t{&w, y, ldy};
  matmul(x, ldx, n_tokens, &t, 1, pool, scratch);
}

void dequantize_row(const TensorView& w, int64_t row, float* out) {
  if (dtype_row_group(w.type) == 1) {
    kernels(w.type).dequantize_row(w.row(row), out, w.ne[0]);
    return;
  }
  thread_local std::vector<uint8_t> raw;  // an interleaved row, back in its base type
  raw.resize(w.row_bytes());
  copy_row_bytes(w, row, raw.data());
  kernels(dtype_layout_base(w.type)).dequantize_row(raw.data(), out, w.ne[0]);
}

}  // namespace ember
