// Activation sparsity (TEAL, Liu et al., ICLR 2025; issue 38): per block,
// magnitude thresholds t on the four inputs of its matrices; the forward
// pass multiplies with x' = x * [|x| > t] (every token, prefill and decode
// alike, so a token's bits never depend on how it was batched), and decode
// skips the weights of the zeroed inputs (kernels/act_sparse.h).
//
// Stored in the GGUF metadata (written by `ember prune --activations S`,
// transform/act_sparsity.h):
//   ember.activation_sparsity.thresholds  float32 array [n_layer * 4]: per
//       block l, entries 4 l + i for the input i (ActInput): the attention
//       input (Q/K/V), the attention output (O), the FFN input (gate/up) and
//       the FFN down input; 0: that input is not sparsified.
//   ember.activation_sparsity.target      float32: the calibrated fraction S
//       of zeroed entries (informational).
// A Mixture-of-Experts layer's FFN inputs stay dense (0).
#pragma once

#include <string>
#include <vector>

#include "core/metadata.h"
#include "core/status.h"

namespace ember {

inline constexpr const char* kActSparsityThresholdsKey = "ember.activation_sparsity.thresholds";
inline constexpr const char* kActSparsityTargetKey = "ember.activation_sparsity.target";

enum class ActInput { kAttnIn = 0, kAttnOut = 1, kFfnIn = 2, kFfnDown = 3 };
constexpr int kActInputs = 4;
const char* act_input_name(ActInput i);  // "attn_in", "attn_out", "ffn_in", "ffn_down"

// How a model uses its thresholds (`--act-sparsity`): kAuto: thresholds on,
// the column kernels where the driver's rule says they pay; kSkip: thresholds
// on, column kernels for every call of up to kColMaxTokens tokens; kDense:
// thresholds on, dense kernels only (the same bits); kOff: thresholds off
// (the dense model).
enum class ActSparsityMode { kAuto, kSkip, kDense, kOff };
Result<ActSparsityMode> act_sparsity_mode_from_name(const std::string& s);  // auto, skip, dense, off

// The thresholds of a file with n_layer blocks: empty when the key is
// absent. Errors: not an array of floats, a length other than n_layer * 4,
// a negative or non-finite value.
Result<std::vector<float>> read_act_thresholds(const Metadata& md, int n_layer);

}  // namespace ember
