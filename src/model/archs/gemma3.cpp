// gemma3: Gemma 3 text models. Interleaved sliding-window / global attention
// (every 6th layer global), QK-norm, pre and post norms around attention and
// FFN, GELU-tanh gated FFN, embeddings scaled by sqrt(n_embd), tied output,
// RoPE base 10k on local layers and <arch>.rope.freq_base (+ scaling) on
// global ones, NeoX RoPE.
#include <cmath>

#include "model/archs/archs.h"

namespace ember {

Status fill_gemma3(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = RopeStyle::kNeox;
  cfg->activation = Activation::kGeluTanh;
  cfg->qk_norm = true;
  cfg->post_attn_norm = true;
  cfg->post_ffn_norm = true;
  cfg->embd_scale = std::sqrt(static_cast<float>(cfg->n_embd));
  // Q is scaled by 1/sqrt(query_pre_attn_scalar), which is head_dim for all
  // released sizes except 27B (n_embd / n_head).
  float qpas = static_cast<float>(cfg->head_dim);
  if (auto v = meta.get_float("gemma3.attention.query_pre_attn_scalar")) qpas = static_cast<float>(*v);
  else if (cfg->n_layer == 62) qpas = static_cast<float>(cfg->n_embd / cfg->n_head);  // 27B
  cfg->attn_scale = 1.0f / std::sqrt(qpas);

  EMBER_RETURN_IF_ERROR(fill_default_rope(meta, cfg));
  const int window = static_cast<int>(meta.get_int("gemma3.attention.sliding_window").value_or(0));
  const int pattern = static_cast<int>(meta.get_int("gemma3.attention.sliding_window_pattern").value_or(6));
  const float local_base = static_cast<float>(meta.get_float("gemma3.rope.local_freq_base").value_or(10000.0));
  for (int il = 0; il < cfg->n_layer; ++il) {
    const bool global = pattern <= 0 || (il + 1) % pattern == 0;
    if (!global && window > 0) {
      LayerConfig& l = cfg->layers[il];
      l.sliding_window = window;
      l.rope_base = local_base;
      l.rope_freq_scale = 1.0f;
    }
  }
  return Status::ok();
}

}  // namespace ember
