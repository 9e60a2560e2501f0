// llama: Llama 2 / 3.x, Mistral. Pre-norm blocks, SwiGLU FFN, interleaved
// ("normal") RoPE on GGUF files (NeoX when loaded from Hugging Face, whose
// Q/K weights are not permuted; converting such a checkpoint to GGUF
// permutes them), optional Llama 3.1 frequency factors, optional biases.
// gen-model also writes the Mixtral layout (router + 3-D experts), which
// llama.cpp runs and ember does not yet.
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
    {R::kFfnNorm, P::kRequired, G::kAlways},
    {R::kFfnGateInp, P::kUnbound, G::kExperts},
    {R::kFfnGateExps, P::kUnbound, G::kExperts},
    {R::kFfnUpExps, P::kUnbound, G::kExperts},
    {R::kFfnDownExps, P::kUnbound, G::kExperts},
    {R::kFfnGate, P::kRequired, G::kDense},
    {R::kFfnUp, P::kRequired, G::kDense},
    {R::kFfnDown, P::kRequired, G::kDense},
};

constexpr const char* kHfClasses[] = {"LlamaForCausalLM", "MistralForCausalLM"};
constexpr const char* kHfModelTypes[] = {"llama", "mistral"};

Status fill_llama(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = rope_style_from_metadata(meta, cfg->arch, RopeStyle::kNormal);
  cfg->activation = Activation::kSilu;
  return fill_default_rope(meta, cfg);
}

}  // namespace

constinit const ArchSpec kLlamaSpec = {
    .name = "llama",
    .fill = fill_llama,
    .gguf_rope_type = "normal",  // llama.cpp's converter permutes Q/K for interleaved RoPE
    .model_tensors = kModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.max_position_embeddings = 2048},  // LlamaConfig
    .hf_config = nullptr,
    .hf_norm_plus_one = false,
    .hf_permute_qk = true,
    .chat_template = "chatml",
    .gen = {.n_vocab = 128256, .n_ctx = 8192, .rope_base = 500000, .norm_eps = 1e-5},  // Llama 3
};

}  // namespace ember
