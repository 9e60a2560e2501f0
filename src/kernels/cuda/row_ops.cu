// Row and element-wise ops on the device (f32): RMSNorm, RoPE tables and
// rotation (normal and NeoX), bias and residual adds, SiLU / GELU-tanh
// gated activations, softcap. Scalar twins: kernels/ref/row_ops.h.
//
// Arithmetic contract: RMSNorm sums squares in double in a fixed tree order
// (each thread's strided elements in order, then the block's tree), and
// scales in double as the reference does; RoPE angles are the float product
// pos * inv_freq, their cos / sin taken in double, the rotation in double
// (the reference's expressions); activations and softcap in float with
// the device's expf / tanhf (a few ulp). Every output element depends only
// on its own row: batch-invariant.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/launch.h"

namespace ember::cuda::launch {
namespace {

constexpr int kNormThreads = 256;

int grid_for(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return static_cast<int>(g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g));
}

__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const float* __restrict__ x, int64_t ld_x, const float* __restrict__ w, float* out,
                    int64_t ld_out, int64_t dim, float eps) {
  __shared__ double part[kNormThreads / 32];
  const float* xr = x + blockIdx.x * ld_x;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) ss += static_cast<double>(xr[i]) * xr[i];
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  double total = 0.0;
  for (int k = 0; k < kNormThreads / 32; ++k) total += part[k];
  const double scale = 1.0 / sqrt(total / static_cast<double>(dim) + eps);
  float* o = out + blockIdx.x * ld_out;
  __syncthreads();  // out may alias x: every thread has read its elements above (the sums)
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads)
    o[i] = static_cast<float>(xr[i] * scale * (w ? static_cast<double>(w[i]) : 1.0));
}

__global__ void rope_angles_kernel(const int32_t* __restrict__ pos, int64_t n, const float* __restrict__ inv_freq,
                                   int half, float* cos_t, float* sin_t) {
  const int64_t total = n * half;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / half;
    const int k = static_cast<int>(i % half);
    const float theta = mul_rn(static_cast<float>(pos[t]), inv_freq[k]);
    double sn, cs;
    sincos(static_cast<double>(theta), &sn, &cs);
    cos_t[i] = static_cast<float>(cs);
    sin_t[i] = static_cast<float>(sn);
  }
}

__global__ void rope_kernel(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, bool neox,
                            const float* __restrict__ cos_t, const float* __restrict__ sin_t) {
  const int half = n_rot / 2;
  const int64_t total = n * n_heads * half;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int k = static_cast<int>(i % half);
    const int64_t th = i / half;
    const int64_t t = th / n_heads;
    const int h = static_cast<int>(th % n_heads);
    float* xh = x + t * ld + static_cast<int64_t>(h) * head_dim;
    const int ia = neox ? k : 2 * k, ib = neox ? k + half : 2 * k + 1;
    const double x0 = xh[ia], x1 = xh[ib], c = cos_t[t * half + k], s = sin_t[t * half + k];
    xh[ia] = static_cast<float>(x0 * c - x1 * s);
    xh[ib] = static_cast<float>(x0 * s + x1 * c);
  }
}

__global__ void add_bias_kernel(float* x, int64_t ld, int64_t n, int64_t dim, const float* __restrict__ b) {
  const int64_t total = n * dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[(i / dim) * ld + i % dim] += b[i % dim];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float gelu_tanh_f(float x) {
  return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__global__ void gated_kernel(bool gelu, float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t n,
                             int64_t dim) {
  const int64_t total = n * dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, c = i % dim;
    const float g = gate[t * ld_gate + c];
    gate[t * ld_gate + c] = (gelu ? gelu_tanh_f(g) : silu_f(g)) * up[t * ld_up + c];
  }
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

}  // namespace

cudaError_t rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                     int64_t dim, float eps, cudaStream_t s) {
  rms_norm_kernel<<<static_cast<unsigned>(n_rows), kNormThreads, 0, s>>>(x, ld_x, w, out, ld_out, dim, eps);
  return cudaGetLastError();
}

cudaError_t rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t, float* sin_t,
                        cudaStream_t s) {
  rope_angles_kernel<<<grid_for(n * (n_rot / 2), 256), 256, 0, s>>>(pos, n, inv_freq, n_rot / 2, cos_t, sin_t);
  return cudaGetLastError();
}

cudaError_t rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, bool neox, const float* cos_t,
                 const float* sin_t, cudaStream_t s) {
  rope_kernel<<<grid_for(n * n_heads * (n_rot / 2), 256), 256, 0, s>>>(x, ld, n, n_heads, head_dim, n_rot, neox, cos_t,
                                                                     sin_t);
  return cudaGetLastError();
}

cudaError_t add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b, cudaStream_t s) {
  add_bias_kernel<<<grid_for(n * dim, 256), 256, 0, s>>>(x, ld, n, dim, b);
  return cudaGetLastError();
}

cudaError_t add(float* y, const float* x, int64_t n, cudaStream_t s) {
  add_kernel<<<grid_for(n, 256), 256, 0, s>>>(y, x, n);
  return cudaGetLastError();
}

cudaError_t gated(bool gelu, float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t n, int64_t dim,
                  cudaStream_t s) {
  gated_kernel<<<grid_for(n * dim, 256), 256, 0, s>>>(gelu, gate, ld_gate, up, ld_up, n, dim);
  return cudaGetLastError();
}

cudaError_t softcap(float* x, int64_t n, float cap, cudaStream_t s) {
  softcap_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, cap);
  return cudaGetLastError();
}

}  // namespace ember::cuda::launch
