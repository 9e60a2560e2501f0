// The CUDA kernels as ember calls them: every op validates its arguments and
// returns a Status (a CUDA or cuBLAS error included: never an abort), and
// queues its work on the Context's stream. Pointers are device memory
// unless a name says _host. Shapes sit next to the pointers; every op is
// batch-invariant (each output row depends only on its own inputs).
//
// Each op's arithmetic contract is in the header of the kernel file named,
// and its scalar twin (tests/cuda/ compares the device against it):
//   op                  kernels                      twin
//   upload_weight       (a copy, GGUF layout)        -
//   quantize_act        convert.cu, act_format.h     quant/ quantize_row_q8_0_ref / q8_K_ref, via twins.h
//   matvec              rows.cu, rows_math.h         kernels/ref/dot.h per block; twins.h rows_host bit for bit
//   matmul_tile         convert.cu + cuBLAS          dequantize_row_*_ref + an f64 product
//   embed               convert.cu                   kernels/ref/row_ops.h embed_rows
//   rms_norm .. softcap row_ops.cu                   kernels/ref/row_ops.h
//   attention           attention.cu                 kernels/ref/attention.h
//   kv_store            attention.cu                 kernels/kv_types.h kv_store_row, via twins.h
//   matmul_f32          cuBLAS (f32, pedantic)       an f64 product
//
// Ownership and threading: as kernels/cuda/device.h (one host thread per
// Context). The device half of the Backend seam (issue 43, deliverable 1)
// will call these from a device ModelRunner.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/geometry.h"

