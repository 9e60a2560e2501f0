// Matrix products on (quantized) weights, y = x · Wᵀ: the CPU backend's
// matmul driver (kernels/cpu/matmul.cpp), behind Backend::matmul
// (kernels/backend.h).
//
// W is a weight matrix [n_out, n_in] (TensorView ne[0] = n_in, ne[1] = n_out)
// in any supported dtype; x is f32 activations [n_tokens, n_in]. Activations
// are converted once to W's vec_dot_type (int8 blocks for quantized weights),
// then every (row, token) pair is one vec_dot on the blocks. Several weight
// matrices that read the same activations (Q/K/V; gate/up) go in one call:
// x is converted once per distinct vec_dot_type and all their output rows
// are split over the thread pool in one parallel section. A target with
// MatmulTarget::act_bits 4 reads its activations rounded to 4-bit levels in
// the same blocks (W4A4 / W8A4 through the int8 kernels; a format of its own
// for the once-per-format conversion).
//
// Arithmetic contract: each output element is computed by the same kernel
// with the same reduction order whatever n_tokens, the thread count, the
// split, or the other matrices of the call, so results are batch-invariant
// bit for bit and a multi-matrix call gives exactly what one call per matrix
// gives.
//
// Threading: one caller at a time per MatmulScratch; work runs on `pool`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"

namespace ember {

// Reusable scratch memory for activation conversion (grows, never shrinks).
class MatmulScratch {
 public:
  // `bytes` bytes at a 64-byte aligned address (contents not kept across calls).
  uint8_t* get(size_t bytes) {
    constexpr size_t kAlign = 64;
    if (buf_.size() < bytes + kAlign) buf_.resize(bytes + kAlign);
    const size_t mis = reinterpret_cast<uintptr_t>(buf_.data()) % kAlign;
    return buf_.data() + (mis ? kAlign - mis : 0);
  }
  // Activation rows converted so far (one per token per distinct
  // vec_dot_type of a call; f32 activations are used as they are).
  int64_t converted_rows() const { return converted_rows_; }
  void count_converted(int64_t rows) { converted_rows_ += rows; }

 private:
  std::vector<uint8_t> buf_;
  int64_t converted_rows_ = 0;
};

// Matrices one driver pass takes; matmul() below runs larger sets in groups.
constexpr int kMaxMatmulTargets = 8;

// y[t, o] = sum_i x[t, i] * W[o, i]   for t < n_tokens, o < n_out.
// x: [n_tokens, n_in] row stride ldx; y: [n_tokens, n_out] row stride ldy.
void matmul(const TensorView& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens,
            ThreadPool& pool, MatmulScratch& scratch);

// The same for every target (all with the same n_in = ne[0]):
// targets[i].y[t * ldy + o] = dot(x row t, targets[i].w row o).
void matmul(const float* x, int64_t ldx, int64_t n_tokens, const MatmulTarget* targets, int n_targets,
            ThreadPool& pool, MatmulScratch& scratch);

// Dequantizes row `row` of W into out[0 : n_in] (embedding lookup).
void dequantize_row(const TensorView& w, int64_t row, float* out);

}  // namespace ember
