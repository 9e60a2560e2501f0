// The kernel launchers of the .cu files of kernels/cuda/ (internal: the
// public, validating API is kernels/cuda/ops.h). Pointers are device
// memory; every launcher queues its kernels on `s` and returns the launch's
// cudaError_t (cudaSuccess, or the launch error; execution errors surface
// at the next synchronizing call). Arguments are trusted: ops.cpp checks
// them first. These headers stay free of fmt / Status so that nvcc compiles
// only the kernels' own code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/act_format.h"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/rows_math.h"

namespace ember::cuda::launch {

// ---- convert.cu
// n_tokens rows of n floats (ldx apart) -> act rows (act_stride bytes apart).
cudaError_t act_quantize(ActKind k, const float* x, int64_t ldx, int64_t n, int64_t n_tokens, uint8_t* act,
                         int64_t act_stride, cudaStream_t s);
// out row r = scale * dequantize(w row (ids ? ids[r] : r)) for r < n_out, as
// f16 (out_f16) or f32, ld_out elements apart. Rows whose id is outside
// [0, n_table) become NaN (never read out of bounds).
cudaError_t dequantize_rows(WType t, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t n_table,
                            const int32_t* ids, int64_t n_out, float scale, void* out, bool out_f16, int64_t ld_out,
                            cudaStream_t s);
// out[r, i] = f16(x[r, i]) (round to nearest even), r < rows, i < n.
cudaError_t f32_to_f16(const float* x, int64_t ldx, int64_t n, int64_t rows, uint16_t* out, int64_t ld_out,
                       cudaStream_t s);

// out row r = scale * f32 table row ids[r] (n floats a row, n_table rows;
// a bad id: a NaN row), r < n_out.
cudaError_t gather_f32(const float* table, int64_t n, int64_t n_table, const int32_t* ids, int64_t n_out, float scale,
                       float* out, cudaStream_t s);

// ---- rows.cu
// y[t * ldy + r] = dot(w row r, activation row t) for r < n_rows, t < nt
// (1 <= nt <= kRowsMaxTokens); act: act rows (quantized types) or f32 rows
// (F16 / BF16), act_stride bytes apart. w 16-byte aligned.
cudaError_t rows(WType t, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t n_rows, const uint8_t* act,
                 int64_t act_stride, int nt, float* y, int64_t ldy, cudaStream_t s);

// ---- row_ops.cu (all f32, rows `ld` elements apart)
cudaError_t rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                     int64_t dim, float eps, cudaStream_t s);
cudaError_t rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t, float* sin_t,
                        cudaStream_t s);
cudaError_t rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, bool neox, const float* cos_t,
                 const float* sin_t, cudaStream_t s);
cudaError_t add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b, cudaStream_t s);
cudaError_t add(float* y, const float* x, int64_t n, cudaStream_t s);
// gate = act(gate) * up; gelu: GELU-tanh, else SiLU.
cudaError_t gated(bool gelu, float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t n, int64_t dim,
                  cudaStream_t s);
cudaError_t softcap(float* x, int64_t n, float cap, cudaStream_t s);

// ---- attention.cu
using cuda::KvElem;
// K/V stores into one layer's pages (the addressing attention reads:
// geometry.h kv_row_offset): for each token t < n_tokens, the k_width floats
// at k + t * ldk go, in k_type, to the K row of position pos[t] through
// sequence seq_of_token[t]'s block table (tables + seq * table_stride), and
// the v_width floats at v + t * ldv to its V row (v null: no V rows).
struct KvStoreArgs {
  const float* k = nullptr;
  int64_t ldk = 0, k_width = 0;
  const float* v = nullptr;
  int64_t ldv = 0, v_width = 0;
  const int32_t* pos = nullptr;
  const int32_t* seq_of_token = nullptr;
  int64_t n_tokens = 0;
  uint8_t* k_pages = nullptr;
  uint8_t* v_pages = nullptr;
  int block_size = 0;
  int64_t k_row_bytes = 0, v_row_bytes = 0;
  KvElem k_type = KvElem::kF32, v_type = KvElem::kF32;
  const int32_t* tables = nullptr;
  int64_t table_stride = 0;
};
cudaError_t kv_store(const KvStoreArgs& a, cudaStream_t s);
struct AttnArgs {
  // shape
  int n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.f, softcap = 0.f;
  int window = 0;
  // queries: q [n_tokens, n_head * head_dim], pos [n_tokens], seq_of_token [n_tokens]
  const float* q = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* seq_of_token = nullptr;
  int64_t n_tokens = 0;
  // one layer's pages: page b of K at k + b * block_size * k_row_bytes (V alike)
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  int block_size = 0;
  int64_t k_row_bytes = 0, v_row_bytes = 0;
  KvElem k_type = KvElem::kF32, v_type = KvElem::kF32;
  // block tables: sequence s's page ids at tables + s * table_stride
  const int32_t* tables = nullptr;
  int64_t table_stride = 0;
  // work: items (device) of attention_items, warps per block
  const AttnItem* items = nullptr;
  int64_t n_items = 0;
  int warps = 1;
  // split-K: n_split > 1 writes per-chunk partials to `partials`
  // (attention_split_floats) and merges them; 1: one pass per block.
  int64_t n_split = 1;
  float* partials = nullptr;
  float* out = nullptr;  // [n_tokens, n_head * head_dim_v]
};
cudaError_t attention(const AttnArgs& a, cudaStream_t s);
// Dynamic shared memory of the attention kernel for these arguments.
int64_t attention_smem_bytes(const AttnArgs& a);

}  // namespace ember::cuda::launch
