// The matmul driver's per-matrix work plan (kernels/cpu/matmul.cpp), shared
// with the grouped expert matmul (kernels/cpu/moe_matmul.cpp): which kernel
// form of the registry's KernelSet sweeps one weight matrix for a given
// token count (rows / few / token lanes / tile / dots) in tasks of how many
// rows, and the sweep of one task. Internal to the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/act_sparse.h"
#include "kernels/registry.h"

namespace ember::matmul_jobs {

enum class Path { kRows, kFew, kTokens, kTile, kDots, kCols };

// One weight matrix's share of the work: its output rows [0, n_rows), swept
// along `path` in tasks of `grain` rows.
struct Job {
  const KernelSet* wk;
  Path path;
  int64_t grain;
  int64_t n_rows;
  const uint8_t* wrows;
  size_t w_row_bytes;
  const uint8_t* xq;  // the activations in this weight's vec_dot_type
  size_t x_row_bytes;
  const uint8_t* packed = nullptr;  // kTokens: the activations packed by wk->pack_tokens
  int pack = -1;                    // kTokens: which of the caller's packs
  float* y;
  int64_t ldy;
  // kCols (activation sparsity, kernels/act_sparse.h): the column copy, its
  // kernel and the union active list of the tokens.
  const ColumnWeights* cols = nullptr;
  ColDotFn col_fn = nullptr;
  const ColActive* col_list = nullptr;
};

// The path and grain of w [n_rows, n_in] for n_tokens tokens on n_threads
// threads, writing y [n_tokens, ldy]; xq / x_row_bytes / packed are the
// caller's to set.
Job plan(const TensorView& w, float* y, int64_t ldy, int64_t n_tokens, int n_threads);
// Output rows [rb, re) of job j for all n_tokens tokens.
void run(const Job& j, int64_t n_in, int64_t n_tokens, int64_t rb, int64_t re);

}  // namespace ember::matmul_jobs
