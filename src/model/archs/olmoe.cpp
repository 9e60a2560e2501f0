// olmoe: OLMoE (OLMoE-1B-7B). Llama-like attention without biases, RMSNorm
// of the whole Q and K projections before RoPE (q_norm [n_head * head_dim],
// k_norm [n_head_kv * head_dim]; llama.cpp reads k_norm as [n_embd], so it
// loads only models without grouped-query attention, as released), NeoX
// RoPE, and a Mixture-of-Experts FFN in every layer whose experts are
// intermediate_size wide: softmax over all experts, the top k, not
// renormalised (norm_topk_prob false in the release and in llama.cpp).
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kQkNormTensors, kFfnNormTensors, kMoeTensors);
constexpr const char* kHfClasses[] = {"OlmoeForCausalLM"};
constexpr const char* kHfModelTypes[] = {"olmoe"};

Status fill_olmoe(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNeox));
  return fill_moe_layers(meta, cfg, {.required = true, .norm_topk = false});
}

// OlmoeConfig's defaults (transformers 5.x); clip_qkv (clamping Q/K/V) is
// not run.
Status hf_olmoe(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  if (cv.get("clip_qkv")) return Status::errorf("{}: clip_qkv is not supported", cv.name());
  return hf_moe_config(cv, ctx, meta, {.n_expert = 64, .n_expert_used = 8, .norm_topk = false});
}

}  // namespace

constinit const ArchSpec kOlmoeSpec = {
    .name = "olmoe",
    .fill = fill_olmoe,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.intermediate_size = 2048, .max_position_embeddings = 4096},  // OlmoeConfig
    .hf_config = hf_olmoe,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 50304, .n_ctx = 4096, .rope_base = 10000, .norm_eps = 1e-5, .tied_embeddings = false},
    .qk_norm_full = true,
};

}  // namespace ember
