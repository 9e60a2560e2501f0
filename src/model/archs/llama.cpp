// llama: Llama 2 / 3.x, Mistral. Pre-norm blocks, SwiGLU FFN, interleaved
// ("normal") RoPE on GGUF files (NeoX when loaded from Hugging Face, whose
// Q/K weights are not permuted; converting such a checkpoint to GGUF
// permutes them), optional Llama 3.1 frequency factors, optional biases.
// gen-model also writes the Mixtral layout (router + 3-D experts), which
// llama.cpp runs and ember does not yet.
#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kFfnNormTensors, kMixtralExpertTensors, kDenseFfnTensors);
constexpr const char* kHfClasses[] = {"LlamaForCausalLM", "MistralForCausalLM"};
constexpr const char* kHfModelTypes[] = {"llama", "mistral"};

Status fill_llama(const Metadata& meta, ModelConfig* cfg) { return fill_silu_decoder(meta, cfg, RopeStyle::kNormal); }

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
    .hf_config = nullptr,
    .hf_norm_plus_one = false,
    .hf_permute_qk = true,
    .chat_template = "chatml",
    .gen = {.n_vocab = 128256, .n_ctx = 8192, .rope_base = 500000, .norm_eps = 1e-5},  // Llama 3
};

}  // namespace ember
