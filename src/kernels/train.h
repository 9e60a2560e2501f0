// Training kernels (train/ runs them): the f32 GEMM behind every linear's
// forward, dX and dW; RMSNorm (with an offset on the weight: Gemma's
// (1 + w)), RoPE, gated activations, soft-capping, attention (forward that
// saves each row's log-sum-exp, backward that recomputes the probabilities
// from it: O(rows) extra memory), embedding and bias gradients, the
// distillation / cross-entropy loss of one logits row, AdamW. Each function
// dispatches at the active ISA level (core/cpu_features.h): the scalar level
// runs the reference twins of kernels/ref/train.h (the oracle of
// tests/kernels/train_ops_test.cpp; they also run in double for the
// finite-difference checks), AVX2 and AVX-512 the kernels of
// kernels/cpu/train_*.cpp (the GEMM's micro-kernels in avx2/ and avx512/).
//
// Determinism: every output element is reduced in a fixed order that does
// not depend on the number of threads (the GEMM splits M and N, never K;
// dW-style column sums run each column over the rows in order; attention's
// dK / dV run each key over its queries in order), so a training step gives
// the same bits with any thread count at a given ISA level.
//
// Layouts: row-major, rows contiguous unless a leading dimension is given.
// Threading: each call splits its work over `pool` (not owned) and returns
// when done; no state, no allocation beyond per-call scratch.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace ember {

// C[M, N] = (accumulate ? C : 0) + op(A) op(B), op(A)[m, k] = ta ? A[k * lda
// + m] : A[m * lda + k], op(B)[k, n] = tb ? B[n * ldb + k] : B[k * ldb + n].
// A linear y = x W^T is gemm(n, out, in, x, in, false, W, in, true, y, out);
// dX = dY W is (n, in, out, dY, out, false, W, in, false, dX, in); dW += dY^T
// X is (out, in, n, dY, out, true, X, in, false, dW, in, true).
void train_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B, int64_t ldb,
                bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool);

// The same product with op(A) and op(B) rounded to bf16 (to nearest even)
// and f32 accumulation (AVX512_BF16: each instruction adds the products of a
// pair of consecutive k to an f32 lane): twice the f32 kernel's rate. Only
// where train_bf16_available(); the scalar level runs its reference twin.
void train_gemm_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool);
// Whether the active level has the bf16 GEMM (AVX-512 with AVX512_BF16, or
// the scalar reference).
bool train_bf16_available();

// RMSNorm of n rows of dim: rstd[r] = 1 / sqrt(mean(x_r^2) + eps), out =
// x * rstd * (offset + w) (w null: no weight). out != x.
void train_rms_norm_forward(const float* x, int64_t n, int64_t dim, const float* w, float offset, float eps,
                            float* out, float* rstd, ThreadPool& pool);
// Its backward from the saved x and rstd: dx (= or += with accumulate) the
// gradient of x, dw += the gradient of w (null: not wanted).
void train_rms_norm_backward(const float* x, const float* rstd, int64_t n, int64_t dim, const float* w, float offset,
                             const float* dy, float* dx, bool accumulate, float* dw, ThreadPool& pool);

// RoPE of n token rows of n_heads heads (head_dim apart, rows contiguous);
// token row r uses table row r % period (cos/sin [period, n_rot / 2], as
// rope_angles gives them): the rotation of kernels/ops.h rope_head, in place.
// The backward rotates the gradient back (angle -theta).
void train_rope_forward(float* x, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                        const float* cos_t, const float* sin_t, ThreadPool& pool);
void train_rope_backward(float* dx, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot,
                         RopeStyle style, const float* cos_t, const float* sin_t, ThreadPool& pool);

enum class TrainActivation { kSilu, kGeluTanh };
// out = act(g) * u over n elements; backward: dg = dout * u * act'(g), du =
// dout * act(g) (dg, du overwritten; may alias g and u).
void train_gated_forward(TrainActivation a, const float* g, const float* u, float* out, int64_t n, ThreadPool& pool);
void train_gated_backward(TrainActivation a, const float* g, const float* u, const float* dout, float* dg, float* du,
                          int64_t n, ThreadPool& pool);

