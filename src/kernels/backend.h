// Backend: the op-level interface the forward pass calls, always with whole
// batches (every row of a step at once), so that an implementation can
// thread, tile and fuse as it likes. The CPU backend (kernels/cpu/) runs the
// dtype x ISA kernel registry, the matmul driver and the per-ISA op table
// behind it, at the level active at each call (EMBER_ISA=scalar: every op
// is its scalar reference twin of kernels/ref/). A CUDA backend can sit
// beside it later (kernels/cuda/) and is tested against the same
// references, op by op, by adding its factory to
// tests/kernels/backend_under_test.h (backend_ops_test.cpp,
// backend_attention_test.cpp).
//
// Arithmetic contract, for every implementation: each output row depends
// only on its own input row(s) (and, for attention, on its sequence's K/V),
// computed in a fixed order, whatever the number of rows, how they are
// split over threads, or which other rows share the batch (batch
// invariance; see kernels/matmul.h and kernels/attention.h for the two
// reductions that need care). Pointers are host memory for the CPU backend.
//
// Ownership and threading: a Backend is owned by one ForwardContext and used
// from one thread at a time (it owns scratch memory and drives a thread
// pool it does not own).
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/act_sparse.h"
#include "kernels/attention.h"
#include "kernels/moe.h"
#include "kernels/ops.h"

namespace ember {

// silu(gate) * up, gelu_tanh(gate) * up, gpt-oss's clamped SwiGLU (swiglu_oai_row)
enum class GatedActivation { kSwiGlu, kGeGluTanh, kSwiGluOai };

// One output of a matmul that shares its input with others:
// y[t * ldy + o] = dot(x row t, w row o) for o < w->ne[1].
// act_bits 4: the activations are rounded to 4-bit levels inside their
// int8 blocks (KernelSet::quantize_row_int4: symmetric [-7, 7] per 32
// values, scale amax / 7), for weights whose activation type has that form
// (Q8_0: Q4_0, Q5_0, Q8_0 weights); 0 or 8: the activation type as it is.
// Activation sparsity (TEAL; kernels/act_sparse.h): act_threshold > 0 makes
// the product read x' = x * [|x| > act_threshold] (the same threshold for
// every target of a call: they share x); `cols`, an input-channel-blocked
// copy of w, lets the backend skip the weights of zero inputs, which gives
// the same bits as the dense product of x' (so `skip` only picks speed):
// kAuto where the measured rule says it pays (kernels/cpu/matmul.cpp), kOn
// whenever a column kernel exists and the call has at most kColMaxTokens
// tokens, kOff never.
enum class ActSkip : uint8_t { kAuto, kOn, kOff };
struct MatmulTarget {
  const TensorView* w = nullptr;  // [n_out, n_in] (ne[0] = n_in)
  float* y = nullptr;             // [n_tokens, ldy]
  int64_t ldy = 0;
  int act_bits = 0;
  float act_threshold = 0.0f;
  const ColumnWeights* cols = nullptr;  // [n_out, n_in] as w, or null
  ActSkip skip = ActSkip::kAuto;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Every target's product with the same activations x [n_tokens, n_in]
  // (row stride ldx; every target's w has ne[0] = n_in). x is converted to
  // each distinct activation type (vec_dot_type of the weights) once and
  // shared by all targets reading it (Q/K/V; gate/up; the 4-bit form of a
  // type counts as a type of its own, MatmulTarget::act_bits). Results are
  // bit-identical to one matmul per target.
  virtual void matmul(const float* x, int64_t ldx, int64_t n_tokens, const MatmulTarget* targets,
                      int n_targets) = 0;
  void matmul(const TensorView& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens) {
    const MatmulTarget t{&w, y, ldy};
    matmul(x, ldx, n_tokens, &t, 1);
  }

  // out[t, :] = dequantize(table row ids[t]) * scale; out: [n, table.ne[0]].
  virtual void embed(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) = 0;

  // RMSNorm of n_rows rows of dim elements: out = x / rms(x) * w (w [dim],
  // null: no weight). Row strides ld_x / ld_out; out may equal x.
  virtual void rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                        int64_t dim, float eps) = 0;

  // RoPE tables for n positions: cos/sin [n, n_rot / 2], angle pos[t] * inv_freq[i].
  virtual void rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t,
                           float* sin_t) = 0;
  // Rotates the first n_rot dims of each of n_heads heads (head_dim apart)
  // of each of n rows (stride ld), row t with table row t.
  virtual void rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style,
                    const float* cos_t, const float* sin_t) = 0;

  // x[t, :dim] += b for n rows of stride ld.
  virtual void add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b) = 0;
  // y[i] += x[i] for n elements (residual connection).
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // gate[t, :] = act(gate[t, :]) * up[t, :] for n rows of dim.
  virtual void gated_activation(GatedActivation a, float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                                int64_t n, int64_t dim) = 0;
  // x[i] = cap * tanh(x[i] / cap) for n elements (cap > 0).
  virtual void softcap(float* x, int64_t n, float cap) = 0;

  // Orthonormal Hadamard rotation (kernels/hadamard.h) of each of n_heads
  // heads (head_dim apart, head_dim a valid size) of each of n rows (stride
  // ld), in place; transpose: the inverse rotation.
  virtual void hadamard(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, bool transpose) = 0;

  // Mixture of experts (contracts in kernels/moe.h). Router: for each of n
  // rows of logits [n, r.n_expert] (stride ld), the r.k chosen experts
  // ids [n, r.k] in rank order and their weights [n, r.k].
  virtual void moe_route(const float* logits, int64_t ld, int64_t n, const MoeRouting& r, int32_t* ids,
                         float* weights) = 0;
  // Grouped expert matmul, one call per layer and step: for each slot
  // s < n_slots, targets[i].y[s * ldy + o] = dot(x row x_row[s] (x_row null:
  // row s), targets[i].experts[expert[s]] row o), each x row converted once
  // per activation type and each chosen expert's matrix read once for all
  // its slots; bit-identical to matmul() of that row and matrix.
  virtual void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                          int n_expert, const ExpertTarget* targets, int n_targets) = 0;
  // out[t, :dim] (+)= sum_{j < k} weights[t * k + j] * y[(t * k + j) * ldy + :]
  // for n rows (stride ld_out), j in order.
  virtual void moe_combine(const float* y, int64_t ldy, const float* weights, int k, int64_t n, int64_t dim, float* out,
                           int64_t ld_out, bool accumulate) = 0;

  // Ragged causal attention (see kernels/attention.h): token t attends
  // through views[view_of_token[t]] to the keys at positions <= pos[t].
  // q: [n, n_head * head_dim]; out: [n, n_head * head_dim_v].
  virtual void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n,
                         const KvView* views, const int32_t* view_of_token, float* out) = 0;
};

// The CPU backend: kernels at the active ISA level (core/cpu_features.h,
// EMBER_ISA), work split over `pool` (not owned; must outlive it).
std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);

}  // namespace ember
