// Building blocks of the specs' tensor lists: the runs of tensors that
// several architectures share (llama.cpp's decoder layout), joined into one
// list per spec by tensor_list(). A spec whose tensors differ lists its own
// entries between them (see gemma3.cpp). Constant data; thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>

#include "model/archs/arch_spec.h"

namespace ember::archs {

using R = TensorRole;
using P = Presence;
using G = GenWhen;

// The parts, joined in order, as one constant list.
template <size_t... N>
constexpr std::array<TensorSpec, (N + ...)> tensor_list(const std::array<TensorSpec, N>&... parts) {
  std::array<TensorSpec, (N + ...)> out{};
  size_t i = 0;
  ((std::copy(parts.begin(), parts.end(), out.begin() + i), i += N), ...);
  return out;
}

// Model-level tensors of a decoder: embedding, optional Llama 3.1 RoPE
// factors, final norm, output head (absent: tied to the embedding).
inline constexpr std::array<TensorSpec, 4> kDecoderModelTensors = {{
    {R::kTokenEmbd, P::kRequired, G::kAlways},
    {R::kRopeFreqs, P::kOptional, G::kRopeScaling},
    {R::kOutputNorm, P::kRequired, G::kAlways},
    {R::kOutput, P::kOptional, G::kUntied},
}};

// The same with LongRoPE's factor sets (Phi-3; both optional, checked as a
// pair at load).
inline constexpr std::array<TensorSpec, 5> kLongRopeModelTensors = {{
    {R::kTokenEmbd, P::kRequired, G::kAlways},
    {R::kRopeFactorsLong, P::kOptional, G::kLongRope},
    {R::kRopeFactorsShort, P::kOptional, G::kLongRope},
    {R::kOutputNorm, P::kRequired, G::kAlways},
    {R::kOutput, P::kOptional, G::kUntied},
}};

// The attention projections, optional biases (Qwen2 has Q/K/V biases).
inline constexpr std::array<TensorSpec, 8> kAttentionProjTensors = {{
    {R::kAttnQ, P::kRequired, G::kAlways},
    {R::kAttnK, P::kRequired, G::kAlways},
    {R::kAttnV, P::kRequired, G::kAlways},
    {R::kAttnQBias, P::kOptional, G::kQkvBias},
    {R::kAttnKBias, P::kOptional, G::kQkvBias},
    {R::kAttnVBias, P::kOptional, G::kQkvBias},
    {R::kAttnOutput, P::kRequired, G::kAlways},
    {R::kAttnOutputBias, P::kOptional, G::kNever},
}};

// Pre-norm attention (all but OLMo 2, which has none).
inline constexpr std::array<TensorSpec, 1> kAttnNormTensor = {{{R::kAttnNorm, P::kRequired, G::kAlways}}};
inline constexpr auto kAttentionTensors = tensor_list(kAttnNormTensor, kAttentionProjTensors);

// RMSNorm of each Q and K head (QK-norm).
inline constexpr std::array<TensorSpec, 2> kQkNormTensors = {{
    {R::kAttnQNorm, P::kRequired, G::kAlways},
    {R::kAttnKNorm, P::kRequired, G::kAlways},
}};

// The FFN's pre-norm (Hugging Face: post_attention_layernorm).
inline constexpr std::array<TensorSpec, 1> kFfnNormTensors = {{
    {R::kFfnNorm, P::kRequired, G::kAlways},
}};

// Gated dense FFN.
inline constexpr std::array<TensorSpec, 3> kDenseFfnTensors = {{
    {R::kFfnGate, P::kRequired, G::kDense},
    {R::kFfnUp, P::kRequired, G::kDense},
    {R::kFfnDown, P::kRequired, G::kDense},
}};

// A Mixture-of-Experts FFN with Qwen's Hugging Face names (Qwen2-MoE,
// Qwen3-MoE, OLMoE): the router, the 3-D experts (GGUF), one matrix per
// expert (transformers' saved format) or the fused gate_up / down tensors
// (transformers v5 with save_original_format=False).
inline constexpr std::array<TensorSpec, 5> kMoeTensors = {{
    {R::kFfnGateInp, P::kRequired, G::kExperts, "mlp.gate.weight"},
    {R::kFfnGateExps, P::kRequired, G::kExperts, "mlp.experts.{e}.gate_proj.weight"},
    {R::kFfnUpExps, P::kRequired, G::kExperts, "mlp.experts.{e}.up_proj.weight"},
    {R::kFfnDownExps, P::kRequired, G::kExperts, "mlp.experts.{e}.down_proj.weight", "mlp.experts.down_proj"},
    {R::kFfnGateUpExps, P::kOptional, G::kNever, "mlp.experts.gate_up_proj"},
}};

// Qwen2-MoE's shared expert and its sigmoid gate.
inline constexpr std::array<TensorSpec, 4> kSharedExpertTensors = {{
    {R::kFfnGateInpShexp, P::kRequired, G::kExperts, "mlp.shared_expert_gate.weight"},
    {R::kFfnGateShexp, P::kRequired, G::kExperts, "mlp.shared_expert.gate_proj.weight"},
    {R::kFfnUpShexp, P::kRequired, G::kExperts, "mlp.shared_expert.up_proj.weight"},
    {R::kFfnDownShexp, P::kRequired, G::kExperts, "mlp.shared_expert.down_proj.weight"},
}};

// Mixtral's router and experts (GGUF: the llama architecture with
// <arch>.expert_count), with Mixtral's Hugging Face names (w1 gate, w3 up,
// w2 down) and those transformers v5 writes fused.
inline constexpr std::array<TensorSpec, 5> kMixtralExpertTensors = {{
    {R::kFfnGateInp, P::kRequired, G::kExperts, "block_sparse_moe.gate.weight", "mlp.gate.weight"},
    {R::kFfnGateExps, P::kRequired, G::kExperts, "block_sparse_moe.experts.{e}.w1.weight"},
    {R::kFfnUpExps, P::kRequired, G::kExperts, "block_sparse_moe.experts.{e}.w3.weight"},
    {R::kFfnDownExps, P::kRequired, G::kExperts, "block_sparse_moe.experts.{e}.w2.weight", "mlp.experts.down_proj"},
    {R::kFfnGateUpExps, P::kOptional, G::kNever, "mlp.experts.gate_up_proj"},
}};

}  // namespace ember::archs
