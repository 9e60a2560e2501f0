// Decode mat-vec of every weight type (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K with
// int8 act rows and dp4a; F16, BF16 with f32 activations): one warp per
// weight row, the row streamed once through shared memory in 16-byte
// cp.async copies (the GGUF blocks of 18, 22, 34 and 210 bytes are not
// 16-byte aligned, so each chunk's 16-byte cover is copied and the blocks
// are read from shared memory), kRowsStages chunks in flight per warp.
// Arithmetic contract and work split: kernels/cuda/rows_math.h; geometry:
// kernels/cuda/geometry.h. Bytes read: the weights once, plus the
// activations (L1/L2-resident, shared by every row).
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

namespace ember::cuda::launch {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The 32 activation values of one unit (16-byte aligned): two 16-byte loads.
__device__ __forceinline__ void load_act32(const int8_t* p, int* a) {
  const int4 v0 = __ldg(reinterpret_cast<const int4*>(p));
  const int4 v1 = __ldg(reinterpret_cast<const int4*>(p) + 1);
  a[0] = v0.x, a[1] = v0.y, a[2] = v0.z, a[3] = v0.w, a[4] = v1.x, a[5] = v1.y, a[6] = v1.z, a[7] = v1.w;
}

// One chunk's contribution of lane `lane` to its accumulators, quantized
// types. data: the chunk's first block in shared memory; e0: the chunk's
// first element; elems: its elements.
template <WType T, int NT>
__device__ __forceinline__ void quant_chunk(const uint8_t* data, int64_t e0, int elems, int lane, const uint8_t* act,
                                            int64_t act_stride, int64_t n, int nt, float* acc) {
  constexpr ActKind kAct = wtype_act(T);
  const bool has_unit = lane < chunk_lanes(T, elems);
  Unit u;
  if (has_unit) unpack_unit<T>(data, lane, &u);
  const int64_t ue = e0 + 32 * lane;  // the unit's first element in the row
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= nt) break;  // uniform across the warp
    const uint8_t* row = act + t * act_stride;
    int sumi = 0, summ = 0;
    float dx = 0.f;
    if (has_unit) {
      int a[8];
      load_act32(reinterpret_cast<const int8_t*>(row) + ue, a);
      const int16_t* bs = reinterpret_cast<const int16_t*>(row + act_bsums_offset(kAct, n)) + ue / 16;
      sumi = unit_sums<T>(u, a, __ldg(bs), __ldg(bs + 1), &summ);
      dx = __ldg(reinterpret_cast<const float*>(row + act_d_offset(kAct, n)) + ue / act_block(kAct));
    }
    if constexpr (wtype_is_kquant(T)) {
      // The super-block's exact integer sums over its 8 lanes, then its term in its first lane.
      for (int off = 4; off > 0; off >>= 1) {
        sumi += __shfl_xor_sync(kFull, sumi, off);
        summ += __shfl_xor_sync(kFull, summ, off);
      }
      if (has_unit && (lane & 7) == 0) acc[t] = add_rn(acc[t], block_term<T>(u, dx, sumi, summ));
    } else {
      if (has_unit) acc[t] = add_rn(acc[t], block_term<T>(u, dx, sumi, summ));
    }
  }
}

// Float weights: lane l's elements 8l + 256i .. +7 of the chunk, fma in order.
template <WType T, int NT>
__device__ __forceinline__ void float_chunk(const uint8_t* data, int64_t e0, int elems, int lane, const uint8_t* act,
                                            int64_t act_stride, int nt, float* acc) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = 8 * lane + 256 * i;
    if (e >= elems) break;
    const uint4 raw = *reinterpret_cast<const uint4*>(data + 2 * e);  // 8 halves (16-byte aligned: n % 32 == 0)
    const uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
    float wf[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint16_t h0 = static_cast<uint16_t>(wv[k] & 0xFFFFu), h1 = static_cast<uint16_t>(wv[k] >> 16);
      wf[2 * k] = T == WType::kF16 ? half_to_float(h0) : bf16_to_float(h0);
      wf[2 * k + 1] = T == WType::kF16 ? half_to_float(h1) : bf16_to_float(h1);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= nt) break;
      const float* x = reinterpret_cast<const float*>(act + t * act_stride) + e0 + e;
      const float4 x0 = __ldg(reinterpret_cast<const float4*>(x)), x1 = __ldg(reinterpret_cast<const float4*>(x) + 1);
      const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int b = 0; b < 8; ++b) acc[t] = fma_rn(wf[b], xv[b], acc[t]);
    }
  }
}

