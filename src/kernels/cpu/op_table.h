// Per-ISA table of the ops that do not depend on a weight type: the row ops
// of kernels/ops.h, softcap, the Hadamard transform (kernels/hadamard.h), and ragged attention (the registry,
// kernels/registry.h, is the table of the per-dtype ones). Built once, like
// the registry: the scalar level holds the reference twins (kernels/ref/,
// attention row-parallel over the pool), AVX2 the x86 kernels
// (kernels/cpu/avx2/), and a level inherits every entry it does not set from
// the level below (AVX-512 sets only attention). The public
// functions of kernels/ops.h and kernels/attention.h dispatch through
// op_table() at the active level, so EMBER_ISA=scalar makes all of them
// scalar. Internal to the CPU backend.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace ember {

struct OpTable {
  void (*rms_norm_row)(const float* x, const float* w, float* out, int64_t n, float eps) = nullptr;
  void (*rope_angles)(float pos, const float* inv_freq, int n_rot, float* cos_t, float* sin_t) = nullptr;
  void (*rope_head)(float* x, int n_rot, RopeStyle style, const float* cos_t, const float* sin_t) = nullptr;
  float (*softmax_row)(float* x, int64_t n) = nullptr;
  float (*max_row)(const float* x, int64_t n) = nullptr;
  double (*log_sum_exp_row)(const float* x, int64_t n) = nullptr;
  void (*exp_shifted_row)(float* x, int64_t n, float mx) = nullptr;
  void (*silu_row)(float* x, int64_t n) = nullptr;
  void (*gelu_tanh_row)(float* x, int64_t n) = nullptr;
  void (*swiglu_row)(float* gate, const float* up, int64_t n) = nullptr;
  void (*geglu_tanh_row)(float* gate, const float* up, int64_t n) = nullptr;
  void (*softcap_row)(float* x, int64_t n, float cap) = nullptr;
  void (*add_row)(float* y, const float* x, int64_t n) = nullptr;
  void (*scale_row)(float* y, float s, int64_t n) = nullptr;
  void (*hadamard_row)(float* x, int64_t n, bool transpose) = nullptr;  // kernels/hadamard.h
  // Ragged attention with the contract of kernels/attention.h, and the
  // scratch (floats) it needs.
  int64_t (*attention_scratch_floats)(const AttentionShape& s, int64_t n_tokens, int n_threads,
                                      int64_t max_pos) = nullptr;
  void (*attention_ragged)(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                           const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                           ThreadPool& pool) = nullptr;
};

// Ops at the given level (clamped to what the CPU supports).
const OpTable& op_table(Isa isa);
inline const OpTable& op_table() { return op_table(active_isa()); }

}  // namespace ember
