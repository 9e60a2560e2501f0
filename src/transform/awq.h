// AWQ (activation-aware weight quantization, Lin et al. 2023) for one group
// of matrices that read the same input x: the per-input-channel scale
//   s_j = max(mean|x_j|^alpha, 1e-4) / sqrt(max_k s_k * min_k s_k)
// for alpha on a grid {0, 1/n, ..., (n-1)/n} (AutoAWQ's search), keeping the
// alpha whose rounding of W diag(s) (then divided back by s) gives the
// smallest output error sum ||X (W - Wq)^T||^2 over the group's matrices on
// sampled calibration rows X. alpha = 0 is plain rounding (s = 1), so the
// chosen scales never measure worse than it. The caller folds 1/s into the
// operation that produces x (a norm, or the rows of the preceding matrix;
// transform/awq_model.h), so the model stays the same function.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"

namespace ember {

struct AwqSearchOptions {
  int n_grid = 20;  // alphas 0, 1/n_grid, ..., (n_grid - 1)/n_grid
  // Round each candidate (and the result) with importance-weighted rounding
  // (quant/quantize_imatrix.h) with importance mean_sq_j / s_j^2 (the mean
  // square of the scaled input x_j / s_j); false: round-to-nearest.
  bool imatrix_rounding = false;
  // After the scales: clip each block's weights (awq_clip_search) in every
  // matrix but Q and K (AutoAWQ's choice: clipping them moves attention).
  bool clip = false;
  int clip_grid = 20;            // ratios 1, 1 - 1/clip_grid, ...
  float clip_max_shrink = 0.5f;  // ... down to (but not below) 1 - clip_max_shrink
};

// One matrix of the group: [n_out, n_in] f32, row-major, rounded to `target`
// (a block type whose block size divides n_in).
struct AwqMatrix {
  const float* w = nullptr;
  int64_t n_out = 0;
  DType target = DType::kQ4_0;
};

struct AwqSearchResult {
  std::vector<float> scales;  // [n_in], the chosen s (all 1 when alpha = 0 wins)
  float alpha = 0.f;
  double error = 0;        // output error of the chosen scales
  double error_plain = 0;  // output error at alpha = 0 (plain rounding)
};

// Whether AWQ can round to t (imatrix rounding: an importance-weighted
// quantizer exists; else a block type with a reference quantizer).
bool awq_can_round(DType t, bool imatrix_rounding);

// The scales for `alpha` from the per-channel mean |x| (the formula above).
std::vector<float> awq_scales(const float* mean_abs, int64_t n_in, float alpha);

// The output error sum_m ||X (W_m - deq(q(W_m diag(s))) diag(1/s))^T||^2 of
// rounding the group with scales s. x: [n_tok, n_in] rows (row-major);
// mean_sq: [n_in] (used for imatrix rounding). Products on `backend` (f32).
Result<double> awq_output_error(const float* x, int64_t n_tok, int64_t n_in, const float* mean_sq,
                                const std::vector<AwqMatrix>& mats, const float* s, bool imatrix_rounding,
                                Backend& backend, ThreadPool& pool);

// The grid search. Errors: no matrix, a type that cannot be rounded this way
// or whose block does not divide n_in, no rows.
Result<AwqSearchResult> awq_search_scales(const float* x, int64_t n_tok, int64_t n_in, const float* mean_abs,
                                          const float* mean_sq, const std::vector<AwqMatrix>& mats,
                                          const AwqSearchOptions& o, Backend& backend, ThreadPool& pool);

// AWQ's clipping search (AutoAWQ's _search_best_clip) on the GGUF blocks of
// one matrix W [n_out, n_in] (f32, row-major, changed in place): for every
// row and every block of `target` (32 or 256 columns) the weights are
// clamped to +-r * max|w| of the block for r in {1, 1 - 1/grid, ...,
// > 1 - max_shrink}, each clamped block rounded exactly as the plan will
// round it (importance: RTN when null, else importance-weighted with
// importance[n_in]; a block's bytes depend on that block alone), and the r
// with the smallest output error
//   e(r) = d^T G_b d,  d = deq(q(clamp_r(w_b))) - w_b,  G_b = X_b^T X_b
// (X_b the block's columns of the sample rows x [n_tok, n_in]: the
// within-block part of ||X (W - Wq)^T||^2, per group as AutoAWQ measures
// it) is kept: W's block becomes clamp_r(w_b). r = 1 is no clipping, so no
// block's error grows. Rows run in parallel on `pool`; the result does not
// depend on the thread count.
struct AwqClipResult {
  int64_t blocks = 0, clipped = 0;  // blocks seen / blocks with r < 1
  double error = 0, error_plain = 0;  // sum of e over blocks: chosen, r = 1
};
Result<AwqClipResult> awq_clip_search(float* w, int64_t n_out, int64_t n_in, DType target, const float* x,
                                      int64_t n_tok, const float* importance, int grid, float max_shrink,
                                      ThreadPool& pool);

}  // namespace ember
