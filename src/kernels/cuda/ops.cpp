// Validation and launch of the CUDA kernels; see ops.h. Everything here is
// host code: argument checks (shapes, alignment, supported types) happen
// before any launch, and every CUDA / cuBLAS error comes back as a Status.
#include "kernels/cuda/ops.h"

#include <cublas_v2.h>

#include <algorithm>

#include "kernels/cuda/launch.h"

namespace ember::cuda {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

Status launched(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cudaGetLastError();  // a launch error is not sticky: clear it
  return cuda_status(e, what);
}

Result<launch::KvElem> kv_elem(KvType t) {
  switch (t) {
    case KvType::kF32: return launch::KvElem::kF32;
    case KvType::kF16: return launch::KvElem::kF16;
    case KvType::kBF16: return launch::KvElem::kBF16;
    default: return Status::errorf("cuda: KV pages of type {} are not supported (f32, f16, bf16)",
                                   kv_type_name(t));
  }
}

}  // namespace

bool weight_type_supported(DType t) { return wtype_of(t).is_ok(); }
bool device_weight_supported(DType t) { return t == DType::kF32 || weight_type_supported(t); }

Result<WType> wtype_of(DType t) {
  switch (t) {
    case DType::kQ4_0: return WType::kQ4_0;
    case DType::kQ5_0: return WType::kQ5_0;
    case DType::kQ8_0: return WType::kQ8_0;
    case DType::kQ4_K: return WType::kQ4_K;
    case DType::kQ6_K: return WType::kQ6_K;
    case DType::kF16: return WType::kF16;
    case DType::kBF16: return WType::kBF16;
    default: {
      const char* name = dtype_traits(t) ? dtype_name(t) : "?";
      return Status::errorf("cuda: weight type {} is not supported (q4_0, q5_0, q8_0, q4_K, q6_K, f16, bf16)", name);
    }
  }
}

Result<DeviceWeight> upload_weight(Context& ctx, const TensorView& w) {
  int64_t unit = 1;  // F32
  if (w.type != DType::kF32) {
    auto wt = wtype_of(w.type);
    if (!wt) return wt.status().with_context("uploading " + w.name);
    unit = wtype_is_kquant(*wt) ? 256 : 32;
  }
  if (w.ne[0] <= 0 || w.nrows() <= 0 || w.ne[0] % unit != 0)
    return Status::errorf("uploading {}: shape {} (rows of a multiple of {} elements needed on the device)", w.name,
                          w.shape_string(), unit);
  DeviceWeight d;
  d.type = w.type;
  d.n_in = w.ne[0];
  d.n_out = w.nrows();
  d.row_bytes = static_cast<int64_t>(w.row_bytes());
  const size_t bytes = static_cast<size_t>(d.row_bytes * d.n_out);
  if (w.data == nullptr || w.nbytes < bytes)
    return Status::errorf("uploading {}: {} bytes of data for {} expected", w.name, w.nbytes, bytes);
  auto buf = DeviceBuffer::alloc(bytes);
  if (!buf) return buf.status().with_context("uploading " + w.name);
  d.buf = std::move(*buf);
  EMBER_RETURN_IF_ERROR(ctx.to_device(d.buf.data(), w.data, bytes).with_context("uploading " + w.name));
  return d;
}

int64_t act_stride(DType t, int64_t n) {
  auto wt = wtype_of(t);
  if (!wt) return 0;
  return wtype_is_float(*wt) ? round_up(n * 4, 128) : act_row_bytes(wtype_act(*wt), n);
}

Status quantize_act(Context& ctx, DType t, const float* x, int64_t ldx, int64_t n, int64_t n_tokens, void* act) {
  auto wt = wtype_of(t);
  if (!wt) return wt.status();
  if (n_tokens < 0 || n <= 0 || ldx < n) return Status::errorf("quantize_act: n {} ldx {} tokens {}", n, ldx, n_tokens);
  if (n_tokens == 0) return Status::ok();
  if (!aligned16(act)) return Status::error("quantize_act: activation rows must be 16-byte aligned");
  const int64_t stride = act_stride(t, n);
  if (wtype_is_float(*wt))
    return cuda_status(cudaMemcpy2DAsync(act, stride, x, ldx * 4, n * 4, n_tokens, cudaMemcpyDeviceToDevice,
                                         ctx.stream()),
                       "quantize_act (f32 copy)");
  const ActKind k = wtype_act(*wt);
  if (n % act_block(k) != 0)
    return Status::errorf("quantize_act: {} elements are not a multiple of the {}-element block", n, act_block(k));
  return launched(launch::act_quantize(k, x, ldx, n, n_tokens, static_cast<uint8_t*>(act), stride, ctx.stream()),
                  "quantize_act");
}

