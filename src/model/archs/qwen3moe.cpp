// qwen3moe: Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B). Qwen3's attention (no
// biases, per-head QK-norm, NeoX RoPE) and a Mixture-of-Experts FFN in
// every layer: softmax over all experts, the top k, renormalised when
// norm_topk_prob (llama.cpp always renormalises qwen3moe: GGUF files
// without expert_weights_norm get true; the released models set it).
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kQkNormTensors, kFfnNormTensors, kMoeTensors);
constexpr const char* kHfClasses[] = {"Qwen3MoeForCausalLM"};
constexpr const char* kHfModelTypes[] = {"qwen3_moe"};

Status fill_qwen3moe(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNeox));
  return fill_moe_layers(meta, cfg, {.required = true, .ff_exp_is_ff_over_used = true, .norm_topk = true});
}

// Qwen3MoeConfig's defaults (transformers 5.x).
Status hf_qwen3moe(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  return hf_moe_config(cv, ctx, meta,
                       {.n_expert = 128, .n_expert_used = 8, .ff_exp_key = "moe_intermediate_size",
                        .ff_exp_default = 768, .norm_topk = false});
}

}  // namespace

constinit const ArchSpec kQwen3MoeSpec = {
    .name = "qwen3moe",
    .fill = fill_qwen3moe,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.intermediate_size = 6144, .max_position_embeddings = 32768},  // Qwen3MoeConfig
    .hf_config = hf_qwen3moe,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 151936, .n_ctx = 40960, .rope_base = 1000000, .norm_eps = 1e-6, .tied_embeddings = false,
            .vocab = SyntheticVocab::kQwen2, .expert_ff_key = true},  // Qwen3-30B-A3B
};

}  // namespace ember
