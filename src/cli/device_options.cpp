// --device: see device_options.h.
#include "cli/device_options.h"

#include <fmt/format.h>

#include "engine/kv/kv_pool.h"

#if defined(EMBER_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace ember::cli {

void DeviceOptions::add_to(ArgParser& p) {
  p.option("--device", &device, "D",
           "cpu (default), cuda (an NVIDIA GPU: dense models, weights q4_0 q5_0 q8_0 q4_K q6_K f16 bf16 f32, KV "
           "cache f32 / f16 / bf16), or auto (cuda when a GPU is there)");
}

Status DeviceOptions::resolve() {
  if (device != "cpu" && device != "cuda" && device != "auto")
    return Status::errorf("--device must be cpu, cuda or auto, got '{}'", device);
#if defined(EMBER_HAVE_CUDA)
  std::string why;
  const int n = cuda::device_count(&why);
  if (device == "auto") device = n > 0 ? "cuda" : "cpu";
  if (device == "cuda" && n == 0) return Status::errorf("--device cuda: no usable CUDA device ({})", why);
#else
  if (device == "auto") device = "cpu";
  if (device == "cuda")
    return Status::error("--device cuda: this ember was built without CUDA (configure with the CUDA toolkit installed)");
#endif
  return Status::ok();
}

BackendFactory DeviceOptions::factory() const {
#if defined(EMBER_HAVE_CUDA)
  if (cuda()) return cuda::cuda_backend_factory(cuda::cuda_backend_options_from_env());
#endif
  return {};
}

Status DeviceOptions::check(const Model& m, KvTypes kv, bool speculative, bool parallel) const {
  if (!cuda()) return Status::ok();
  const ModelConfig& c = m.config();
  auto refuse = [&](const std::string& what) {
    return Status::errorf("--device cuda: {} ({}): the CUDA backend does not run it yet", what, c.arch);
  };
  if (c.has_moe()) return refuse("mixture-of-experts layers");
  if (c.rotation.any()) return refuse("Hadamard-rotated (QuaRot) weights");
  if (c.activation == Activation::kSwiGluOai) return refuse("gpt-oss's clamped SwiGLU");
  for (const LayerWeights& l : m.weights().layers)
    if (l.attn_sinks) return refuse("attention sinks");
  for (int d : {c.head_dim, c.head_dim_v})
    if (d % 32 != 0 || d > 256) return refuse(fmt::format("head size {} (multiples of 32 up to 256 run)", d));
  for (KvType t : {kv.k, kv.v})
    if (t != KvType::kF32 && t != KvType::kF16 && t != KvType::kBF16)
      return refuse(fmt::format("a {} KV cache (f32, f16 and bf16 run: --kv-cache-dtype f16)", kv_type_name(t)));
  if (kv.rot_k == KvRotation::kHadamard || kv.rot_v == KvRotation::kHadamard) return refuse("a rotated KV cache");
  if (speculative) return refuse("speculative decoding");
  if (parallel) return refuse("tensor / pipeline parallelism");
  return Status::ok();
}

Result<size_t> DeviceOptions::kv_budget(const Model& m, double fraction) const {
#if defined(EMBER_HAVE_CUDA)
  if (cuda()) {
    auto free_b = cuda::device_free_bytes();
    if (!free_b) return free_b.status();
    const double left = static_cast<double>(*free_b) - static_cast<double>(m.weight_bytes()) - double(1 << 30);
    if (left <= 0)
      return Status::errorf("--device cuda: {:.1f} GiB free on the device do not hold {:.1f} GiB of weights and a KV "
                            "cache",
                            *free_b / 1073741824.0, m.weight_bytes() / 1073741824.0);
    return static_cast<size_t>(left * fraction);
  }
#endif
  (void)m;
  return kv_budget_from_free_memory(fraction);
}

}  // namespace ember::cli
