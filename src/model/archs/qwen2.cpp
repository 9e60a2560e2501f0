// qwen2: Qwen2 / Qwen2.5. Llama-like blocks with Q/K/V biases (picked up from
// the weights) and NeoX-style RoPE.
#include "model/archs/archs.h"

namespace ember {

Status fill_qwen2(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = rope_style_from_metadata(meta, cfg->arch, RopeStyle::kNeox);
  cfg->activation = Activation::kSilu;
  return fill_default_rope(meta, cfg);
}

}  // namespace ember
