// ember_cuda_bench: the device's two ceilings, then the kernel-level
// bandwidth of each decode mat-vec on the Llama-3.1-8B shapes against the
// copy ceiling, and the prefill path (f16 tiles + cuBLAS) against the GEMM
// ceiling. Run by tools/cuda_check.sh; prints a short table last.
//
// Method (the device README's METHOD.md): CUDA events around batches of
// launches, medians of repeats after a warm-up; random data, never zeros;
// weights rotated over copies totalling more than 4x the L2 cache so that
// every launch reads from HBM. Bytes of a mat-vec: its weights once (the
// activations are a few KiB). Copy bandwidth counts bytes read plus written.
//
//   ember_cuda_bench [--quick]
#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "quant/blocks.h"

namespace ember::cuda {
namespace {

#define BENCH_CHECK(expr)                                                          \
  do {                                                                             \
    const Status _s = (expr);                                                      \
    if (!_s.is_ok()) {                                                             \
      std::fprintf(stderr, "cuda_bench: %s: %s\n", #expr, _s.message().c_str()); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

// Median milliseconds of `repeats` timings of `batch` calls of fn(i).
template <typename Fn>
Result<double> time_ms(Context& ctx, int batch, int repeats, Fn fn) {
  cudaEvent_t a, b;
  EMBER_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&a), "cudaEventCreate"));
  EMBER_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&b), "cudaEventCreate"));
  for (int i = 0; i < 3; ++i) EMBER_RETURN_IF_ERROR(fn(i));  // warm-up
  std::vector<double> ms;
  int k = 0;
  for (int r = 0; r < repeats; ++r) {
    EMBER_RETURN_IF_ERROR(cuda_status(cudaEventRecord(a, ctx.stream()), "cudaEventRecord"));
    for (int i = 0; i < batch; ++i) EMBER_RETURN_IF_ERROR(fn(k++));
    EMBER_RETURN_IF_ERROR(cuda_status(cudaEventRecord(b, ctx.stream()), "cudaEventRecord"));
    EMBER_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(b), "cudaEventSynchronize"));
    float t = 0;
    EMBER_RETURN_IF_ERROR(cuda_status(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime"));
    ms.push_back(static_cast<double>(t) / batch);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Random bytes; for block types, f16 scales set to small sane values (so no
// NaN / inf reaches the arithmetic) at each block's scale offsets.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t rb = dtype_row_size(t, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (size_t i = 0; i + 4 <= w.size(); i += 4) {
    const uint32_t v = rng();
    std::memcpy(&w[i], &v, 4);
  }
  const size_t bb = dtype_type_size(t);
  std::vector<size_t> scale_offsets;
  switch (t) {
    case DType::kQ4_0: case DType::kQ5_0: case DType::kQ8_0: scale_offsets = {0}; break;
    case DType::kQ4_K: scale_offsets = {0, 2}; break;
    case DType::kQ6_K: scale_offsets = {208}; break;
    default: break;
  }
  if (t == DType::kF16 || t == DType::kBF16) {  // small finite values
    for (size_t i = 0; i < w.size(); i += 2) {
      const float f = (static_cast<float>(rng() % 2001) - 1000.f) * 1e-4f;
      const uint16_t h = t == DType::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(&w[i], &h, 2);
    }
  }
  for (size_t b = 0; !scale_offsets.empty() && b + bb <= w.size(); b += bb)
    for (size_t off : scale_offsets) {
      const uint16_t h = f32_to_f16(static_cast<float>(rng() % 1000 + 1) * 1e-5f);
      std::memcpy(&w[b + off], &h, 2);
    }
  return w;
}

int run(bool quick) {
  auto info = device_info(0);
  BENCH_CHECK(info.status());
  auto cres = Context::create();
  BENCH_CHECK(cres.status());
  Context& ctx = **cres;
  std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB\n", info->name.c_str(), info->major, info->minor,
              info->sm_count, info->global_bytes / 1073741824.0, info->l2_bytes >> 20);
  const int repeats = quick ? 5 : 9;

  // ---- ceiling 1: a large device-to-device copy (bytes read + written)
  const size_t copy_bytes = size_t{1} << 30;
  auto src = DeviceBuffer::alloc(copy_bytes);
  BENCH_CHECK(src.status());
  auto dst = DeviceBuffer::alloc(copy_bytes);
  BENCH_CHECK(dst.status());
  BENCH_CHECK(ctx.fill(src->data(), 0x5A, copy_bytes));
  auto copy_ms = time_ms(ctx, 5, repeats, [&](int) {
    return cuda_status(cudaMemcpyAsync(dst->data(), src->data(), copy_bytes, cudaMemcpyDeviceToDevice, ctx.stream()),
                       "copy");
  });
  BENCH_CHECK(copy_ms.status());
  const double copy_gbs = 2.0 * copy_bytes / (*copy_ms * 1e-3) / 1e9;
  src->reset();
  dst->reset();
  std::printf("ceiling: device-to-device copy of %zu MiB: %.3f ms, %.0f GB/s (read + write)\n", copy_bytes >> 20,
              *copy_ms, copy_gbs);

  // ---- ceiling 2: a large cuBLAS bf16 GEMM (random data)
  const int g = quick ? 4096 : 8192;
  double gemm_tflops = 0;
  {
    std::vector<uint16_t> host(static_cast<size_t>(g) * g);
    std::mt19937 rng(1);
    for (auto& h : host) h = f32_to_bf16((static_cast<float>(rng() % 2001) - 1000.f) * 1e-3f);
    auto a = DeviceBuffer::alloc(host.size() * 2);
    BENCH_CHECK(a.status());
    auto b = DeviceBuffer::alloc(host.size() * 2);
    BENCH_CHECK(b.status());
    auto c = DeviceBuffer::alloc(host.size() * 2);
    BENCH_CHECK(c.status());
    BENCH_CHECK(ctx.to_device(a->data(), host.data(), host.size() * 2));
    BENCH_CHECK(ctx.to_device(b->data(), host.data(), host.size() * 2));
    const float alpha = 1.f, beta = 0.f;
    auto h = static_cast<cublasHandle_t>(ctx.cublas());
    auto ms = time_ms(ctx, 3, repeats, [&](int) {
      return cublas_status(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, g, g, g, &alpha, a->data(), CUDA_R_16BF, g,
                                        b->data(), CUDA_R_16BF, g, &beta, c->data(), CUDA_R_16BF, g,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx bf16");
    });
    BENCH_CHECK(ms.status());
    gemm_tflops = 2.0 * g * g * g / (*ms * 1e-3) / 1e12;
    std::printf("ceiling: cuBLAS bf16 GEMM %dx%dx%d: %.3f ms, %.0f TFLOP/s\n", g, g, g, *ms, gemm_tflops);
  }

  // ---- decode mat-vec on the Llama-3.1-8B shapes: [n_out, n_in]
  struct Shape {
    int64_t n_out, n_in;
    const char* what;
  };
  const Shape shapes[] = {{4096, 4096, "attn q/o"}, {14336, 4096, "ffn gate/up"}, {4096, 14336, "ffn down"}};
  const DType types[] = {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kF16, DType::kBF16};
  struct Row {
    std::string type, shape;
    double mib, us, gbs;
  };
  std::vector<Row> table;
  for (DType t : types)
    for (const Shape& sh : shapes) {
      const auto host = random_weights(t, sh.n_out, sh.n_in, static_cast<uint32_t>(sh.n_out + sh.n_in));
      TensorView tv;
      tv.name = "w", tv.type = t, tv.n_dims = 2, tv.ne[0] = sh.n_in, tv.ne[1] = sh.n_out;
      tv.data = host.data(), tv.nbytes = host.size();
      const int copies = static_cast<int>(std::max<size_t>(2, (size_t{4} * info->l2_bytes) / host.size() + 1));
      std::vector<DeviceWeight> ws;
      for (int i = 0; i < copies; ++i) {
        auto w = upload_weight(ctx, tv);
        BENCH_CHECK(w.status());
        ws.push_back(std::move(*w));
      }
      std::vector<float> x(static_cast<size_t>(sh.n_in));
      std::mt19937 rng(3);
      std::normal_distribution<float> gauss(0.f, 1.f);
      for (auto& v : x) v = gauss(rng);
      auto dx = DeviceBuffer::alloc(x.size() * 4);
      BENCH_CHECK(dx.status());
      BENCH_CHECK(ctx.to_device(dx->data(), x.data(), x.size() * 4));
      auto act = DeviceBuffer::alloc(static_cast<size_t>(act_stride(t, sh.n_in)));
      BENCH_CHECK(act.status());
      BENCH_CHECK(quantize_act(ctx, t, dx->as<float>(), sh.n_in, sh.n_in, 1, act->data()));
      auto y = DeviceBuffer::alloc(static_cast<size_t>(sh.n_out) * 4);
      BENCH_CHECK(y.status());
      auto ms = time_ms(ctx, 20, repeats, [&](int i) {
        return matvec(ctx, ws[static_cast<size_t>(i) % ws.size()], act->data(), 1, y->as<float>(), sh.n_out);
      });
      BENCH_CHECK(ms.status());
      const double bytes = static_cast<double>(host.size());
      table.push_back({dtype_name(t), std::to_string(sh.n_out) + "x" + std::to_string(sh.n_in), bytes / 1048576.0,
                       *ms * 1e3, bytes / (*ms * 1e-3) / 1e9});
      BENCH_CHECK(ctx.sync());
    }

  // ---- prefill: f16 tiles + cuBLAS, 512 tokens, on the ffn shape (one weight; tiles stay in L2)
  std::vector<std::string> prefill_lines;
  for (DType t : {DType::kQ4_K, DType::kQ8_0}) {
    const Shape sh = {14336, 4096, "ffn gate/up"};
    const int64_t tokens = 512;
    const auto host = random_weights(t, sh.n_out, sh.n_in, 5);
    TensorView tv;
    tv.name = "w", tv.type = t, tv.n_dims = 2, tv.ne[0] = sh.n_in, tv.ne[1] = sh.n_out;
    tv.data = host.data(), tv.nbytes = host.size();
    auto w = upload_weight(ctx, tv);
    BENCH_CHECK(w.status());
    std::vector<float> x(static_cast<size_t>(tokens * sh.n_in));
    std::mt19937 rng(4);
    std::normal_distribution<float> gauss(0.f, 1.f);
    for (auto& v : x) v = gauss(rng);
    auto dx = DeviceBuffer::alloc(x.size() * 4);
    BENCH_CHECK(dx.status());
    BENCH_CHECK(ctx.to_device(dx->data(), x.data(), x.size() * 4));
    auto y = DeviceBuffer::alloc(static_cast<size_t>(tokens * sh.n_out) * 4);
    BENCH_CHECK(y.status());
    const size_t scratch_bytes = tile_scratch_bytes(sh.n_in, tokens, 2048);  // 16 MiB tiles
    auto scratch = DeviceBuffer::alloc(scratch_bytes);
    BENCH_CHECK(scratch.status());
    auto ms = time_ms(ctx, 3, repeats, [&](int) {
      return matmul_tile(ctx, *w, dx->as<float>(), sh.n_in, tokens, y->as<float>(), sh.n_out, scratch->data(),
                         scratch_bytes);
    });
    BENCH_CHECK(ms.status());
    const double tflops = 2.0 * tokens * sh.n_out * sh.n_in / (*ms * 1e-3) / 1e12;
    char line[200];
    std::snprintf(line, sizeof line, "%-6s %-12s %4lld tokens  %8.3f ms  %6.1f TFLOP/s  %5.1f%% of the GEMM ceiling",
                  dtype_name(t), "14336x4096", static_cast<long long>(tokens), *ms, tflops,
                  100.0 * tflops / gemm_tflops);
    prefill_lines.push_back(line);
  }

  std::printf("\n== decode mat-vec, 1 token (%s; weights rotated over copies > 4x L2)\n", info->name.c_str());
  std::printf("%-6s %-12s %9s %9s %9s %8s\n", "type", "shape", "MiB", "us", "GB/s", "% copy");
  for (const Row& r : table)
    std::printf("%-6s %-12s %9.1f %9.2f %9.0f %7.1f%%\n", r.type.c_str(), r.shape.c_str(), r.mib, r.us, r.gbs,
                100.0 * r.gbs / copy_gbs);
  std::printf("== prefill (f16 tiles + cuBLAS)\n");
  for (const auto& l : prefill_lines) std::printf("%s\n", l.c_str());
  std::printf("== ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", copy_gbs, gemm_tflops);
  return 0;
}

}  // namespace
}  // namespace ember::cuda

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: ember_cuda_bench [--quick]\n");
      return 2;
    }
  }
  return ember::cuda::run(quick);
}
