// Paged attention on the device, reading ember's block tables directly
// (kernels/cuda/geometry.h kv_row_offset): causal, sliding windows, GQA,
// softcap; K/V pages in f32, f16 or bf16. And the K/V stores that fill
// those pages (kv_store_kernel: one block per token and row, each element
// encoded by geometry.h kv_store_elem, the bytes of kernels/kv_types.h's
// kv_store_row; twin: twins.h kv_store_host).
//
// One block of threads per (item, kv head[, chunk]): an item is up to
// kAttnMaxWarps query rows (token, q head) of one sequence that share the
// kv head (attention_items), one warp per row. The block stages
// kAttnKeyTile keys (K and V rows of its kv head, through the block table)
// at a time in shared memory, for all its rows: FlashAttention-2's loop
// order (queries outer, K/V tiles inner, online softmax, the score matrix
// never stored), on the CUDA cores.
//
// Arithmetic contract (the same for every row whatever the batch, the
// items, or the mode): lane l owns dims l + 32i of q, k and the output.
// Keys are taken in chunks of kAttnChunk positions aligned to 0; within a
// chunk, key by key in increasing position: s = butterfly sum (xor 16..1)
// of the lanes' in-order fma dots, s *= scale, softcap, then the online
// update m' = max(m, s), l = l e^(m - m') + e^(s - m'), o = o e^(m - m') +
// e^(s - m') v. Chunks with keys are merged in increasing order (merge
// below: M' = max(M, m), L = L e^(M - M') + l e^(m - M'), O likewise), and
// out = O / L. Two modes give the same bits: one pass per block over all
// chunks (prefill), or split-K (decode: one block per chunk writing its
// (m, l, o) to scratch, then merge_kernel). The scalar twin is
// kernels/ref/attention.h (a plain softmax in double); tests/cuda/ checks
// the device against it and the two modes against each other bit for bit.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/launch.h"

namespace ember::cuda::launch {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxDims = kAttnMaxHeadDim / 32;  // dims per lane

__device__ __forceinline__ int kv_elem_bytes(KvElem t) { return kv_elem_size(t); }

// blockIdx.x: the token; blockIdx.y: 0 its K row, 1 its V row.
__global__ void __launch_bounds__(kKvStoreThreads) kv_store_kernel(const KvStoreArgs a) {
  const int64_t t = blockIdx.x;
  const bool is_v = blockIdx.y == 1;
  const float* src = is_v ? a.v + t * a.ldv : a.k + t * a.ldk;
  const int64_t width = is_v ? a.v_width : a.k_width;
  const int64_t rb = is_v ? a.v_row_bytes : a.k_row_bytes;
  const int32_t* table = a.tables + static_cast<int64_t>(a.seq_of_token[t]) * a.table_stride;
  uint8_t* row = (is_v ? a.v_pages : a.k_pages) + kv_row_offset(table, a.pos[t], a.block_size, rb, 0, 0);
  const KvElem e = is_v ? a.v_type : a.k_type;
  for (int64_t i = threadIdx.x; i < width; i += kKvStoreThreads) kv_store_elem(e, src[i], row, i);
}
__device__ __forceinline__ float kv_elem(const uint8_t* row, int i, KvElem t) {
  if (t == KvElem::kF32) return reinterpret_cast<const float*>(row)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(row)[i];
  return t == KvElem::kF16 ? half_to_float(h) : bf16_to_float(h);
}

// Merges a chunk's (m, l, o) into the running (M, L, O); explicit roundings,
// so the one-pass kernel and merge_kernel compute the same bits.
__device__ __forceinline__ void merge(float* M, float* L, float* O, float m, float l, const float* o, int dv) {
  const float mn = fmaxf(*M, m);
  const float a = expf(*M - mn), b = expf(m - mn);
  *L = fma_rn(*L, a, mul_rn(l, b));
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i)
    if (i < dv) O[i] = fma_rn(O[i], a, mul_rn(o[i], b));
  *M = mn;
}

