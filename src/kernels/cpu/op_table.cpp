// The op table (op_table.h), the scalar level of attention (the reference
// rows, in parallel), and the public entry points of kernels/ops.h and
// kernels/attention.h (and kernels/hadamard.h), which dispatch through the table at the active level.
#include "kernels/cpu/op_table.h"

#include <algorithm>
#include <array>
#include <new>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/hadamard.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/hadamard.h"
#include "kernels/ref/row_ops.h"

namespace ember {
namespace {

constexpr int kLevels = kNumIsaLevels;  // AMX: the AVX-512 ops

// The ops every level provides under the same name: kernels/ops.h's list
// and the Hadamard transform (X-macro: one list for filling and inheriting).
#define EMBER_TABLE_OPS(X) EMBER_ROW_OPS(X) X(hadamard_row)

// Scalar attention: every (token, head) row through ref::attention_row, rows
// split over the pool, one score buffer (doubles) per thread in the scratch.
int64_t score_floats(int64_t max_pos) { return 2 * (max_pos + 1); }

int64_t scalar_attention_scratch_floats(const AttentionShape&, int64_t, int n_threads, int64_t max_pos) {
  return static_cast<int64_t>(n_threads) * score_floats(max_pos);
}

void scalar_attention_ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                             const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                             ThreadPool& pool) {
  int64_t max_pos = 0;
  for (int64_t t = 0; t < n_tokens; ++t) max_pos = std::max<int64_t>(max_pos, pos[t]);
  const int64_t per_thread = score_floats(max_pos);
  pool.parallel_for(n_tokens * s.n_head, 4, [&](int64_t b, int64_t e, int ith) {
    // The thread's slice of the float scratch holds doubles from here on.
    double* scores = ::new (static_cast<void*>(scratch + ith * per_thread)) double[per_thread / 2];
    for (int64_t row = b; row < e; ++row) {
      const int64_t t = row / s.n_head;
      const int h = static_cast<int>(row % s.n_head);
      const KvView& kv = views[view_of_token ? view_of_token[t] : 0];
      ref::attention_row(s, q + row * s.head_dim, pos[t], h, kv, out + row * s.head_dim_v, scores);
    }
  });
}

OpTable scalar_ops() {
  OpTable t;
#define EMBER_SET_REF(op) t.op = ref::op;
  EMBER_TABLE_OPS(EMBER_SET_REF)
#undef EMBER_SET_REF
  t.attention_scratch_floats = scalar_attention_scratch_floats;
  t.attention_ragged = scalar_attention_ragged;
  return t;
}

OpTable avx2_ops() {
  OpTable t;
#define EMBER_SET_AVX2(op) t.op = avx2::op;
  EMBER_TABLE_OPS(EMBER_SET_AVX2)
#undef EMBER_SET_AVX2
  t.attention_scratch_floats = avx2::attention_scratch_floats;
  t.attention_ragged = avx2::attention_ragged;
  return t;
}

// AVX-512: attention only (the row ops are the AVX2 ones).
OpTable avx512_ops() {
  OpTable t;
  t.attention_scratch_floats = avx512::attention_scratch_floats;
  t.attention_ragged = avx512::attention_ragged;
  return t;
}

// Fills null entries from the level below.
void inherit(OpTable& t, const OpTable& lower) {
#define EMBER_INHERIT(op)                                                                                              \
  if (!t.op) t.op = lower.op;
  EMBER_TABLE_OPS(EMBER_INHERIT) EMBER_INHERIT(attention_scratch_floats) EMBER_INHERIT(attention_ragged)
#undef EMBER_INHERIT
}

std::array<OpTable, kLevels> build() {
  std::array<OpTable, kLevels> t{};
  t[0] = scalar_ops();
  if (cpu_max_isa() >= Isa::kAvx2) t[1] = avx2_ops();
  if (cpu_max_isa() >= Isa::kAvx512) t[2] = avx512_ops();
  for (int l = 1; l < kLevels; ++l) inherit(t[l], t[l - 1]);
  return t;
}

}  // namespace

const OpTable& op_table(Isa isa) {
  static const std::array<OpTable, kLevels> t = build();
  const Isa max = cpu_max_isa();
  if (isa > max) isa = max;
  if (isa < Isa::kScalar) isa = Isa::kScalar;
  return t[static_cast<int>(isa)];
}

// Public entry points (kernels/ops.h, kernels/attention.h).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  op_table().rms_norm_row(x, w, out, n, eps);
}
void rope_head(float* x, int n_rot, RopeStyle style, const float* cos_t, const float* sin_t) {
  op_table().rope_head(x, n_rot, style, cos_t, sin_t);
}
void rope_angles(float pos, const float* inv_freq, int n_rot, float* cos_t, float* sin_t) {
  op_table().rope_angles(pos, inv_freq, n_rot, cos_t, sin_t);
}
float softmax_row(float* x, int64_t n) { return op_table().softmax_row(x, n); }
float max_row(const float* x, int64_t n) { return op_table().max_row(x, n); }
double log_sum_exp_row(const float* x, int64_t n) { return op_table().log_sum_exp_row(x, n); }
void exp_shifted_row(float* x, int64_t n, float mx) { op_table().exp_shifted_row(x, n, mx); }
void silu_row(float* x, int64_t n) { op_table().silu_row(x, n); }
void gelu_tanh_row(float* x, int64_t n) { op_table().gelu_tanh_row(x, n); }
void swiglu_row(float* gate, const float* up, int64_t n) { op_table().swiglu_row(gate, up, n); }
void geglu_tanh_row(float* gate, const float* up, int64_t n) { op_table().geglu_tanh_row(gate, up, n); }
void swiglu_oai_row(float* gate, const float* up, int64_t n) { op_table().swiglu_oai_row(gate, up, n); }
void softcap_row(float* x, int64_t n, float cap) { op_table().softcap_row(x, n, cap); }
void add_row(float* y, const float* x, int64_t n) { op_table().add_row(y, x, n); }
void scale_row(float* y, float s, int64_t n) { op_table().scale_row(y, s, n); }
void hadamard_row(float* x, int64_t n, bool transpose) { op_table().hadamard_row(x, n, transpose); }

int64_t attention_scratch_floats(const AttentionShape& s, int64_t n_tokens, int n_threads, int64_t max_pos) {
  int64_t need = 0;
  for (int l = 0; l <= static_cast<int>(cpu_max_isa()); ++l)
    need = std::max(need, op_table(static_cast<Isa>(l)).attention_scratch_floats(s, n_tokens, n_threads, max_pos));
  return need;
}

void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens, const KvView& kv,
               float* out, float* scratch, ThreadPool& pool) {
  op_table().attention_ragged(s, q, pos, n_tokens, &kv, nullptr, out, scratch, pool);
}

void attention_ragged(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n_tokens,
                      const KvView* views, const int32_t* view_of_token, float* out, float* scratch,
                      ThreadPool& pool) {
  op_table().attention_ragged(s, q, pos, n_tokens, views, view_of_token, out, scratch, pool);
}

}  // namespace ember
