// Scalar reference twins of the training kernels (kernels/train.h), for
// T = float (the EMBER_ISA=scalar level and the oracle the fast kernels are
// tested against) and T = double (the finite-difference checks of every
// backward, tests/kernels/train_grad_test.cpp). Same meaning, layouts and
// in-place rules as kernels/train.h, without a thread pool.
//
// Arithmetic contract: plain loops in index order; every reduction (dot
// products, row sums, column sums over rows, softmax sums) accumulates in
// double in index order and each output is rounded to T once, so results
// depend only on the inputs (never on batching or threads) and are within
// about one rounding of the exact value. The RoPE and gated-activation
// formulas are those of kernels/ref/ops_ref.h.
#pragma once

#include <cstdint>

#include "kernels/train.h"

namespace ember::ref {

template <typename T>
void train_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, bool tb,
                T* C, int64_t ldc, bool accumulate);

// train_gemm with every operand rounded to bf16 (nearest even) first.
void train_gemm_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate);

template <typename T>
void train_rms_norm_forward(const T* x, int64_t n, int64_t dim, const T* w, T offset, T eps, T* out, T* rstd);
template <typename T>
void train_rms_norm_backward(const T* x, const T* rstd, int64_t n, int64_t dim, const T* w, T offset, const T* dy,
                             T* dx, bool accumulate, T* dw);

template <typename T>
void train_rope_forward(T* x, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                        const T* cos_t, const T* sin_t);
template <typename T>
void train_rope_backward(T* dx, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                         const T* cos_t, const T* sin_t);

template <typename T>
void train_gated_forward(TrainActivation a, const T* g, const T* u, T* out, int64_t n);
template <typename T>
void train_gated_backward(TrainActivation a, const T* g, const T* u, const T* dout, T* dg, T* du, int64_t n);

template <typename T>
void train_softcap_forward(T* x, int64_t n, T cap);
template <typename T>
void train_softcap_backward(const T* y, T* dy, int64_t n, T cap);

// Plain softmax per query row over its visible keys (no tiling).
template <typename T>
void train_attention_forward(const TrainAttentionShape& s, const T* q, const T* k, const T* v, T* out, T* lse);
template <typename T>
void train_attention_backward(const TrainAttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                              const T* lse, const T* dout, T* dq, T* dk, T* dv);

template <typename T>
void train_embedding_backward(const int32_t* ids, const T* dx, int64_t n, int64_t dim, T scale, T* dtable);
template <typename T>
void train_bias_backward(const T* dy, int64_t n, int64_t dim, T* db);

// Teacher of a reference row: dense logits or sparse samples (as
// KdRowTeacher, in T).
template <typename T>
struct KdRowTeacherT {
  const T* logits = nullptr;
  const int32_t* ids = nullptr;
  const T* weights = nullptr;
  const T* logp = nullptr;
  int n_samples = 0;
};
template <typename T>
KdRowResult train_kd_row(T* z, int64_t V, const KdRowTeacherT<T>& teacher, T tau, T w_kl, int32_t target, T w_ce,
                         T grad_scale);

template <typename T>
void train_adamw(T* p, const T* g, T* m, T* v, int64_t n, const AdamWParams& a);
double train_sum_squares(const float* g, int64_t n);

}  // namespace ember::ref
