// KV-cache storage flags shared by `ember run`, `ember serve`, `ember bench`
// and `ember eval kl`: --kv-cache-dtype T (K and V), --kv-cache-dtype-k /
// --kv-cache-dtype-v (llama.cpp's -ctk / -ctv, also accepted), T one of
// f32 | f16 | bf16 | q8 | q4 (kernels/kv_types.h), for K also q4c (KIVI:
// per-channel 4 bits over 16-token groups; --kv-cache-dtype q4c stores K in
// q4c and V in q4, at mean KL 12x below rotated q4 on the f32 default
// model: docs/performance.md, "KIVI keys"), and --kv-rotation auto |
// hadamard | none (KvRotation: auto rotates what is stored in q8 or q4, not
// q4c keys, whose per-channel scales a rotation would mix: measured worse).
#pragma once

#include <string>

#include "cli/args.h"
#include "kernels/kv_types.h"
#include "model/config.h"

namespace ember::cli {

// What the flags give when none is set: f16, whose cache is within KL 1e-6
// of the f32 one on the f32-dequantized default model at 4k tokens while q8
// is at 1.8e-3 (5.1e-4 with the rotation), a few hundred times further
// (docs/performance.md, "KV quality:
// rotation and the default dtype"). The library's default (EngineConfig,
// ContiguousKvCache) stays f32, so the golden outputs still pin that path.
constexpr KvType kDefaultKvType = KvType::kF16;

struct KvOptions {
  std::string both, k, v;  // empty: not given
  std::string rotation;    // empty: auto

  void add_to(ArgParser& p);
  // The K/V types (kDefaultKvType for what is not given) and rotations,
  // checked against the model's head dims; an error names the flag.
  Result<KvTypes> to_types(const ModelConfig& cfg) const;
};

// Resolves --kv-rotation ("auto", "hadamard", "none") for the given storage
// types: auto = kHadamard for a part stored in q8 or q4, kNone otherwise
// (f32 / f16 / bf16, and q4c keys); the
// result is checked against the head dims (a Hadamard size, kernels/hadamard.h).
Status apply_kv_rotation(const std::string& rotation, const ModelConfig& cfg, KvTypes* t);

// "f16" when K and V agree, else "k=q8,v=f16"; "+hadamard" (or
// "+hadamard-k" / "+hadamard-v") when rows are rotated.
std::string kv_types_name(KvTypes t);

}  // namespace ember::cli
