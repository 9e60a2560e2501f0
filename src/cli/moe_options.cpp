// The Mixture-of-Experts routing flags; see moe_options.h.
#include "cli/moe_options.h"

#include <fmt/format.h>

namespace ember::cli {

void MoeOptions::add_to(ArgParser& p) {
  p.option("--moe-top-k", &top_k, "N",
           "experts per token in the MoE layers (default: the file's expert_used_count; fewer: faster decode, "
           "further from the model)");
  p.option("--moe-share", &share, "F",
           "batch-aware expert sharing (off by default): the decode tokens of a step share at most "
           "max(k, ceil(F x U)) experts per layer, U being what exact routing reads; F in (0, 1]");
  p.option("--moe-share-keep", &share_keep, "N",
           "under --moe-share, the experts every token keeps whatever the others choose (default 1: its first)");
}

Status MoeOptions::apply(Model* m) const {
  if (top_k < 0 || top_k > kMaxExpertsUsed) return Status::errorf("--moe-top-k must be >= 1, not {}", top_k);
  if (share != 0.f && !(share > 0.f && share <= 1.f))
    return Status::errorf("--moe-share must be in (0, 1], not {}", share);
  if (share_keep < 1) return Status::errorf("--moe-share-keep must be >= 1, not {}", share_keep);
  MoeSharing s;
  s.fraction = share;
  s.keep = share_keep;
  if (Status st = m->set_moe_routing(top_k, s); !st)
    return Status::errorf("{}: {}", top_k > 0 && !s.on() ? "--moe-top-k" : (top_k > 0 ? "--moe-top-k / --moe-share"
                                                                                          : "--moe-share"),
                          st.message());
  return Status::ok();
}

std::string MoeOptions::describe() const {
  std::string out;
  if (top_k > 0) out = fmt::format("top-k {}", top_k);
  if (share > 0.f) out += fmt::format("{}expert sharing {:g} (keep {})", out.empty() ? "" : ", ", share, share_keep);
  return out;
}

}  // namespace ember::cli
