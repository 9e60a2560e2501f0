// --device cpu | cuda | auto for `ember run`, `ember bench` and `ember
// serve`: which backend the engine computes on (kernels/backend.h). cuda is
// the CUDA backend (kernels/cuda/cuda_backend.h; a build with the CUDA
// toolkit and a machine with a GPU and its driver), auto takes it when a GPU
// is there and the CPU otherwise. What the device does not run is refused
// by name before any engine is made (check): MoE layers, Hadamard
// rotations (QuaRot weights, rotated or quantized KV caches), attention
// sinks, gpt-oss's activation, head sizes other than multiples of 32 up to
// 256, speculative decoding and parallel jobs; weight types are checked
// against the backend when the engine is made (Model::check_backend).
#pragma once

#include <string>

#include "cli/args.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/kv_types.h"
#include "model/model.h"

namespace ember::cli {

struct DeviceOptions {
  std::string device = "cpu";

  void add_to(ArgParser& p);
  // Resolves auto; an error for an unknown name, and for cuda in a build
  // without CUDA or on a machine without a usable GPU (the driver's reason).
  Status resolve();
  bool cuda() const { return device == "cuda"; }
  // The model's weights stay in their file layout (no CPU interleaving).
  bool file_layout() const { return cuda(); }
  // EngineConfig::backend: empty for the CPU.
  BackendFactory factory() const;
  // What the device does not run, named (ok on the CPU).
  Status check(const Model& m, KvTypes kv, bool speculative, bool parallel) const;
  // The default KV cache budget on the device: `fraction` of its free
  // memory less m's weights and 1 GiB of workspace (an error when that
  // leaves nothing); on the CPU kv_budget_from_free_memory(fraction).
  Result<size_t> kv_budget(const Model& m, double fraction) const;
};

}  // namespace ember::cli
