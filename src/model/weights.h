// ModelWeights: the tensors of one model bound to their roles, with every
// shape checked against the ModelConfig at load. Small vectors (norms,
// biases) are kept as f32 (converted once if stored otherwise).
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/io/model_file.h"

namespace ember {

struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd]
  const TensorView* wq = nullptr;         // [n_head*head_dim, n_embd]
  const TensorView* wk = nullptr;         // [n_head_kv*head_dim, n_embd]
  const TensorView* wv = nullptr;         // [n_head_kv*head_dim_v, n_embd]
  const TensorView* wo = nullptr;         // [n_embd, n_head*head_dim_v]
  const float* bq = nullptr;              // [n_head*head_dim] (optional)
  const float* bk = nullptr;              // [n_head_kv*head_dim] (optional)
  const float* bv = nullptr;              // [n_head_kv*head_dim_v] (optional)
  const float* bo = nullptr;              // [n_embd] (optional)
  const float* q_norm = nullptr;          // [head_dim] (qk_norm)
  const float* k_norm = nullptr;          // [head_dim] (qk_norm)
  const float* post_attn_norm = nullptr;  // [n_embd] (post_attn_norm)
  const float* ffn_norm = nullptr;        // [n_embd]
  const TensorView* w_gate = nullptr;     // [n_ff, n_embd]
  const TensorView* w_up = nullptr;       // [n_ff, n_embd]
  const TensorView* w_down = nullptr;     // [n_embd, n_ff]
  const float* post_ffn_norm = nullptr;   // [n_embd] (post_ffn_norm)
};

struct ModelWeights {
  const TensorView* tok_embd = nullptr;  // [n_vocab, n_embd]
  const float* output_norm = nullptr;    // [n_embd]
  const TensorView* output = nullptr;    // [n_vocab, n_embd] (tok_embd when tied)
  const float* rope_freqs = nullptr;     // [n_rot/2] (optional, Llama 3.1)
  std::vector<LayerWeights> layers;

  // Owned f32 copies of small vectors that were not stored as f32.
  std::vector<std::unique_ptr<float[]>> owned;
};

// Binds and validates the weights of `file` for `cfg` (also sets
// cfg->n_vocab from the embedding matrix).
Result<std::unique_ptr<ModelWeights>> bind_weights(const ModelFile& file, ModelConfig* cfg);

}  // namespace ember