namespace ember::cuda {

// ---- weights -------------------------------------------------------------
// Types the device mat-vec, tiles and embedding take: Q4_0, Q5_0, Q8_0,
// Q4_K, Q6_K, F16, BF16.
bool weight_type_supported(DType t);
Result<WType> wtype_of(DType t);
// What upload_weight takes: those, and F32 (multiplied by matmul_f32,
// looked up by embed).
bool device_weight_supported(DType t);

// A weight matrix [n_out, n_in] on the device in its GGUF block layout.
struct DeviceWeight {
  DType type = DType::kF32;
  int64_t n_in = 0, n_out = 0;
  int64_t row_bytes = 0;
  DeviceBuffer buf;  // n_out * row_bytes bytes, padded (device.h)
};
// Uploads w (host memory; ne[0] = n_in, nrows() = n_out). Errors: an
// unsupported type, n_in not a multiple of the type's block (32 for F16 /
// BF16; 256 for the K-quants), a failed allocation or copy.
Result<DeviceWeight> upload_weight(Context& ctx, const TensorView& w);

// ---- activations -----------------------------------------------------------
// Bytes between activation rows of n elements for weights of type t (act
// rows of act_format.h; f32 rows for F16 / BF16).
int64_t act_stride(DType t, int64_t n);
// x [n_tokens, ldx] (f32) -> act rows [n_tokens] (act_stride(t, n) apart)
// for weights of type t (F16 / BF16: an f32 copy).
Status quantize_act(Context& ctx, DType t, const float* x, int64_t ldx, int64_t n, int64_t n_tokens, void* act);

// ---- decode mat-vec ---------------------------------------------------------
// y[tok * ldy + r] = dot(w row r, activation row tok) for every row r and
// tok < n_tokens (any number; launched kRowsMaxTokens at a time); act from
// quantize_act for w's type, act_stride(w.type, w.n_in) apart.
Status matvec(Context& ctx, const DeviceWeight& w, const void* act, int64_t n_tokens, float* y, int64_t ldy);

// ---- prefill: dequantized f16 tiles and cuBLAS ------------------------------
// y[tok * ldy + r] = sum_k f16(w[r, k]) * f16(x[tok, k]) (f32 accumulation,
// cuBLAS) for all rows and tokens. scratch: at least
// tile_scratch_bytes(w.n_in, n_tokens, 1) bytes (more: fewer, taller
// tiles; a tile of up to ~16 MiB stays in the L2 for its GEMM).
size_t tile_scratch_bytes(int64_t n_in, int64_t n_tokens, int64_t tile_rows);
Status matmul_tile(Context& ctx, const DeviceWeight& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
                   int64_t ldy, void* scratch, size_t scratch_bytes);

// ---- f32 weights: cuBLAS in f32 ---------------------------------------------
// y[tok * ldy + r] = sum_k w[r, k] * x[tok, k] for F32 weights: cuBLAS
// GemmEx with CUBLAS_COMPUTE_32F_PEDANTIC (f32 products and sums, no TF32),
// in cuBLAS's order for the shape (so within f32 rounding of the CPU's dot,
// not bit for bit).
Status matmul_f32(Context& ctx, const DeviceWeight& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
                  int64_t ldy);

// ---- embedding -------------------------------------------------------------
// out[t, :] = dequantize(table row ids[t]) * scale, out [n, table.n_in].
// ids outside [0, table.n_out) give NaN rows (validate token ids on the host).
Status embed(Context& ctx, const DeviceWeight& table, const int32_t* ids, int64_t n, float scale, float* out);

// ---- row ops (the Backend's, kernels/backend.h) ----------------------------
Status rms_norm(Context& ctx, const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out,
                int64_t n_rows, int64_t dim, float eps);
Status rope_angles(Context& ctx, const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t,
                   float* sin_t);
Status rope(Context& ctx, float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style,
            const float* cos_t, const float* sin_t);
Status add_bias(Context& ctx, float* x, int64_t ld, int64_t n, int64_t dim, const float* b);
Status add(Context& ctx, float* y, const float* x, int64_t n);
Status gated_activation(Context& ctx, GatedActivation a, float* gate, int64_t ld_gate, const float* up,
                        int64_t ld_up, int64_t n, int64_t dim);
Status softcap(Context& ctx, float* x, int64_t n, float cap);

// ---- K/V stores into the paged pool ----------------------------------------
// One layer's pages, writable (DevicePages' layout below).
struct StorePages {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int block_size = 0;
  int64_t k_row_bytes = 0, v_row_bytes = 0;
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
};
// For each token t < n: the k_width floats at k + t * ldk, encoded in
// pages.k_type (kernels/kv_types.h kv_store_row's bytes), into the K row of
// position pos[t] through sequence seq_of_token[t]'s block table (tables +
// seq * table_stride: page ids), and the v_width floats at v + t * ldv into
// its V row (v null: K only). geometry.h kv_row_offset is the address, as
// attention reads it. Errors: q8 / q4 / q4c pages, rows wider than a page's
// row. The (sequence, position) pairs of a call must be distinct.
Status kv_store(Context& ctx, const StorePages& pages, const float* k, int64_t ldk, int64_t k_width, const float* v,
                int64_t ldv, int64_t v_width, const int32_t* pos, const int32_t* seq_of_token, int64_t n,
                const int32_t* tables, int64_t table_stride);

// ---- paged attention --------------------------------------------------------
// One layer's pages on the device, in KvBlockPool's layout: page b of K at
// k + b * block_size * k_row_bytes, a position's row k_row_bytes long with
// kv head h at h * head_dim * element bytes (V alike). Types f32 / f16 / bf16.
struct DevicePages {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  int block_size = 0;
  int64_t k_row_bytes = 0, v_row_bytes = 0;
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
};
enum class AttnMode { kAuto, kOnePass, kSplit };
// The host-side plan of one attention call: the work items (uploaded), the
// mode and the split-K scratch. Built from host copies of the batch's
// sequence ids (each sequence's tokens contiguous) and positions.
struct AttentionPlan {
  DeviceBuffer items;  // AttnItem[n_items]
  int64_t n_items = 0;
  int warps = 1;
  int64_t n_split = 1;     // 1: one pass
  int64_t n_tokens = 0;
  int32_t max_pos = 0;
  DeviceBuffer partials;   // split-K scratch
  std::vector<AttnItem> host_items;  // the items' host copy (kept: the upload needs no wait)
};
// The same into an existing plan, reusing its device buffers (grown when
// too small): no allocation and no wait per step once they fit.
Status replan_attention(Context& ctx, const AttentionShape& s, const int32_t* seq_of_token_host,
                       const int32_t* pos_host, int64_t n_tokens, AttentionPlan* plan, AttnMode mode = AttnMode::kAuto);
Result<AttentionPlan> plan_attention(Context& ctx, const AttentionShape& s, const int32_t* seq_of_token_host,
                                     const int32_t* pos_host, int64_t n_tokens, AttnMode mode = AttnMode::kAuto);
// out[t, h * head_dim_v ...] = softmax(q_t,h . K) V over the visible keys of
// token t (kernels/attention.h), K/V read through sequence
// seq_of_token[t]'s block table (tables + seq * table_stride: page ids).
// q [n_tokens, n_head * head_dim]; out [n_tokens, n_head * head_dim_v].
// Errors: head dims not multiples of 32 or above kAttnMaxHeadDim, n_head
// not a multiple of n_head_kv, q4c / q8 / q4 pages.
Status attention(Context& ctx, const AttentionShape& s, const DevicePages& kv, const float* q, const int32_t* pos,
                 const int32_t* seq_of_token, const int32_t* tables, int64_t table_stride,
                 const AttentionPlan& plan, float* out);

}  // namespace ember::cuda