Status matvec(Context& ctx, const DeviceWeight& w, const void* act, int64_t n_tokens, float* y, int64_t ldy) {
  auto wt = wtype_of(w.type);
  if (!wt) return wt.status();
  if (n_tokens < 0 || (n_tokens > 1 && ldy < w.n_out))
    return Status::errorf("matvec: tokens {} ldy {} for {} rows", n_tokens, ldy, w.n_out);
  if (!aligned16(act) || !aligned16(w.buf.data()))
    return Status::error("matvec: weights and activations must be 16-byte aligned");
  const int64_t stride = act_stride(w.type, w.n_in);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kRowsMaxTokens) {
    const int nt = static_cast<int>(std::min<int64_t>(kRowsMaxTokens, n_tokens - t0));
    EMBER_RETURN_IF_ERROR(launched(launch::rows(*wt, w.buf.as<uint8_t>(), w.row_bytes, w.n_in, w.n_out,
                                                static_cast<const uint8_t*>(act) + t0 * stride, stride, nt,
                                                y + t0 * ldy, ldy, ctx.stream()),
                                   "matvec"));
  }
  return Status::ok();
}

size_t tile_scratch_bytes(int64_t n_in, int64_t n_tokens, int64_t tile_rows) {
  return static_cast<size_t>(round_up(n_tokens * n_in * 2, 256) + tile_rows * n_in * 2);
}

Status matmul_tile(Context& ctx, const DeviceWeight& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
                   int64_t ldy, void* scratch, size_t scratch_bytes) {
  auto wt = wtype_of(w.type);
  if (!wt) return wt.status();
  if (n_tokens <= 0) return Status::ok();
  if (ldx < w.n_in || ldy < w.n_out) return Status::errorf("matmul_tile: ldx {} ldy {}", ldx, ldy);
  if (n_tokens > INT32_MAX || w.n_in > INT32_MAX || w.n_out > INT32_MAX)
    return Status::error("matmul_tile: dimensions above cuBLAS's int range");
  const bool direct = w.type == DType::kF16;  // f16 weights are the tile already
  const size_t x_bytes = static_cast<size_t>(round_up(n_tokens * w.n_in * 2, 256));
  if (scratch_bytes < tile_scratch_bytes(w.n_in, n_tokens, direct ? 0 : 1) || !aligned16(scratch))
    return Status::errorf("matmul_tile: scratch of {} bytes (16-byte aligned) is below the {} needed", scratch_bytes,
                          tile_scratch_bytes(w.n_in, n_tokens, direct ? 0 : 1));
  auto* xh = static_cast<uint16_t*>(scratch);
  auto* wh = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(scratch) + x_bytes);
  EMBER_RETURN_IF_ERROR(
      launched(launch::f32_to_f16(x, ldx, w.n_in, n_tokens, xh, w.n_in, ctx.stream()), "matmul_tile (f16 inputs)"));
  const int64_t tile_rows = direct ? w.n_out
                                   : std::min<int64_t>(w.n_out, static_cast<int64_t>(scratch_bytes - x_bytes) /
                                                                    (w.n_in * 2));
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  const float alpha = 1.f, beta = 0.f;
  for (int64_t r0 = 0; r0 < w.n_out; r0 += tile_rows) {
    const int64_t tr = std::min(tile_rows, w.n_out - r0);
    const void* a = w.buf.as<uint8_t>() + r0 * w.row_bytes;
    if (!direct) {
      EMBER_RETURN_IF_ERROR(launched(launch::dequantize_rows(*wt, static_cast<const uint8_t*>(a), w.row_bytes,
                                                             w.n_in, tr, nullptr, tr, 1.f, wh, true, w.n_in,
                                                             ctx.stream()),
                                     "matmul_tile (dequantize)"));
      a = wh;
    }
    // Column-major: Y^T [tr x n_tokens] (ldy) = W_tile^T [tr x n_in] * X^T [n_in x n_tokens].
    EMBER_RETURN_IF_ERROR(cublas_status(
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(tr), static_cast<int>(n_tokens),
                     static_cast<int>(w.n_in), &alpha, a, CUDA_R_16F, static_cast<int>(w.n_in), xh, CUDA_R_16F,
                     static_cast<int>(w.n_in), &beta, y + r0, CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "matmul_tile (cublasGemmEx)"));
  }
  return Status::ok();
}

