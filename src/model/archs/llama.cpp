// llama: Llama 2 / 3.x, Mistral. Pre-norm blocks, SwiGLU FFN, interleaved
// ("normal") RoPE on GGUF files (NeoX when loaded from Hugging Face, whose
// Q/K weights are not permuted; converting such a checkpoint to GGUF
// permutes them), optional Llama 3.1 frequency factors, optional biases.
// Mixtral is this architecture with <arch>.expert_count (as llama.cpp's
// converter writes it): a Mixture-of-Experts FFN in every layer, softmax
// over all experts, the top k, renormalised (transformers' MixtralTopKRouter;
// the same function as a softmax over the top k logits).
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kFfnNormTensors, kMixtralExpertTensors, kDenseFfnTensors);
constexpr const char* kHfClasses[] = {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"};
constexpr const char* kHfModelTypes[] = {"llama", "mistral", "mixtral"};

Status fill_llama(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNormal));
  return fill_moe_layers(meta, cfg, {.required = false, .norm_topk = true});
}

// Mixtral's num_local_experts / num_experts_per_tok (MixtralConfig: 8, 2);
// dense Llama / Mistral configs have neither.
Status hf_llama(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  return hf_moe_config(cv, ctx, meta, {.n_expert = 0, .n_expert_used = 2, .norm_topk = true, .norm_topk_key = false});
}

}  // namespace

constinit const ArchSpec kLlamaSpec = {
    .name = "llama",
    .fill = fill_llama,
    .gguf_rope_type = "normal",  // llama.cpp's converter permutes Q/K for interleaved RoPE
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.max_position_embeddings = 2048},  // LlamaConfig
    .hf_config = hf_llama,
    .hf_norm_plus_one = false,
    .hf_permute_qk = true,
    .chat_template = "chatml",
    .gen = {.n_vocab = 128256, .n_ctx = 8192, .rope_base = 500000, .norm_eps = 1e-5},  // Llama 3
};

}  // namespace ember
