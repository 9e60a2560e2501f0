// qwen2: Qwen2 / Qwen2.5. Llama-like blocks with Q/K/V biases (bound when
// present) and NeoX-style RoPE.
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kFfnNormTensors, kDenseFfnTensors);
constexpr const char* kHfClasses[] = {"Qwen2ForCausalLM"};
constexpr const char* kHfModelTypes[] = {"qwen2"};

Status fill_qwen2(const Metadata& meta, ModelConfig* cfg) { return fill_silu_decoder(meta, cfg, RopeStyle::kNeox); }

}  // namespace

constinit const ArchSpec kQwen2Spec = {
    .name = "qwen2",
    .fill = fill_qwen2,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.max_position_embeddings = 32768},  // Qwen2Config
    .hf_config = nullptr,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 151936, .n_ctx = 32768, .rope_base = 1000000, .norm_eps = 1e-6, .tied_embeddings = true,
            .qkv_bias = true, .vocab = SyntheticVocab::kQwen2},  // Qwen2.5-0.5B
};

}  // namespace ember