Status matmul_f32(Context& ctx, const DeviceWeight& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
                  int64_t ldy) {
  if (w.type != DType::kF32) return Status::errorf("matmul_f32: weights of type {}", dtype_name(w.type));
  if (n_tokens <= 0) return Status::ok();
  if (ldx < w.n_in || ldy < w.n_out) return Status::errorf("matmul_f32: ldx {} ldy {}", ldx, ldy);
  if (n_tokens > INT32_MAX || w.n_in > INT32_MAX || w.n_out > INT32_MAX || ldx > INT32_MAX || ldy > INT32_MAX)
    return Status::error("matmul_f32: dimensions above cuBLAS's int range");
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  const float alpha = 1.f, beta = 0.f;
  // Column-major: Y^T [n_out x n_tokens] (ldy) = W^T [n_out x n_in] * X^T [n_in x n_tokens] (ldx).
  return cublas_status(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_out), static_cast<int>(n_tokens),
                                    static_cast<int>(w.n_in), &alpha, w.buf.data(), CUDA_R_32F,
                                    static_cast<int>(w.n_in), x, CUDA_R_32F, static_cast<int>(ldx), &beta, y,
                                    CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F_PEDANTIC,
                                    CUBLAS_GEMM_DEFAULT),
                       "matmul_f32 (cublasGemmEx)");
}

Status embed(Context& ctx, const DeviceWeight& table, const int32_t* ids, int64_t n, float scale, float* out) {
  if (n <= 0) return Status::ok();
  if (table.type == DType::kF32)
    return launched(launch::gather_f32(table.buf.as<float>(), table.n_in, table.n_out, ids, n, scale, out,
                                       ctx.stream()),
                    "embed (f32)");
  auto wt = wtype_of(table.type);
  if (!wt) return wt.status();
  return launched(launch::dequantize_rows(*wt, table.buf.as<uint8_t>(), table.row_bytes, table.n_in, table.n_out, ids,
                                          n, scale, out, false, table.n_in, ctx.stream()),
                  "embed");
}

Status rms_norm(Context& ctx, const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out,
                int64_t n_rows, int64_t dim, float eps) {
  if (dim <= 0 || ld_x < dim || ld_out < dim || n_rows < 0 || n_rows > INT32_MAX)
    return Status::errorf("rms_norm: dim {} ld {} / {} rows {}", dim, ld_x, ld_out, n_rows);
  if (n_rows == 0) return Status::ok();
  return launched(launch::rms_norm(x, ld_x, w, out, ld_out, n_rows, dim, eps, ctx.stream()), "rms_norm");
}

Status rope_angles(Context& ctx, const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t,
                   float* sin_t) {
  if (n_rot <= 0 || n_rot % 2 != 0) return Status::errorf("rope_angles: n_rot {}", n_rot);
  if (n <= 0) return Status::ok();
  return launched(launch::rope_angles(pos, n, inv_freq, n_rot, cos_t, sin_t, ctx.stream()), "rope_angles");
}

Status rope(Context& ctx, float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style,
            const float* cos_t, const float* sin_t) {
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim || ld < static_cast<int64_t>(n_heads) * head_dim)
    return Status::errorf("rope: n_rot {} head_dim {} heads {} ld {}", n_rot, head_dim, n_heads, ld);
  if (n <= 0 || n_heads <= 0) return Status::ok();
  return launched(launch::rope(x, ld, n, n_heads, head_dim, n_rot, style == RopeStyle::kNeox, cos_t, sin_t,
                               ctx.stream()),
                  "rope");
}

Status add_bias(Context& ctx, float* x, int64_t ld, int64_t n, int64_t dim, const float* b) {
  if (ld < dim) return Status::errorf("add_bias: ld {} < dim {}", ld, dim);
  if (n <= 0 || dim <= 0) return Status::ok();
  return launched(launch::add_bias(x, ld, n, dim, b, ctx.stream()), "add_bias");
}

Status add(Context& ctx, float* y, const float* x, int64_t n) {
  if (n <= 0) return Status::ok();
  return launched(launch::add(y, x, n, ctx.stream()), "add");
}

