// Conversions on the device: activations to the int8 act rows of
// kernels/cuda/act_format.h (the mat-vec's input), weight rows in GGUF
// blocks to f16 (prefill tiles for cuBLAS) or f32 (embedding rows), and f32
// to f16. Arithmetic: act_format.h's and rows_math.h's per-element
// functions, so the results are bit-identical to the host twins
// (kernels/cuda/twins.h) and to quant/'s reference (de)quantizers.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/launch.h"

namespace ember::cuda::launch {
namespace {

constexpr unsigned kFull = 0xffffffffu;

int grid_for(int64_t tasks, int per_block) {
  const int64_t g = (tasks + per_block - 1) / per_block;
  return static_cast<int>(g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g));
}

// kQ8_0: one warp per 32-element block, a lane per element.
__global__ void __launch_bounds__(kQuantWarps * 32)
    act_q8_0_kernel(const float* __restrict__ x, int64_t ldx, int64_t n, int64_t n_tokens, uint8_t* __restrict__ act,
                    int64_t stride) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = n / 32, total = nb * n_tokens;
  for (int64_t task = static_cast<int64_t>(blockIdx.x) * kQuantWarps + (threadIdx.x >> 5); task < total;
       task += static_cast<int64_t>(gridDim.x) * kQuantWarps) {
    const int64_t t = task / nb, b = task % nb;
    const float v = x[t * ldx + b * 32 + lane];
    float amax = abs_f(v);
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, off));
    const float d = q8_0_scale(amax);
    const int8_t q = q8_0_value(v, q8_0_inverse(d));
    uint8_t* row = act + t * stride;
    row[b * 32 + lane] = static_cast<uint8_t>(q);
    int s = q;
    for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(kFull, s, off);  // sums of lanes 0-15, 16-31
    if ((lane & 15) == 0)
      reinterpret_cast<int16_t*>(row + act_bsums_offset(ActKind::kQ8_0, n))[b * 2 + lane / 16] = static_cast<int16_t>(s);
    if (lane == 0) reinterpret_cast<float*>(row + act_d_offset(ActKind::kQ8_0, n))[b] = q8_0_stored_scale(d);
  }
}

// kQ8_K: one warp per 256-element block, lane l holding elements 8l .. 8l+7.
__global__ void __launch_bounds__(kQuantWarps * 32)
    act_q8_K_kernel(const float* __restrict__ x, int64_t ldx, int64_t n, int64_t n_tokens, uint8_t* __restrict__ act,
                    int64_t stride) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = n / 256, total = nb * n_tokens;
  for (int64_t task = static_cast<int64_t>(blockIdx.x) * kQuantWarps + (threadIdx.x >> 5); task < total;
       task += static_cast<int64_t>(gridDim.x) * kQuantWarps) {
    const int64_t t = task / nb, b = task % nb;
    const float* xp = x + t * ldx + b * 256 + 8 * lane;
    float v[8];
    float best_abs = -1.f, best_val = 0.f;
    int best_idx = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = xp[i];
      const float a = abs_f(v[i]);
      if (a > best_abs) best_abs = a, best_idx = 8 * lane + i, best_val = v[i];  // first strict max in the lane
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float oa = __shfl_xor_sync(kFull, best_abs, off);
      const int oi = __shfl_xor_sync(kFull, best_idx, off);
      const float ov = __shfl_xor_sync(kFull, best_val, off);
      if (q8_K_max_beats(oa, oi, best_abs, best_idx)) best_abs = oa, best_idx = oi, best_val = ov;
    }
    uint8_t* row = act + t * stride;
    uint32_t lo = 0, hi = 0;
    int s = 0;
    float d = 0.f;
    if (best_abs > 0.f) {
      const float iscale = q8_K_iscale(best_val);
      d = q8_K_stored_scale(iscale);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int8_t q = q8_K_value(v[i], iscale);
        s += q;
        const uint32_t byte = static_cast<uint8_t>(q);
        if (i < 4) lo |= byte << (8 * i);
        else hi |= byte << (8 * (i - 4));
      }
    }
    *reinterpret_cast<uint2*>(row + b * 256 + 8 * lane) = make_uint2(lo, hi);
    s += __shfl_xor_sync(kFull, s, 1);  // lanes 2m, 2m+1: elements 16m .. 16m+15
    if ((lane & 1) == 0)
      reinterpret_cast<int16_t*>(row + act_bsums_offset(ActKind::kQ8_K, n))[b * 16 + lane / 2] = static_cast<int16_t>(s);
    if (lane == 0) reinterpret_cast<float*>(row + act_d_offset(ActKind::kQ8_K, n))[b] = d;
  }
}