// y = cap * tanh(x / cap) in place; backward from the capped y: dx = dy *
// (1 - (y / cap)^2), in place on dy.
void train_softcap_forward(float* x, int64_t n, float cap, ThreadPool& pool);
void train_softcap_backward(const float* y, float* dy, int64_t n, float cap, ThreadPool& pool);

// Attention over n_seq sequences of seq_len tokens (token row b * seq_len +
// t at position t; every sequence attends only to itself), causal, keys with
// t - j >= window masked when window > 0, score s = scale * q.k, soft-capped
// (cap * tanh(s / cap)) when softcap > 0; query head h reads KV head h /
// (n_head / n_head_kv).
struct TrainAttentionShape {
  int64_t n_seq = 0, seq_len = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.f, softcap = 0.f;
  int window = 0;
};
// q [N, n_head * head_dim], k [N, n_head_kv * head_dim], v [N, n_head_kv *
// head_dim_v]; out [N, n_head * head_dim_v]; lse [N, n_head]: the
// log-sum-exp of each row's (capped) scores.
void train_attention_forward(const TrainAttentionShape& s, const float* q, const float* k, const float* v,
                             float* out, float* lse, ThreadPool& pool);
// Gradients dq, dk, dv (overwritten, shapes of q, k, v) from dout, with the
// probabilities recomputed from q, k and the saved lse; out is the forward's.
void train_attention_backward(const TrainAttentionShape& s, const float* q, const float* k, const float* v,
                              const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                              ThreadPool& pool);

// dtable[ids[r]] += scale * dx[r] for r in order (embedding gradient);
// dtable: [n_vocab, dim].
void train_embedding_backward(const int32_t* ids, const float* dx, int64_t n, int64_t dim, float scale, float* dtable,
                              ThreadPool& pool);
// db[c] += sum over rows of dy[r, c] (rows in order); dy [n, dim].
void train_bias_backward(const float* dy, int64_t n, int64_t dim, float* db, ThreadPool& pool);

// The loss of one logits row and its gradient. z: the student's logits [V]
// (after any final soft-cap), replaced by grad_scale * dLoss/dz. Loss =
// w_kl * tau^2 * KL(p_tau || q_tau) + w_ce * CE, where q_tau = softmax(z /
// tau), p_tau the teacher's distribution at tau, CE = -log softmax(z)[target].
// The teacher is dense logits zt [V] (softmax(zt / tau)), or a sparse
// estimate: n_samples tokens ids with weights (p_hat = sum_i w_i delta_ids_i,
// unbiased: sampled from a proposal with importance weights, see
// train/teacher_cache.h) and the teacher's log-probabilities logp of those
// tokens (for the KL value); or none (w_kl ignored). target < 0: no CE.
struct KdRowTeacher {
  const float* logits = nullptr;  // dense [V]
  const int32_t* ids = nullptr;   // sparse [n_samples]
  const float* weights = nullptr;
  const float* logp = nullptr;
  int n_samples = 0;
};
struct KdRowResult {
  double kl = 0;          // tau^2 * KL (sparse: its importance-sampled estimate)
  double ce = 0;          // -log softmax(z)[target] (0 without a target)
  double loss = 0;        // w_kl * kl + w_ce * ce
  bool teacher_top1 = false;  // dense teacher: argmax z == argmax zt
};
KdRowResult train_kd_row(float* z, int64_t V, const KdRowTeacher& teacher, float tau, float w_kl, int32_t target,
                         float w_ce, float grad_scale);

// AdamW (decoupled weight decay, PyTorch's torch.optim.AdamW arithmetic) on n
// parameters: g_eff = g * grad_scale; p -= lr * wd * p; m = b1 m + (1 - b1)
// g_eff; v = b2 v + (1 - b2) g_eff^2; p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2)
// + eps), bc_i = 1 - b_i^step.
struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // 1-based
  float grad_scale = 1.f;
};
void train_adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a, ThreadPool& pool);
// sum of g[i]^2 over n values, in double, in fixed chunks (thread-count
// independent).
double train_sum_squares(const float* g, int64_t n, ThreadPool& pool);

}  // namespace ember
