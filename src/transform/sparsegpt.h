// SparseGPT (Frantar & Alistarh, 2023; IST-DASLab/sparsegpt `fasterprune`)
// on one weight matrix W [n_out, n_in] with the Hessian H = X^T X of its
// inputs, on GPTQ's machinery (gptq.h: dead columns, dampening, U = upper
// Cholesky factor of H^-1):
//   for each batch of B columns [p1, p2):
//     unstructured: the mask of the batch is the floor(s * n_out * (p2 - p1))
//       smallest w^2 / U_pp^2 over all its rows (ties: lower row, then
//       column first), from the values the earlier batches left; with
//       per_row, each row's floor(s * (p2 - p1)) smallest of the batch
//       (ties: lower column), so every row keeps the same count;
//     for each column p of the batch:
//       N:M: at each group of m columns, each row's n smallest w^2 / U_pp^2
//         of the group are masked;
//       q = 0 where masked, else w (or w rounded, joint quantization);
//       e = (w_p - q) / U_pp; later columns of the batch w_k -= e * U_pk
//     the columns after the batch w_k -= sum_p e_p U_pk (lazy update)
// so the error of every pruned (and rounded) weight is fed back into the
// weights not yet reached. Dead columns (H_pp = 0) are zeroed first.
// With a fixed mask (pruning already chosen, e.g. by Wanda) nothing is
// selected: the pass keeps exactly those zeros while it rounds.
// Joint quantization to a block type (GPTQ in the same pass, as the
// reference's quantizer hook): at the first column of each GGUF block the
// block's masks are chosen (N:M) and its scales picked by importance-
// weighted rounding (importance diag H; masked elements as zero with no
// weight); masked elements take the level that decodes to exactly 0, so
// only types that store zero exactly qualify (sparse_quant_supports).
//
// Threading: rows run in parallel on `pool` within each batch; the mask of
// an unstructured batch is chosen on the calling thread. Deterministic.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ember {

struct SparseGptOptions {
  double sparsity = 0.5;  // unstructured: fraction of each batch masked, in [0, 1)
  int prune_n = 0;        // N:M: n masked in every m consecutive inputs of a row (0: unstructured)
  int prune_m = 0;
  int block_size = 128;   // B, rounded up to whole GGUF blocks and N:M groups
  double damp = 0.01;     // fraction of the mean diag H added to it
  bool per_row = false;   // unstructured: the batch's quota per row, not over all rows
};

// True for the block types whose levels include an exact zero in every
// block (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K): joint pruning and quantization.
bool sparse_quant_supports(DType t);

// Prunes W [n_out, n_in] (row-major f32, in place: the result when type is
// kF32) with Hessian H [n_in, n_in] (symmetric). fixed_mask: null, or
// [n_out, n_in] bytes, 1 = pruned (no selection). type: kF32 (W holds the
// pruned, error-updated weights) or a sparse_quant_supports type: dst gets
// n_out rows of dtype_row_size(type, n_in) and W their decoded values.
// mask_out (optional): [n_out, n_in], 1 = pruned.
// Errors: sparsity outside [0, 1), a bad N:M, n_in not a multiple of m or of
// the block size, an unsupported type, H not positive definite.
Status sparsegpt_prune(float* W, int64_t n_out, int64_t n_in, const double* H, const SparseGptOptions& o,
                       const uint8_t* fixed_mask, DType type, uint8_t* dst, uint8_t* mask_out, ThreadPool& pool);

}  // namespace ember
