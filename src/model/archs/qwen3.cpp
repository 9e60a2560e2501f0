// qwen3: Qwen3 dense models. Llama-like blocks without biases, RMSNorm of
// each Q and K head before RoPE (QK-norm, weights applied as stored), an
// explicit head size (128 in the releases, not n_embd / n_head), NeoX RoPE.
#include "model/archs/archs.h"

namespace ember {

Status fill_qwen3(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = rope_style_from_metadata(meta, cfg->arch, RopeStyle::kNeox);
  cfg->activation = Activation::kSilu;
  cfg->qk_norm = true;
  return fill_default_rope(meta, cfg);
}

}  // namespace ember
