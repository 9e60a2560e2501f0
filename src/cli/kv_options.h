// KV-cache storage flags shared by `ember run`, `ember serve`, `ember bench`
// and `ember eval kl`: --kv-cache-dtype T (K and V), --kv-cache-dtype-k /
// --kv-cache-dtype-v (llama.cpp's -ctk / -ctv, also accepted), T one of
// f32 | f16 | bf16 | q8 | q4 (kernels/kv_types.h).
#pragma once

#include <string>

#include "cli/args.h"
#include "kernels/kv_types.h"
#include "model/config.h"

namespace ember::cli {

struct KvOptions {
  std::string both, k, v;  // empty: not given

  void add_to(ArgParser& p);
  // The K/V types (default f32 for what is not given), checked against the
  // model's head dims; an error names the flag.
  Result<KvTypes> to_types(const ModelConfig& cfg) const;
};

// "f16" when K and V agree, else "k=q8,v=f16".
std::string kv_types_name(KvTypes t);

}  // namespace ember::cli
