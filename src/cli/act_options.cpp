// The activation-bits flag; see act_options.h.
#include "cli/act_options.h"

#include "core/thread_pool.h"

namespace ember::cli {

void ActOptions::add_to(ArgParser& p) {
  p.option("--act-bits", &bits, "B",
           "activation bits of the block linears: 8 or 4 (4-bit levels per 32 values; default: the file's "
           "ember.activation_bits, else 8)");
  p.option("--act-sparsity", &sparsity, "MODE",
           "a file's activation-sparsity thresholds (ember prune --activations): auto (default: skip zero inputs' "
           "weights where it pays), skip (always, up to 16 tokens a step), dense (thresholds, dense kernels), off "
           "(ignore them)");
}

Status ActOptions::apply(Model* m) const {
  if (!sparsity.empty()) {
    auto mode = act_sparsity_mode_from_name(sparsity);
    if (!mode) return Status::errorf("--act-sparsity: {}", mode.status().message());
    m->set_activation_sparsity(*mode);
    if (*mode == ActSparsityMode::kAuto || *mode == ActSparsityMode::kSkip) m->build_activation_columns(default_thread_count());
  }
  if (bits == 0) return Status::ok();
  if (bits != 4 && bits != 8) return Status::errorf("--act-bits must be 4 or 8, not {}", bits);
  if (Status st = m->set_activation_bits(bits); !st) return Status::errorf("--act-bits: {}", st.message());
  return Status::ok();
}

}  // namespace ember::cli