// One thread per 32-element unit of an output row.
template <WType T, bool F16>
__global__ void __launch_bounds__(kDequantThreads)
    dequant_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n, int64_t n_table,
                   const int32_t* __restrict__ ids, int64_t n_out, float scale, void* __restrict__ out,
                   int64_t ld_out) {
  const int64_t upr = n / 32, total = upr * n_out;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / upr, u = i % upr;
    const int64_t id = ids ? ids[r] : r;
    float val[32];
    if (id < 0 || id >= n_table) {
#pragma unroll
      for (int e = 0; e < 32; ++e) val[e] = NAN;
    } else {
      const uint8_t* row = w + id * row_bytes;
      if constexpr (wtype_is_float(T)) {
#pragma unroll
        for (int e = 0; e < 32; ++e) {
          const uint16_t h = load_u16(row + 2 * (u * 32 + e));
          val[e] = T == WType::kF16 ? half_to_float(h) : bf16_to_float(h);
        }
      } else {
        Unit un;
        unpack_row_unit<T>(row, u, &un);
#pragma unroll
        for (int e = 0; e < 32; ++e) val[e] = unit_value<T>(un, e);
      }
      if (scale != 1.f) {
#pragma unroll
        for (int e = 0; e < 32; ++e) val[e] = mul_rn(val[e], scale);
      }
    }
    if constexpr (F16) {
      // 64 bytes: four 16-byte stores (ops.cpp checks out and ld_out for 16-byte alignment).
      uint16_t* o = static_cast<uint16_t*>(out) + r * ld_out + u * 32;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint32_t p[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          p[j] = static_cast<uint32_t>(float_to_half(val[8 * k + 2 * j])) |
                 (static_cast<uint32_t>(float_to_half(val[8 * k + 2 * j + 1])) << 16);
        reinterpret_cast<uint4*>(o)[k] = make_uint4(p[0], p[1], p[2], p[3]);
      }
    } else {
      float* o = static_cast<float*>(out) + r * ld_out + u * 32;
#pragma unroll
      for (int e = 0; e < 32; ++e) o[e] = val[e];
    }
  }
}

__global__ void f32_to_f16_kernel(const float* __restrict__ x, int64_t ldx, int64_t n, int64_t rows,
                                  uint16_t* __restrict__ out, int64_t ld_out) {
  const int64_t total = n * rows;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    out[r * ld_out + c] = float_to_half(x[r * ldx + c]);
  }
}

// out row r = scale * table row ids[r] (f32 rows of n; one rounding, as
// kernels/ref embed_rows); a bad id gives a NaN row.
__global__ void gather_f32_kernel(const float* __restrict__ table, int64_t n, int64_t n_table,
                                  const int32_t* __restrict__ ids, int64_t n_out, float scale, float* out) {
  const int64_t total = n * n_out;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    const int32_t id = ids[r];
    out[i] = id >= 0 && id < n_table ? mul_rn(table[id * n + c], scale) : __int_as_float(0x7fc00000);
  }
}

template <WType T>
cudaError_t dequant_typed(const uint8_t* w, int64_t row_bytes, int64_t n, int64_t n_table, const int32_t* ids,
                          int64_t n_out, float scale, void* out, bool out_f16, int64_t ld_out, cudaStream_t s) {
  const int grid = grid_for(n / 32 * n_out, kDequantThreads);
  if (out_f16)
    dequant_kernel<T, true><<<grid, kDequantThreads, 0, s>>>(w, row_bytes, n, n_table, ids, n_out, scale, out, ld_out);
  else
    dequant_kernel<T, false><<<grid, kDequantThreads, 0, s>>>(w, row_bytes, n, n_table, ids, n_out, scale, out, ld_out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t act_quantize(ActKind k, const float* x, int64_t ldx, int64_t n, int64_t n_tokens, uint8_t* act,
                         int64_t act_stride, cudaStream_t s) {
  const int64_t tasks = n / act_block(k) * n_tokens;
  const int grid = grid_for(tasks, kQuantWarps);
  if (k == ActKind::kQ8_0)
    act_q8_0_kernel<<<grid, kQuantWarps * 32, 0, s>>>(x, ldx, n, n_tokens, act, act_stride);
  else
    act_q8_K_kernel<<<grid, kQuantWarps * 32, 0, s>>>(x, ldx, n, n_tokens, act, act_stride);
  return cudaGetLastError();
}

cudaError_t dequantize_rows(WType t, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t n_table,
                            const int32_t* ids, int64_t n_out, float scale, void* out, bool out_f16, int64_t ld_out,
                            cudaStream_t s) {
  switch (t) {
    case WType::kQ4_0: return dequant_typed<WType::kQ4_0>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
    case WType::kQ5_0: return dequant_typed<WType::kQ5_0>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
    case WType::kQ8_0: return dequant_typed<WType::kQ8_0>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
    case WType::kQ4_K: return dequant_typed<WType::kQ4_K>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
    case WType::kQ6_K: return dequant_typed<WType::kQ6_K>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
    case WType::kF16: return dequant_typed<WType::kF16>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
    case WType::kBF16: return dequant_typed<WType::kBF16>(w, row_bytes, n, n_table, ids, n_out, scale, out, out_f16, ld_out, s);
  }
  return cudaErrorInvalidValue;
}

cudaError_t f32_to_f16(const float* x, int64_t ldx, int64_t n, int64_t rows, uint16_t* out, int64_t ld_out,
                       cudaStream_t s) {
  f32_to_f16_kernel<<<grid_for(n * rows, 256), 256, 0, s>>>(x, ldx, n, rows, out, ld_out);
  return cudaGetLastError();
}

cudaError_t gather_f32(const float* table, int64_t n, int64_t n_table, const int32_t* ids, int64_t n_out, float scale,
                       float* out, cudaStream_t s) {
  gather_f32_kernel<<<grid_for(n * n_out, 256), 256, 0, s>>>(table, n, n_table, ids, n_out, scale, out);
  return cudaGetLastError();
}

}  // namespace ember::cuda::launch
