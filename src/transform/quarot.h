// QuaRot-style rotations fused into a model's weights (`ember quantize
// --rotate`, `--method quarot`), so that 4-bit weights and activations see
// inputs whose outliers a Hadamard transform has spread over many channels.
// Per block, in f32 (the changed tensors become owned f32 tensors of the
// result; their plan entries are re-planned from f32):
//   attn_in   Q/K/V columns   W <- W blockdiag(H_g)^T, g | n_embd, and the
//             forward pass rotates the attention input (attn_norm output)
//             online: exact for any architecture (Gemma 3's post-norms keep
//             the residual-stream rotation R1 from fusing into the weights);
//   ffn_in    gate/up columns, the same with the FFN input (ffn_norm output);
//   ffn_down  down columns, g | n_ff (QuaRot's R4: online H before down);
//   attn_v    V rows (and bias) H W_v per kv head, O columns W_o H^T per
//             query head (QuaRot's R2, offline only: the attention output,
//             a mix of rotated V rows, stays rotated until O);
//   attn_out  O columns W_o H_g^T, g | n_head * head_dim_v, on top of R2,
//             and the attention output rotated online before O (QuaRot's
//             Hadamard across heads; off by default: on the default model it
//             measured slightly worse than R2 alone, docs/quantization.md).
// g is the largest size of kernels/hadamard.h dividing the width (the whole
// width when it is one: 640 = 32 * 20, 2048; else a block-diagonal H).
// The group sizes go to the metadata (model/config.h kRot*Key), where the
// forward pass finds its online parts. In exact arithmetic the model is the
// same function; in f32 its logits match the source's to rounding.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/io/model_file.h"
#include "transform/quant_plan.h"

namespace ember {

struct QuarotOptions {
  bool attn_in = true;
  bool ffn_in = true;
  bool ffn_down = true;
  bool attn_v = true;
  bool attn_out = false;
};

// The largest Hadamard size (kernels/hadamard.h) that divides n, 0 if none.
int64_t largest_hadamard_divisor(int64_t n);

// Rotates src's blocks as above and records the group sizes in its
// metadata; *plan's entries of changed tensors get source F32 (and a method
// that rounds from f32). *applied (may be null) gets the sizes used. Errors:
// a file already rotated, no Hadamard size for a width, Hugging Face tensors
// whose Q/K rows are permuted at conversion, a tensor of an unexpected shape.
Result<std::unique_ptr<ModelFile>> apply_quarot(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                                const QuarotOptions& o, ThreadPool& pool,
                                                ModelRotation* applied = nullptr);

}  // namespace ember
