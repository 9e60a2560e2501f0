// Matrix products on (quantized) weights: y = x · Wᵀ.
//
// W is a weight matrix [n_out, n_in] (TensorView ne[0] = n_in, ne[1] = n_out)
// in any supported dtype; x is f32 activations [n_tokens, n_in]. Activations
// are converted once to W's vec_dot_type (int8 blocks for quantized weights),
// then every (row, token) pair is one vec_dot on the blocks. Work is split
// over output rows on the thread pool. Each output element is computed by the
// same kernel with the same reduction order whatever n_tokens or the thread
// count, so results are batch-invariant bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace ember {

// Reusable scratch memory for activation conversion (grows, never shrinks).
class MatmulScratch {
 public:
  uint8_t* get(size_t bytes) {
    if (buf_.size() < bytes) buf_.resize(bytes);
    return buf_.data();
  }

 private:
  std::vector<uint8_t> buf_;
};

// y[t, o] = sum_i x[t, i] * W[o, i]   for t < n_tokens, o < n_out.
// x: [n_tokens, n_in] row stride ldx; y: [n_tokens, n_out] row stride ldy.
void matmul(const TensorView& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens,
            ThreadPool& pool, MatmulScratch& scratch);

// Same, restricted to output rows [row_begin, row_end) (y columns indexed
// from row_begin) — used for vocabulary slices.
void matmul_rows(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x, int64_t ldx, float* y,
                 int64_t ldy, int64_t n_tokens, ThreadPool& pool, MatmulScratch& scratch);

// Dequantizes row `row` of W into out[0 : n_in] (embedding lookup).
void dequantize_row(const TensorView& w, int64_t row, float* out);

}  // namespace ember
