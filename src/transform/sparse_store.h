// `ember prune --format sparse`: the pruned block matrices (attn_q/k/v/
// output, ffn_gate/up/down of every block, as prune.h prunes them) stored in
// the sparse int8 format (kSQ8 | C, quant/sparse.h) instead of dense Q8_0.
// A lossless re-encoding: each matrix must be Q8_0 after the plan ran
// (a Q8_0 source kept in its types, or --type q8_0); its capacity C is its
// densest row's nonzeros per 64 inputs, rounded up. Other tensors are left
// as they are. Matrices where the sparse rows would not be smaller than the
// Q8_0 ones (C > 56: 12 + C bytes against 68 per 64 inputs) stay Q8_0.
//
// Threading: one calling thread; rows converted on `pool`.
#pragma once

#include <cstddef>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"

namespace ember {

struct SparseStoreReport {
  int matrices = 0;      // stored sparse
  int kept_dense = 0;    // block matrices left Q8_0 (too dense to gain)
  size_t dense_bytes = 0, sparse_bytes = 0;  // of the matrices stored sparse: before, after
};

// Errors: a block matrix that is not Q8_0 (named, with its type), rows not a
// multiple of 64.
Result<SparseStoreReport> store_block_matrices_sparse(ModelFile* file, ThreadPool& pool);

}  // namespace ember
