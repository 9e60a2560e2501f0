// The norms of the transformer block as batched Backend calls: RMSNorm of
// residual-stream rows (pre-norms, post-norms, the output norm), of every
// head of Q/K rows (QK-norm) or of whole Q/K rows, with the model's epsilon.
//
// Arithmetic: each row normalised on its own (Backend::rms_norm: sum of
// squares in a fixed order, then x / rms * w), so a row's bits do not depend
// on the batch. In place is allowed (out == x).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "model/config.h"

namespace ember {

// out[t, :] = rms_norm(x[t, :]) * w for n rows of n_embd (rows packed);
// w: [n_embd].
void norm_rows(Backend& backend, const ModelConfig& cfg, const float* x, const float* w, float* out, int64_t n);

// out[t, :] = rms_norm(x[t, :]) * w for n packed rows of `width` (QK-norm
// over the whole Q / K row, OLMo 2); w: [width].
void norm_rows_width(Backend& backend, const ModelConfig& cfg, const float* x, int64_t width, const float* w,
                     float* out, int64_t n);

// QK-norm: each of the n_heads heads of head_dim of n packed rows
// [n, n_heads * head_dim] normalised in place with w [head_dim] (one
// Backend::rms_norm over n * n_heads rows).
void norm_heads(Backend& backend, const ModelConfig& cfg, float* x, int64_t n, int n_heads, const float* w);

}  // namespace ember