template <WType T, int NT>
__global__ void __launch_bounds__(kRowsWarps * 32)
    rows_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n, int64_t n_rows,
                const uint8_t* __restrict__ act, int64_t act_stride, int nt, float* __restrict__ y, int64_t ldy) {
  constexpr int64_t kSlot = rows_slot_bytes(T);
  constexpr int64_t kChunkBytes = wtype_chunk_bytes(T);
  __shared__ __align__(16) uint8_t smem[kRowsWarps][kRowsStages][kSlot];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsWarps + warp;
  if (r >= n_rows) return;  // whole warps only; no block-wide barrier below
  const int64_t base = r * row_bytes;  // offset of the row from w (16-byte aligned)
  const int64_t n_chunks = (n + kRowsChunk - 1) / kRowsChunk;

  // Queues the copies of chunk c (if any) into its slot, and commits a group.
  auto issue = [&](int64_t c) {
    if (c < n_chunks) {
      const int64_t b0 = base + c * kChunkBytes;
      const int64_t b1 = base + (c + 1 < n_chunks ? (c + 1) * kChunkBytes : row_bytes);
      const int64_t g0 = cover_begin(b0);
      const int units = static_cast<int>((cover_end(b1) - g0) / 16);
      uint8_t* slot = smem[warp][c % kRowsStages];
      for (int k = lane; k < units; k += 32) cp_async16(slot + 16 * k, w + g0 + 16 * k);
    }
    cp_async_commit();
  };

  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
#pragma unroll
  for (int s = 0; s < kRowsStages - 1; ++s) issue(s);
  for (int64_t c = 0; c < n_chunks; ++c) {
    cp_async_wait<kRowsStages - 2>();  // this lane's copies of chunk c are done ...
    __syncwarp();                      // ... and every lane's; every lane is done with chunk c - 1
    issue(c + kRowsStages - 1);        // into chunk c - 1's slot
    const int64_t b0 = base + c * kChunkBytes;
    const uint8_t* data = smem[warp][c % kRowsStages] + (b0 - cover_begin(b0));
    const int elems = static_cast<int>(n - c * kRowsChunk < kRowsChunk ? n - c * kRowsChunk : kRowsChunk);
    if constexpr (wtype_is_float(T))
      float_chunk<T, NT>(data, c * kRowsChunk, elems, lane, act, act_stride, nt, acc);
    else
      quant_chunk<T, NT>(data, c * kRowsChunk, elems, lane, act, act_stride, n, nt, acc);
  }
  cp_async_wait<0>();
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= nt) break;
    float v = acc[t];
    for (int off = 16; off > 0; off >>= 1) v = add_rn(v, __shfl_xor_sync(kFull, v, off));
    if (lane == 0) y[t * ldy + r] = v;
  }
}

template <WType T>
cudaError_t rows_typed(const uint8_t* w, int64_t row_bytes, int64_t n, int64_t n_rows, const uint8_t* act,
                       int64_t act_stride, int nt, float* y, int64_t ldy, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(rows_grid(n_rows))), block(kRowsWarps * 32);
  if (nt == 1)
    rows_kernel<T, 1><<<grid, block, 0, s>>>(w, row_bytes, n, n_rows, act, act_stride, 1, y, ldy);
  else
    rows_kernel<T, kRowsMaxTokens><<<grid, block, 0, s>>>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rows(WType t, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t n_rows, const uint8_t* act,
                 int64_t act_stride, int nt, float* y, int64_t ldy, cudaStream_t s) {
  switch (t) {
    case WType::kQ4_0: return rows_typed<WType::kQ4_0>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
    case WType::kQ5_0: return rows_typed<WType::kQ5_0>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
    case WType::kQ8_0: return rows_typed<WType::kQ8_0>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
    case WType::kQ4_K: return rows_typed<WType::kQ4_K>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
    case WType::kQ6_K: return rows_typed<WType::kQ6_K>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
    case WType::kF16: return rows_typed<WType::kF16>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
    case WType::kBF16: return rows_typed<WType::kBF16>(w, row_bytes, n, n_rows, act, act_stride, nt, y, ldy, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace ember::cuda::launch
