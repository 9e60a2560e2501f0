// The activation-bits flag; see act_options.h.
#include "cli/act_options.h"

namespace ember::cli {

void ActOptions::add_to(ArgParser& p) {
  p.option("--act-bits", &bits, "B",
           "activation bits of the block linears: 8 or 4 (4-bit levels per 32 values; default: the file's "
           "ember.activation_bits, else 8)");
}

Status ActOptions::apply(Model* m) const {
  if (bits == 0) return Status::ok();
  if (bits != 4 && bits != 8) return Status::errorf("--act-bits must be 4 or 8, not {}", bits);
  if (Status st = m->set_activation_bits(bits); !st) return Status::errorf("--act-bits: {}", st.message());
  return Status::ok();
}

}  // namespace ember::cli
