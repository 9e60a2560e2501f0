// The pruned block matrices (attn_q/k/v/output, ffn_gate/up/down of every
// block, as prune.h prunes them) stored in a sparse format (quant/sparse.h)
// instead of dense: Q8_0 matrices as sparse int8 (kSQ8 | C), Q4_0 ones as
// sparse int4 (kSQ4 | C); the capacity C is the densest row's kept values
// per 64 inputs, rounded up. A lossless re-encoding; other tensors are left
// as they are. Two callers:
//   `ember prune --format sparse` (strict): every block matrix must be Q8_0
//     or Q4_0 after the plan ran (a source kept in its types, or --type);
//     those whose sparse rows would not be smaller than the dense ones
//     (sq8: C > 56, 12 + C against 68 bytes per 64 inputs; sq4: C > 48,
//     12 + C / 2 against 36) stay dense;
//   `--detect-sparsity` at load time (run, serve, bench, perplexity;
//     cli/common.h): a dense file's Q8_0 / Q4_0 block matrices that are
//     sparse enough (an exact 2:4 matrix: capacity 32; a pruned dense
//     export) are stored sparse in memory, the others left alone.
//
// Threading: one calling thread; rows converted on `pool`.
#pragma once

#include <cstddef>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"

namespace ember {

struct SparseStoreOptions {
  // A matrix is stored sparse when its sparse bytes are at most this share
  // of its dense bytes.
  double max_ratio = 1.0;
  // true: a block matrix that is neither Q8_0 nor Q4_0, or whose rows are
  // not a multiple of 64, is an error; false: it is left as it is.
  bool strict = true;
};

struct SparseStoreReport {
  int candidates = 0;    // Q8_0 / Q4_0 block matrices
  int matrices = 0;      // stored sparse int8
  int matrices4 = 0;     // stored sparse int4
  int kept_dense = 0;    // block matrices left dense (too dense to gain)
  size_t dense_bytes = 0, sparse_bytes = 0;  // of the matrices stored sparse: before, after
  // Of dense_bytes, the whole pages of the mapped file dropped from the
  // resident set (core/mmap_file.h release_file_pages); 0 for owned buffers.
  size_t released_bytes = 0;
};

// Errors (strict): a block matrix that is neither Q8_0 nor Q4_0 (named,
// with its type), rows not a multiple of 64.
Result<SparseStoreReport> store_block_matrices_sparse(ModelFile* file, ThreadPool& pool,
                                                      const SparseStoreOptions& o = {});

}  // namespace ember
