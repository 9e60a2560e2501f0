// Batched RMSNorm of rows and heads; see norm.h.
#include "model/layers/norm.h"

namespace ember {

void norm_rows(Backend& backend, const ModelConfig& cfg, const float* x, const float* w, float* out, int64_t n) {
  const int64_t E = cfg.n_embd;
  backend.rms_norm(x, E, w, out, E, n, E, cfg.norm_eps);
}

void norm_rows_width(Backend& backend, const ModelConfig& cfg, const float* x, int64_t width, const float* w,
                     float* out, int64_t n) {
  backend.rms_norm(x, width, w, out, width, n, width, cfg.norm_eps);
}

void norm_heads(Backend& backend, const ModelConfig& cfg, float* x, int64_t n, int n_heads, const float* w) {
  const int64_t hd = cfg.head_dim;
  backend.rms_norm(x, hd, w, x, hd, n * n_heads, hd, cfg.norm_eps);
}

}  // namespace ember
