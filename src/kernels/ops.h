// Element-wise and row-wise float ops used by the transformer block and the
// sampler: RMSNorm, RoPE (normal and NeoX), softmax / max / log-sum-exp,
// activations, gated FFN glue, softcap. Each function dispatches at the
// active ISA level (core/cpu_features.h) through the CPU op table
// (kernels/cpu/op_table.h): the scalar level runs the reference twins
// (kernels/ref/row_ops.h), AVX2 and AVX-512 the AVX2 kernels
// (kernels/cpu/avx2/row_ops.cpp). At every level the reduction order within
// a row is fixed, so results never depend on how rows are batched or
// threaded. Thread-safe (no state); no allocation.
#pragma once

#include <cstdint>

namespace ember {

// out[i] = x[i] / rms(x) * w[i] over one row of n (w may be null: no weight).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps);

enum class RopeStyle { kNormal, kNeox };

// Rotates one head vector in place. `inv_freq` has head_dim/2 entries
// (theta_i = pos * inv_freq[i]); n_rot <= head_dim dims are rotated.
// kNormal pairs (2i, 2i+1); kNeox pairs (i, i + n_rot/2).
void rope_head(float* x, int n_rot, RopeStyle style, const float* cos_t, const float* sin_t);
// cos/sin tables for one position: cos_t[i] = cos(pos * inv_freq[i]), i < n_rot/2.
void rope_angles(float pos, const float* inv_freq, int n_rot, float* cos_t, float* sin_t);

// In-place numerically stable softmax over one row. Returns the max.
float softmax_row(float* x, int64_t n);
// Largest element (NaNs are ignored; -inf for n == 0 or an all-NaN row).
float max_row(const float* x, int64_t n);
// log(sum_i exp(x[i])), stable (max-shifted, vectorized, accumulated in double).
double log_sum_exp_row(const float* x, int64_t n);
// x[i] = exp(x[i] - mx) for finite x[i] <= mx (about 1 ulp; results below
// exp(-87.3) are not flushed to 0). Every element goes through the same
// 8-lane code, so a value's result does not depend on where it sits.
void exp_shifted_row(float* x, int64_t n, float mx);

void silu_row(float* x, int64_t n);
void gelu_tanh_row(float* x, int64_t n);
// gate[i] = act(gate[i]) * up[i]
void swiglu_row(float* gate, const float* up, int64_t n);
void geglu_tanh_row(float* gate, const float* up, int64_t n);
// gpt-oss's clamped SwiGLU (transformers GptOssExperts, llama.cpp
// swiglu_oai): x = min(gate, 7), y = clamp(up, -7, 7),
// gate[i] = x * sigmoid(1.702 x) * (y + 1).
void swiglu_oai_row(float* gate, const float* up, int64_t n);
constexpr float kSwiGluOaiAlpha = 1.702f;
constexpr float kSwiGluOaiLimit = 7.f;

// y[i] += x[i]
void add_row(float* y, const float* x, int64_t n);
// y[i] *= s
void scale_row(float* y, float s, int64_t n);
// x[i] = cap * tanh(x[i] / cap) (cap > 0): logit soft-capping.
void softcap_row(float* x, int64_t n, float cap);

// The row ops above by name (an X-macro). Each signature is written once,
// above: the scalar twins (kernels/ref/row_ops.h), the AVX2 kernels
// (kernels/cpu/isa_kernels.h) and the op table's fields
// (kernels/cpu/op_table.h) are declared from this list with
// EMBER_DECLARE_LIKE, so a changed signature changes all of them.
#define EMBER_ROW_OPS(X)                                                                                               \
  X(rms_norm_row) X(rope_angles) X(rope_head) X(softmax_row) X(max_row) X(log_sum_exp_row) X(exp_shifted_row)          \
  X(silu_row) X(gelu_tanh_row) X(swiglu_row) X(geglu_tanh_row) X(swiglu_oai_row) X(softcap_row) X(add_row) X(scale_row)
// Declares `op` in the enclosing namespace with the signature of ember::op.
#define EMBER_DECLARE_LIKE(op) decltype(::ember::op) op;

}  // namespace ember
