// ModelWeights: the tensors of one model bound to their roles, with every
// shape checked against the ModelConfig at load. Small vectors (norms,
// biases) are kept as f32 (converted once if stored otherwise).
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/io/model_file.h"

namespace ember {

// The router and experts of a Mixture-of-Experts layer (LayerConfig::ffn_kind
// kMoe). Every expert is its own 2-D matrix: a zero-copy view of its slice
// of the file's 3-D tensor (ffn_{gate,up,down}_exps [.., .., n_expert]; the
// fused ffn_gate_up_exps of transformers v5 gives each expert's gate as its
// first n_ff_exp rows and its up as the next) or the file's per-expert
// matrix (gguf_expert_tensor_name).
struct MoeWeights {
  Linear router;                  // [n_expert, n_embd], bias optional (gpt-oss)
  std::vector<Linear> gate, up;   // [n_expert] of [n_ff_exp, n_embd]
  std::vector<Linear> down;       // [n_expert] of [n_embd, n_ff_exp]
  Linear shared_gate, shared_up;  // [n_ff_shexp, n_embd] (n_ff_shexp > 0)
  Linear shared_down;             // [n_embd, n_ff_shexp]
  Linear shared_gate_inp;         // [1, n_embd]: sigmoid gate of the shared expert (optional)
  // The experts' biases (gpt-oss), [n_expert, n_ff_exp] / [n_expert,
  // n_embd] (row e: expert e's), or null.
  const float* gate_b = nullptr;
  const float* up_b = nullptr;
  const float* down_b = nullptr;
  // The experts' weights as the grouped matmul takes them (ExpertTarget).
  std::vector<const TensorView*> gate_w, up_w, down_w;
};

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
  const float* attn_sinks = nullptr;      // [n_head] (gpt-oss: AttentionShape::sinks)
  MoeWeights moe;                         // ffn_kind kMoe (gate / up / down unset)
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
  // Views the weights point at that are not tensors of the file (stable
  // addresses): each expert's 2-D slice of a 3-D tensor, and the row ranges
  // of fused matrices (attn_qkv, Phi-3's ffn_up) that the parts' Linears
  // point to.
  std::deque<TensorView> views;
};

// Binds and validates the weights of `file` for `cfg` (also sets
// cfg->n_vocab from the embedding matrix), driven by the tensor list of the
// architecture's ArchSpec (model/archs): every required tensor must be there,
// optional ones are bound when present, each with the shape its role has in
// its layer; a layer binds the dense FFN or the MoE tensors by its ffn_kind.
// Experts come from the 3-D tensors, else the fused gate/up tensor, else
// one 2-D matrix per expert (all experts of a role in one type). Errors
// name the tensor (a 3-D tensor with the wrong expert count or a
// truncated payload, a 3-D tensor where a matrix belongs, a missing
// expert).
// A fused matrix (TensorSpec::parts) is checked as a whole and split into
// row views, one per part.
Result<std::unique_ptr<ModelWeights>> bind_weights(const ModelFile& file, ModelConfig* cfg);

}  // namespace ember
