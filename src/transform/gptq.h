// GPTQ (Frantar et al., 2022) adapted to the GGUF block formats: a weight
// matrix W [n_out, n_in] is quantized one input column at a time, and the
// rounding error of each column is fed back into the columns not yet
// quantized through the inverse Hessian of the layer's reconstruction loss
// ||W X - Q X||^2, H = X^T X (from calibration, in double):
//   H += damp * mean(diag H) * I; U = upper Cholesky factor of H^-1
//   for each column i (in order, or by decreasing H_ii with act_order):
//     q_i = round(w_i) with its block's scale; e = (w_i - q_i) / U_ii
//     w_j -= e * U_ij for the later columns j
// with lazy batch updates (the columns of a batch of block_size are updated
// at once after it; the later ones once per batch). The group of a weight is
// its GGUF block (32 elements; k-quants 256): when the pass reaches a block
// its scales and mins are chosen by importance-weighted rounding
// (quant/quantize_imatrix.h, importance diag H) of the block's current,
// error-updated values, then its levels are set column by column with those
// scales (quant/block_levels.h). With act_order the blocks' scales are
// chosen up front from the original weights (static groups), since the
// columns of a block are no longer reached together. Columns with H_ii = 0
// (never active) are quantized as zeros.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ember {

struct GptqOptions {
  double damp = 0.01;     // dampening, a fraction of the mean diagonal of H
  int block_size = 128;   // lazy-batch width, rounded up to a multiple of the GGUF block
  bool act_order = false; // columns by decreasing H_ii
  // How each GGUF block's scales (and mins) are chosen, by importance-
  // weighted rounding with importance diag H:
  //   kDynamic  when the pass reaches the block, from its error-updated values;
  //   kStatic   before the pass, from the original weights (always so with
  //             act_order: the columns of a block are not reached together);
  //   kRefit    after a first (kDynamic) pass, from the values that pass
  //             rounded (each column's error-updated value when reached);
  //             then a second pass rounds with those scales fixed.
  enum class Scales { kDynamic, kStatic, kRefit };
  Scales scales = Scales::kDynamic;
};

// "dynamic", "static", "refit" (nullopt otherwise).
std::optional<GptqOptions::Scales> gptq_scales_from_name(std::string_view name);

// True for the types GPTQ writes (those with block levels: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
bool gptq_supports(DType t);

// Quantizes W [n_out, n_in] (row-major f32) with Hessian H [n_in, n_in]
// (row-major, symmetric) into dst (n_out rows of dtype_row_size(t, n_in)).
// Rows run in parallel on `pool`. Errors: unsupported type, n_in not a
// multiple of the block size, H not positive definite even after 6
// tenfold increases of the dampening.
Status gptq_quantize(const float* W, int64_t n_out, int64_t n_in, const double* H, DType t, const GptqOptions& o,
                     uint8_t* dst, ThreadPool& pool);

// What GPTQ (and SparseGPT, sparsegpt.h) work with: diag H, the dead
// columns (H_ii == 0: never active), the processing order (identity, or by
// decreasing H_ii with act_order) and U, the upper Cholesky factor of
// (H_perm + lambda I)^-1 in that order, dead rows / columns replaced by the
// identity, lambda = damp * mean(diag H) (dead columns counted as 1),
// tenfold more up to 6 times if the factorisation fails.
struct GptqHinv {
  std::vector<double> diag;  // [n] H_ii, original order
  std::vector<char> dead;    // [n]
  std::vector<int64_t> perm; // [n] position -> column
  std::vector<double> U;     // [n, n] row-major, in perm order
  double mean_diag = 0;
};
// pool (optional): the factorisation's threads (the result does not depend
// on their number).
Status gptq_prepare_hinv(const double* H, int64_t n, double damp, bool act_order, GptqHinv* out,
                         ThreadPool* pool = nullptr);

// The upper Cholesky factor U of (H + lambda I)^-1 (H^-1 = U^T U),
// [n, n] row-major in *u; false if H + lambda I is not positive definite.
// O(n^3 / 3) multiply-adds in double: the dot products of the factorisation
// in the fixed order of f64_dot (transform/f64_vec.h), the inverse's row
// updates element by element; the columns of R and the rows of U are spread
// over `pool` (optional) without changing any result bit.
bool gptq_inverse_cholesky(const double* H, int64_t n, double lambda, double* u, ThreadPool* pool = nullptr);

}  // namespace ember