Status gated_activation(Context& ctx, GatedActivation a, float* gate, int64_t ld_gate, const float* up,
                        int64_t ld_up, int64_t n, int64_t dim) {
  if (ld_gate < dim || ld_up < dim) return Status::errorf("gated_activation: ld {} / {} < dim {}", ld_gate, ld_up, dim);
  if (a == GatedActivation::kSwiGluOai) return Status::error("gated_activation: swiglu_oai (gpt-oss) is not on CUDA yet");
  if (n <= 0 || dim <= 0) return Status::ok();
  return launched(launch::gated(a == GatedActivation::kGeGluTanh, gate, ld_gate, up, ld_up, n, dim, ctx.stream()),
                  "gated_activation");
}

Status softcap(Context& ctx, float* x, int64_t n, float cap) {
  if (!(cap > 0.f)) return Status::errorf("softcap: cap {} must be > 0", cap);
  if (n <= 0) return Status::ok();
  return launched(launch::softcap(x, n, cap, ctx.stream()), "softcap");
}

Status kv_store(Context& ctx, const StorePages& p, const float* k, int64_t ldk, int64_t k_width, const float* v,
                int64_t ldv, int64_t v_width, const int32_t* pos, const int32_t* seq_of_token, int64_t n,
                const int32_t* tables, int64_t table_stride) {
  if (n <= 0) return Status::ok();
  if (n > INT32_MAX) return Status::errorf("cuda kv_store: {} tokens", n);
  auto ke = kv_elem(p.k_type);
  if (!ke) return ke.status();
  auto ve = kv_elem(p.v_type);
  if (!ve) return ve.status();
  if (p.block_size <= 0 || !p.k || !k || k_width <= 0 || ldk < k_width ||
      k_width * kv_elem_size(*ke) > p.k_row_bytes || (v && (!p.v || v_width <= 0 || ldv < v_width ||
                                                            v_width * kv_elem_size(*ve) > p.v_row_bytes)))
    return Status::errorf("cuda kv_store: rows of {} / {} floats into pages of block size {} with rows of {} / {} "
                          "bytes",
                          k_width, v ? v_width : 0, p.block_size, p.k_row_bytes, p.v_row_bytes);
  if (!tables || table_stride <= 0) return Status::error("cuda kv_store: no block tables");
  launch::KvStoreArgs a;
  a.k = k, a.ldk = ldk, a.k_width = k_width;
  a.v = v, a.ldv = ldv, a.v_width = v_width;
  a.pos = pos, a.seq_of_token = seq_of_token, a.n_tokens = n;
  a.k_pages = p.k, a.v_pages = p.v, a.block_size = p.block_size;
  a.k_row_bytes = p.k_row_bytes, a.v_row_bytes = p.v_row_bytes, a.k_type = *ke, a.v_type = *ve;
  a.tables = tables, a.table_stride = table_stride;
  return launched(launch::kv_store(a, ctx.stream()), "kv_store");
}

namespace {

Status check_shape(const AttentionShape& s) {
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0)
    return Status::errorf("cuda attention: {} heads over {} kv heads", s.n_head, s.n_head_kv);
  for (int d : {s.head_dim, s.head_dim_v})
    if (d <= 0 || d % 32 != 0 || d > kAttnMaxHeadDim)
      return Status::errorf("cuda attention: head dim {} (multiples of 32 up to {} supported)", d, kAttnMaxHeadDim);
  if (s.n_head_kv > 65535) return Status::errorf("cuda attention: {} kv heads", s.n_head_kv);
  if (s.sinks) return Status::error("cuda attention: attention sinks (gpt-oss) are not supported yet");
  return Status::ok();
}

}  // namespace

