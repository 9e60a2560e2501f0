// The activation-bits flag shared by `ember run`, `ember serve`, `ember
// bench` and `ember eval kl` (MODEL only): --act-bits 8|4 sets the bits of
// the block linears' activations (Model::set_activation_bits: 4 = symmetric
// 4-bit levels per 32 values in the int8 blocks), overriding the file's
// ember.activation_bits (written by `ember quantize --act-bits`);
// --act-sparsity picks how a file's activation-sparsity thresholds are used
// (Model::set_activation_sparsity).
#pragma once

#include <string>

#include "cli/args.h"
#include "core/status.h"
#include "model/model.h"

namespace ember::cli {

struct ActOptions {
  int bits = 0;  // 0: not given (the file's value)
  // --act-sparsity auto|skip|dense|off (model/act_sparsity.h; empty: auto).
  std::string sparsity;

  void add_to(ArgParser& p);
  // Applies the flag to a loaded model; the error names the flag.
  Status apply(Model* m) const;
};

}  // namespace ember::cli
