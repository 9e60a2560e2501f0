// qwen2moe: Qwen1.5-MoE / Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B).
// Qwen2's attention (Q/K/V biases, NeoX RoPE) and a Mixture-of-Experts FFN
// in every layer: softmax over all experts, the top k, renormalised only
// when norm_topk_prob (false in the releases; llama.cpp never
// renormalises qwen2moe), plus a shared expert whose output is scaled by
// sigmoid(x . shared_expert_gate) and added after the routed ones.
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kFfnNormTensors, kMoeTensors, kSharedExpertTensors);
constexpr const char* kHfClasses[] = {"Qwen2MoeForCausalLM"};
constexpr const char* kHfModelTypes[] = {"qwen2_moe"};

Status fill_qwen2moe(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNeox));
  return fill_moe_layers(meta, cfg,
                         {.required = true, .ff_exp_is_ff_over_used = true, .shared_expert = true, .norm_topk = false});
}

// Qwen2MoeConfig's defaults (transformers 5.x).
Status hf_qwen2moe(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  return hf_moe_config(cv, ctx, meta,
                       {.n_expert = 60, .n_expert_used = 4, .ff_exp_key = "moe_intermediate_size",
                        .ff_exp_default = 1408, .shared_expert = true, .shared_default = 5632, .norm_topk = false});
}

}  // namespace

constinit const ArchSpec kQwen2MoeSpec = {
    .name = "qwen2moe",
    .fill = fill_qwen2moe,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.intermediate_size = 5632, .max_position_embeddings = 32768},  // Qwen2MoeConfig
    .hf_config = hf_qwen2moe,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 151936, .n_ctx = 8192, .rope_base = 1000000, .norm_eps = 1e-6, .tied_embeddings = false,
            .qkv_bias = true, .vocab = SyntheticVocab::kQwen2, .expert_ff_key = true},  // Qwen1.5-MoE-A2.7B
};

}  // namespace ember