__global__ void __launch_bounds__(kAttnMaxWarps * 32) attn_kernel(const AttnArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int64_t s_lo[kAttnMaxWarps], s_hi[kAttnMaxWarps];
  const AttnItem it = a.items[blockIdx.x];
  const int kvh = blockIdx.y;
  const int group = a.n_head / a.n_head_kv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_warps = blockDim.x >> 5;
  const bool active = warp < it.n_rows;
  const int rr = it.row0 + warp;
  const int64_t tok = it.t0 + rr / group;
  const int head = kvh * group + rr % group;
  const int32_t* table = a.tables + static_cast<int64_t>(a.seq_of_token[it.t0]) * a.table_stride;
  const int dk = a.head_dim / 32, dv = a.head_dim_v / 32;

  int64_t lo = 0, hi = 0;
  if (active) visible_range(a.pos[tok], a.window, &lo, &hi);
  if (lane == 0) s_lo[warp] = active ? lo : INT64_MAX, s_hi[warp] = active ? hi : 0;
  __syncthreads();
  int64_t ulo = INT64_MAX, uhi = 0;  // the keys any row of the block sees
  for (int w = 0; w < n_warps; ++w) ulo = s_lo[w] < ulo ? s_lo[w] : ulo, uhi = s_hi[w] > uhi ? s_hi[w] : uhi;
  if (uhi <= ulo) return;
  int64_t c_begin = ulo / kAttnChunk, c_end = (uhi - 1) / kAttnChunk + 1;
  if (a.n_split > 1) {
    if (blockIdx.z < c_begin || blockIdx.z >= c_end) return;  // uniform over the block
    c_begin = blockIdx.z, c_end = blockIdx.z + 1;
  }

  float q[kMaxDims], O[kMaxDims], o[kMaxDims];
  const float* qrow = a.q + (tok * a.n_head + head) * a.head_dim;
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i) q[i] = active && i < dk ? qrow[lane + 32 * i] : 0.f, O[i] = 0.f;
  float M = -INFINITY, L = 0.f;

  const int64_t kh_bytes = static_cast<int64_t>(a.head_dim) * kv_elem_bytes(a.k_type);
  const int64_t vh_bytes = static_cast<int64_t>(a.head_dim_v) * kv_elem_bytes(a.v_type);
  uint8_t* sk = smem;
  uint8_t* sv = smem + kAttnKeyTile * kh_bytes;
  const int ku = static_cast<int>(kh_bytes / 16), vu = static_cast<int>(vh_bytes / 16);

  for (int64_t c = c_begin; c < c_end; ++c) {
    float m = -INFINITY, l = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDims; ++i) o[i] = 0.f;
    const int64_t ck0 = c * kAttnChunk > ulo ? c * kAttnChunk : ulo;
    const int64_t ck1 = (c + 1) * kAttnChunk < uhi ? (c + 1) * kAttnChunk : uhi;
    for (int64_t kb = ck0; kb < ck1; kb += kAttnKeyTile) {
      const int nk = static_cast<int>(ck1 - kb < kAttnKeyTile ? ck1 - kb : kAttnKeyTile);
      __syncthreads();  // every warp is done with the previous tile
      for (int idx = threadIdx.x; idx < nk * (ku + vu); idx += blockDim.x) {
        const int key = idx / (ku + vu), u = idx % (ku + vu);
        const int64_t p = kb + key;
        // A released page (-1) holds keys no row of this block sees (window gaps): skip it.
        if (table[p / a.block_size] < 0) continue;
        if (u < ku) {
          const uint8_t* src = a.k + kv_row_offset(table, p, a.block_size, a.k_row_bytes, kvh, kh_bytes);
          reinterpret_cast<int4*>(sk + key * kh_bytes)[u] = reinterpret_cast<const int4*>(src)[u];
        } else {
          const uint8_t* src = a.v + kv_row_offset(table, p, a.block_size, a.v_row_bytes, kvh, vh_bytes);
          reinterpret_cast<int4*>(sv + key * vh_bytes)[u - ku] = reinterpret_cast<const int4*>(src)[u - ku];
        }
      }
      __syncthreads();
      if (!active) continue;
      const int64_t p0 = kb > lo ? kb : lo, p1 = kb + nk < hi ? kb + nk : hi;
      for (int64_t p = p0; p < p1; ++p) {
        const uint8_t* kr = sk + (p - kb) * kh_bytes;
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < kMaxDims; ++i)
          if (i < dk) s = fma_rn(q[i], kv_elem(kr, lane + 32 * i, a.k_type), s);
        for (int off = 16; off > 0; off >>= 1) s = add_rn(s, __shfl_xor_sync(kFull, s, off));
        s = mul_rn(s, a.scale);
        if (a.softcap > 0.f) s = mul_rn(a.softcap, tanhf(div_rn(s, a.softcap)));
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn), pe = expf(s - mn);
        l = fma_rn(l, corr, pe);
        const uint8_t* vr = sv + (p - kb) * vh_bytes;
