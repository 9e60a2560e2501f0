// llama: Llama 2 / 3.x, Mistral. Pre-norm blocks, SwiGLU FFN, interleaved
// ("normal") RoPE on GGUF files (NeoX when loaded from Hugging Face, whose
// Q/K weights are not permuted), optional Llama 3.1 frequency factors.
#include "model/archs/archs.h"

namespace ember {

Status fill_llama(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = rope_style_from_metadata(meta, cfg->arch, RopeStyle::kNormal);
  cfg->activation = Activation::kSilu;
  return fill_default_rope(meta, cfg);
}

}  // namespace ember
