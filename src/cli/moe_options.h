// The Mixture-of-Experts routing flags shared by `ember run`, `ember serve`,
// `ember bench` (latency and throughput), `ember perplexity` and `ember eval
// kl` (MODEL only): --moe-top-k N (experts per token at run time, instead
// of the file's expert_used_count), --moe-share F and --moe-share-keep N
// (batch-aware expert sharing of a step's decode tokens, opt-in:
// kernels/moe.h). Applied by Model::set_moe_routing before the model runs.
#pragma once

#include "cli/args.h"
#include "core/status.h"
#include "model/model.h"

namespace ember::cli {

struct MoeOptions {
  int top_k = 0;           // 0: not given (the file's)
  float share = 0.f;       // 0: sharing off
  int share_keep = 1;

  void add_to(ArgParser& p);
  // Applies the flags to a loaded model; the error names the flag.
  Status apply(Model* m) const;
  // "top-k 4, sharing 0.7 (keep 1)" for the flags given; "" when none.
  std::string describe() const;
};

}  // namespace ember::cli