#pragma unroll
        for (int i = 0; i < kMaxDims; ++i)
          if (i < dv) o[i] = fma_rn(o[i], corr, mul_rn(pe, kv_elem(vr, lane + 32 * i, a.v_type)));
        m = mn;
      }
    }
    if (!active || l == 0.f) continue;  // no key of this chunk is visible to the row
    if (a.n_split > 1) {
      float* part = a.partials + ((tok * a.n_head + head) * a.n_split + c) * (a.head_dim_v + 2);
      if (lane == 0) part[0] = m, part[1] = l;
#pragma unroll
      for (int i = 0; i < kMaxDims; ++i)
        if (i < dv) part[2 + lane + 32 * i] = o[i];
    } else {
      merge(&M, &L, O, m, l, o, dv);
    }
  }
  if (a.n_split > 1 || !active) return;
  float* out = a.out + (tok * a.n_head + head) * a.head_dim_v;
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i)
    if (i < dv) out[lane + 32 * i] = div_rn(O[i], L);
}

// Split-K: one warp per (token, head) merges its chunks in increasing order.
__global__ void __launch_bounds__(256) merge_kernel(const AttnArgs a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= a.n_tokens * a.n_head) return;
  const int64_t tok = row / a.n_head;
  const int dv = a.head_dim_v / 32;
  int64_t lo, hi;
  visible_range(a.pos[tok], a.window, &lo, &hi);
  int64_t c1 = (hi - 1) / kAttnChunk;
  if (c1 > a.n_split - 1) c1 = a.n_split - 1;
  float M = -INFINITY, L = 0.f, O[kMaxDims], o[kMaxDims];
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i) O[i] = 0.f;
  for (int64_t c = lo / kAttnChunk; c <= c1; ++c) {
    const float* part = a.partials + (row * a.n_split + c) * (a.head_dim_v + 2);
    const float m = part[0], l = part[1];
    if (!(l > 0.f)) continue;
#pragma unroll
    for (int i = 0; i < kMaxDims; ++i) o[i] = i < dv ? part[2 + lane + 32 * i] : 0.f;
    merge(&M, &L, O, m, l, o, dv);
  }
  float* out = a.out + row * a.head_dim_v;
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i)
    if (i < dv) out[lane + 32 * i] = div_rn(O[i], L);
}

}  // namespace

int64_t attention_smem_bytes(const AttnArgs& a) {
  const int64_t ek = a.k_type == KvElem::kF32 ? 4 : 2, ev = a.v_type == KvElem::kF32 ? 4 : 2;
  return kAttnKeyTile * (a.head_dim * ek + a.head_dim_v * ev);
}

cudaError_t kv_store(const KvStoreArgs& a, cudaStream_t s) {
  if (a.n_tokens <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(a.n_tokens), a.v ? 2u : 1u);
  kv_store_kernel<<<grid, kKvStoreThreads, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t attention(const AttnArgs& a, cudaStream_t s) {
  const int64_t smem = attention_smem_bytes(a);
  static int64_t raised = 48 * 1024;  // the default dynamic limit; raised once per process as needed
  if (smem > raised) {
    const cudaError_t e =
        cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    raised = smem;
  }
  const dim3 grid(static_cast<unsigned>(a.n_items), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(a.n_split));
  attn_kernel<<<grid, a.warps * 32, smem, s>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || a.n_split <= 1) return e;
  const int64_t rows = a.n_tokens * a.n_head;
  merge_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace ember::cuda::launch
