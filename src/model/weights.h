// ModelWeights: the tensors of one model bound to their roles, with every
// shape checked against the ModelConfig at load. Small vectors (norms,
// biases) are kept as f32 (converted once if stored otherwise).
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/io/model_file.h"

namespace ember {

// Shapes use the layer's own head and FFN sizes (LayerConfig): structured
// pruning makes layers differ.
struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd]
  Linear q;                               // [n_head*head_dim, n_embd], bias optional
  Linear k;                               // [n_head_kv*head_dim, n_embd], bias optional
  Linear v;                               // [n_head_kv*head_dim_v, n_embd], bias optional
  Linear o;                               // [n_embd, n_head*head_dim_v], bias optional
  const float* q_norm = nullptr;          // [head_dim] (qk_norm)
  const float* k_norm = nullptr;          // [head_dim] (qk_norm)
  const float* post_attn_norm = nullptr;  // [n_embd] (post_attn_norm)
  const float* ffn_norm = nullptr;        // [n_embd]
  Linear gate;                            // [n_ff, n_embd]
  Linear up;                              // [n_ff, n_embd]
  Linear down;                            // [n_embd, n_ff]
  const float* post_ffn_norm = nullptr;   // [n_embd] (post_ffn_norm)
};

struct ModelWeights {
  const TensorView* tok_embd = nullptr;  // [n_vocab, n_embd]
  const float* output_norm = nullptr;    // [n_embd]
  Linear output;                         // [n_vocab, n_embd] (tok_embd when tied)
  const float* rope_freqs = nullptr;     // [n_rot/2] (optional, Llama 3.1)
  // LongRoPE frequency divisors [n_rot/2] (optional, Phi-3): both or neither.
  const float* rope_factors_long = nullptr;
  const float* rope_factors_short = nullptr;
  std::vector<LayerWeights> layers;

  // Owned f32 copies of small vectors that were not stored as f32.
  std::vector<std::unique_ptr<float[]>> owned;
  // Row ranges of fused matrices (attn_qkv, Phi-3's ffn_up): views into
  // the file's tensor that the parts' Linears point to.
  std::vector<std::unique_ptr<TensorView>> views;
};

// Binds and validates the weights of `file` for `cfg` (also sets
// cfg->n_vocab from the embedding matrix), driven by the tensor list of the
// architecture's ArchSpec (model/archs): every required tensor must be there,
// optional ones are bound when present, each with the shape its role has in
// its layer. A fused matrix (TensorSpec::parts) is checked as a whole and
// split into row views, one per part. Errors name the tensor.
Result<std::unique_ptr<ModelWeights>> bind_weights(const ModelFile& file, ModelConfig* cfg);

}  // namespace ember
