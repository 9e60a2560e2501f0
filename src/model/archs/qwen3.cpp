// qwen3: Qwen3 dense models. Llama-like blocks without biases, RMSNorm of
// each Q and K head before RoPE (QK-norm, weights applied as stored), an
// explicit head size (128 in the releases, not n_embd / n_head), NeoX RoPE.
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kQkNormTensors, kFfnNormTensors, kDenseFfnTensors);
constexpr const char* kHfClasses[] = {"Qwen3ForCausalLM"};
constexpr const char* kHfModelTypes[] = {"qwen3"};

Status fill_qwen3(const Metadata& meta, ModelConfig* cfg) { return fill_silu_decoder(meta, cfg, RopeStyle::kNeox); }

}  // namespace

constinit const ArchSpec kQwen3Spec = {
    .name = "qwen3",
    .fill = fill_qwen3,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
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
