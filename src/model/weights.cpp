// Weight binding and shape validation; see weights.h.
#include "model/weights.h"

#include <fmt/format.h>

#include "kernels/registry.h"

namespace ember {

namespace {

class Binder {
 public:
  Binder(const ModelFile& f, ModelWeights* w) : file_(f), w_(w) {}

  // A matrix [rows, cols] (ne[0] = cols). Required unless `optional`.
  Status matrix(const std::string& name, int64_t rows, int64_t cols, const TensorView** out, bool optional = false) {
    const TensorView* t = file_.tensor(name);
    if (!t) {
      if (optional) return Status::ok();
      return Status::errorf("missing tensor '{}'", name);
    }
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
      return Status::errorf("tensor '{}' has shape {}, expected [{}, {}]", name, t->shape_string(), cols, rows);
    const KernelSet& k = kernels(t->type);
    if (!k.vec_dot || !k.dequantize_row)
      return Status::errorf("tensor '{}' has type {} which has no matmul kernel", name, dtype_name(t->type));
    *out = t;
    return Status::ok();
  }

  // A vector of n floats (any float type; converted to f32 if needed).
  Status vector(const std::string& name, int64_t n, const float** out, bool optional = false) {
    const TensorView* t = file_.tensor(name);
    if (!t) {
      if (optional) return Status::ok();
      return Status::errorf("missing tensor '{}'", name);
    }
    if (t->nelements() != n) return Status::errorf("tensor '{}' has {} elements, expected {}", name, t->nelements(), n);
    if (t->type == DType::kF32) {
      *out = static_cast<const float*>(t->data);
      return Status::ok();
    }
    const KernelSet& k = kernels(t->type);
    if (!k.dequantize_row || t->ne[0] % dtype_block_size(t->type) != 0)
      return Status::errorf("tensor '{}' has unsupported type {}", name, dtype_name(t->type));
    auto buf = std::make_unique<float[]>(n);
    for (int64_t r = 0; r < t->nrows(); ++r) k.dequantize_row(t->row(r), buf.get() + r * t->ne[0], t->ne[0]);
    *out = buf.get();
    w_->owned.push_back(std::move(buf));
    return Status::ok();
  }

 private:
  const ModelFile& file_;
  ModelWeights* w_;
};

}  // namespace

Result<std::unique_ptr<ModelWeights>> bind_weights(const ModelFile& file, ModelConfig* cfg) {
  auto w = std::make_unique<ModelWeights>();
  Binder b(file, w.get());
  const TensorView* embd = file.tensor("token_embd.weight");
  if (!embd) return Status::error("missing tensor 'token_embd.weight'");
  if (embd->n_dims != 2 || embd->ne[0] != cfg->n_embd)
    return Status::errorf("tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", embd->shape_string(),
                          cfg->n_embd);
  cfg->n_vocab = static_cast<int>(embd->ne[1]);
  const int64_t E = cfg->n_embd, V = cfg->n_vocab;
  EMBER_RETURN_IF_ERROR(b.matrix("token_embd.weight", V, E, &w->tok_embd));
  EMBER_RETURN_IF_ERROR(b.vector("output_norm.weight", E, &w->output_norm));
  EMBER_RETURN_IF_ERROR(b.matrix("output.weight", V, E, &w->output.weight, /*optional=*/true));
  if (!w->output.weight) w->output.weight = w->tok_embd;  // tied
  EMBER_RETURN_IF_ERROR(b.vector("rope_freqs.weight", cfg->n_rot / 2, &w->rope_freqs, true));

  w->layers.resize(cfg->n_layer);
  for (int il = 0; il < cfg->n_layer; ++il) {
    const LayerConfig& lc = cfg->layers[il];
    const int64_t Q = lc.n_q_dim(cfg->head_dim), K = lc.n_kv_dim(cfg->head_dim), Vd = lc.n_v_dim(cfg->head_dim_v);
    const int64_t O = static_cast<int64_t>(lc.n_head) * cfg->head_dim_v, F = lc.n_ff;
    LayerWeights& l = w->layers[il];
    auto n = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    EMBER_RETURN_IF_ERROR(b.vector(n("attn_norm.weight"), E, &l.attn_norm));
    EMBER_RETURN_IF_ERROR(b.matrix(n("attn_q.weight"), Q, E, &l.q.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(n("attn_k.weight"), K, E, &l.k.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(n("attn_v.weight"), Vd, E, &l.v.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(n("attn_output.weight"), E, O, &l.o.weight));
    EMBER_RETURN_IF_ERROR(b.vector(n("attn_q.bias"), Q, &l.q.bias, true));
    EMBER_RETURN_IF_ERROR(b.vector(n("attn_k.bias"), K, &l.k.bias, true));
    EMBER_RETURN_IF_ERROR(b.vector(n("attn_v.bias"), Vd, &l.v.bias, true));
    EMBER_RETURN_IF_ERROR(b.vector(n("attn_output.bias"), E, &l.o.bias, true));
    if (cfg->qk_norm) {
      EMBER_RETURN_IF_ERROR(b.vector(n("attn_q_norm.weight"), cfg->head_dim, &l.q_norm));
      EMBER_RETURN_IF_ERROR(b.vector(n("attn_k_norm.weight"), cfg->head_dim, &l.k_norm));
    }
    if (cfg->post_attn_norm) EMBER_RETURN_IF_ERROR(b.vector(n("post_attention_norm.weight"), E, &l.post_attn_norm));
    EMBER_RETURN_IF_ERROR(b.vector(n("ffn_norm.weight"), E, &l.ffn_norm));
    EMBER_RETURN_IF_ERROR(b.matrix(n("ffn_gate.weight"), F, E, &l.gate.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(n("ffn_up.weight"), F, E, &l.up.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(n("ffn_down.weight"), E, F, &l.down.weight));
    if (cfg->post_ffn_norm) EMBER_RETURN_IF_ERROR(b.vector(n("post_ffw_norm.weight"), E, &l.post_ffn_norm));
  }
  return w;
}

}  // namespace ember