Status replan_attention(Context& ctx, const AttentionShape& s, const int32_t* seq_of_token_host,
                       const int32_t* pos_host, int64_t n_tokens, AttentionPlan* p, AttnMode mode) {
  EMBER_RETURN_IF_ERROR(check_shape(s));
  p->n_tokens = 0;
  p->n_items = 0;
  p->max_pos = 0;
  if (n_tokens <= 0) return Status::ok();
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (pos_host[t] < 0 || seq_of_token_host[t] < 0)
      return Status::errorf("cuda attention: token {} at position {} of sequence {}", t, pos_host[t],
                            seq_of_token_host[t]);
    p->max_pos = std::max(p->max_pos, pos_host[t]);
  }
  const int group = s.n_head / s.n_head_kv;
  if (!attention_items(seq_of_token_host, n_tokens, group, attention_tokens_per_item(group), &p->host_items))
    return Status::error("cuda attention: each sequence's tokens must be contiguous in the batch");
  int max_rows = 1;
  for (const AttnItem& it : p->host_items) max_rows = std::max(max_rows, static_cast<int>(it.n_rows));
  p->n_items = static_cast<int64_t>(p->host_items.size());
  p->warps = attention_warps(max_rows);
  const int64_t chunks = attention_chunks(p->max_pos);
  bool split = mode == AttnMode::kSplit;
  if (mode == AttnMode::kAuto) split = chunks > 1 && p->n_items * s.n_head_kv < 2 * static_cast<int64_t>(ctx.sm_count());
  if (split && chunks > 65535) split = false;
  p->n_split = split ? chunks : 1;
  // Buffers grow, never shrink; the items' host copy lives in the plan, so
  // the (pageable) copy needs no wait, and the previous step's readers of
  // the device copy are ordered before it on the stream.
  const size_t item_bytes = p->host_items.size() * sizeof(AttnItem);
  if (p->items.bytes() < item_bytes) {
    p->items.reset();
    auto ib = DeviceBuffer::alloc(2 * item_bytes);
    if (!ib) return ib.status();
    p->items = std::move(*ib);
  }
  EMBER_RETURN_IF_ERROR(ctx.to_device(p->items.data(), p->host_items.data(), item_bytes));
  if (split) {
    const size_t bytes =
        static_cast<size_t>(attention_split_floats(n_tokens, s.n_head, s.head_dim_v, p->max_pos)) * sizeof(float);
    if (p->partials.bytes() < bytes) {
      p->partials.reset();
      auto pb = DeviceBuffer::alloc(2 * bytes);
      if (!pb) return pb.status();
      p->partials = std::move(*pb);
    }
  }
  p->n_tokens = n_tokens;
  return Status::ok();
}

Result<AttentionPlan> plan_attention(Context& ctx, const AttentionShape& s, const int32_t* seq_of_token_host,
                                     const int32_t* pos_host, int64_t n_tokens, AttnMode mode) {
  AttentionPlan p;
  EMBER_RETURN_IF_ERROR(replan_attention(ctx, s, seq_of_token_host, pos_host, n_tokens, &p, mode));
  return p;
}

Status attention(Context& ctx, const AttentionShape& s, const DevicePages& kv, const float* q, const int32_t* pos,
                 const int32_t* seq_of_token, const int32_t* tables, int64_t table_stride,
                 const AttentionPlan& plan, float* out) {
  EMBER_RETURN_IF_ERROR(check_shape(s));
  if (plan.n_tokens == 0) return Status::ok();
  auto ke = kv_elem(kv.k_type);
  if (!ke) return ke.status();
  auto ve = kv_elem(kv.v_type);
  if (!ve) return ve.status();
  const int64_t ek = kv.k_type == KvType::kF32 ? 4 : 2, ev = kv.v_type == KvType::kF32 ? 4 : 2;
  if (kv.block_size <= 0 || kv.k_row_bytes < s.n_head_kv * s.head_dim * ek ||
      kv.v_row_bytes < s.n_head_kv * s.head_dim_v * ev || kv.k_row_bytes % 16 != 0 || kv.v_row_bytes % 16 != 0 ||
      !aligned16(kv.k) || !aligned16(kv.v))
    return Status::errorf("cuda attention: pages of block size {} with rows of {} / {} bytes (16-byte aligned rows "
                          "holding every kv head needed)",
                          kv.block_size, kv.k_row_bytes, kv.v_row_bytes);
  if (table_stride * kv.block_size <= plan.max_pos)
    return Status::errorf("cuda attention: block tables of {} pages do not reach position {}", table_stride,
                          plan.max_pos);
  launch::AttnArgs a;
  a.n_head = s.n_head, a.n_head_kv = s.n_head_kv, a.head_dim = s.head_dim, a.head_dim_v = s.head_dim_v;
  a.scale = s.scale, a.softcap = s.softcap, a.window = s.sliding_window;
  a.q = q, a.pos = pos, a.seq_of_token = seq_of_token, a.n_tokens = plan.n_tokens;
  a.k = kv.k, a.v = kv.v, a.block_size = kv.block_size, a.k_row_bytes = kv.k_row_bytes,
  a.v_row_bytes = kv.v_row_bytes, a.k_type = *ke, a.v_type = *ve;
  a.tables = tables, a.table_stride = table_stride;
  a.items = plan.items.as<AttnItem>(), a.n_items = plan.n_items, a.warps = plan.warps;
  a.n_split = plan.n_split, a.partials = plan.partials.as<float>(), a.out = out;
  return launched(launch::attention(a, ctx.stream()), "attention");
}

}  // namespace ember::cuda
