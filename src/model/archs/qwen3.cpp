// qwen3: Qwen3 dense models. Llama-like blocks without biases, RMSNorm of
// each Q and K head before RoPE (QK-norm, weights applied as stored), an
// explicit head size (128 in the releases, not n_embd / n_head), NeoX RoPE.
#include "model/archs/archs.h"

namespace ember {
namespace {

using R = TensorRole;
using P = Presence;
using G = GenWhen;

constexpr TensorSpec kModelTensors[] = {
    {R::kTokenEmbd, P::kRequired, G::kAlways},
    {R::kRopeFreqs, P::kOptional, G::kRopeScaling},
    {R::kOutputNorm, P::kRequired, G::kAlways},
    {R::kOutput, P::kOptional, G::kUntied},
};

constexpr TensorSpec kBlockTensors[] = {
    {R::kAttnNorm, P::kRequired, G::kAlways},
    {R::kAttnQ, P::kRequired, G::kAlways},
    {R::kAttnK, P::kRequired, G::kAlways},
    {R::kAttnV, P::kRequired, G::kAlways},
    {R::kAttnQBias, P::kOptional, G::kQkvBias},
    {R::kAttnKBias, P::kOptional, G::kQkvBias},
    {R::kAttnVBias, P::kOptional, G::kQkvBias},
    {R::kAttnOutput, P::kRequired, G::kAlways},
    {R::kAttnOutputBias, P::kOptional, G::kNever},
    {R::kAttnQNorm, P::kRequired, G::kAlways},
    {R::kAttnKNorm, P::kRequired, G::kAlways},
    {R::kFfnNorm, P::kRequired, G::kAlways},
    {R::kFfnGate, P::kRequired, G::kAlways},
    {R::kFfnUp, P::kRequired, G::kAlways},
    {R::kFfnDown, P::kRequired, G::kAlways},
};

constexpr const char* kHfClasses[] = {"Qwen3ForCausalLM"};
constexpr const char* kHfModelTypes[] = {"qwen3"};

Status fill_qwen3(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = rope_style_from_metadata(meta, cfg->arch, RopeStyle::kNeox);
  cfg->activation = Activation::kSilu;
  return fill_default_rope(meta, cfg);
}

}  // namespace

constinit const ArchSpec kQwen3Spec = {
    .name = "qwen3",
    .fill = fill_qwen3,
    .gguf_rope_type = "neox",
    .model_tensors = kModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.max_position_embeddings = 32768, .head_dim = 128},  // Qwen3Config
    .hf_config = nullptr,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 151936, .n_ctx = 40960, .rope_base = 1000000, .norm_eps = 1e-6, .tied_embeddings = true,
            .vocab = SyntheticVocab::kQwen2},  // Qwen3-0.6B
};

}  // namespace ember
