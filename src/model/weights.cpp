// Weight binding and shape validation, driven by the architecture's tensor
// list (model/archs); see weights.h.
#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/backend.h"
#include "kernels/registry.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "model/archs/archs.h"

namespace ember {

namespace {

class Binder {
 public:
  Binder(const ModelFile& f, ModelWeights* w, int64_t output_rows) : file_(f), w_(w), output_rows_(output_rows) {}

  // A matrix [rows, cols] (ne[0] = cols). Required unless `optional`.
  Status matrix(const std::string& name, int64_t rows, int64_t cols, const TensorView** out, bool optional = false) {
    const TensorView* t = file_.tensor(name);
    if (!t) {
      if (optional) return Status::ok();
      return Status::errorf("missing tensor '{}'", name);
    }
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
      return Status::errorf("tensor '{}' has shape {}, expected [{}, {}]", name, t->shape_string(), cols, rows);
    EMBER_RETURN_IF_ERROR(check_matmul_type(*t));
    EMBER_RETURN_IF_ERROR(check_block_scales(*t));
    *out = t;
    return Status::ok();
  }

  // Block scales no kernel may read: an MXFP4 E8M0 byte 0xff (NaN).
  static Status check_block_scales(const TensorView& t) {
    if (t.type != DType::kMXFP4 || !t.data) return Status::ok();
    const size_t bytes = std::min(t.nbytes, t.row_bytes() * static_cast<size_t>(t.nrows()));
    const int64_t bad = mxfp4_find_nan_scale(t.data, static_cast<int64_t>(bytes / sizeof(BlockMXFP4)));
    if (bad < 0) return Status::ok();
    const int64_t per_row = t.ne[0] / kQK, row = bad / per_row;
    const std::string where = t.n_dims == 3 ? fmt::format("expert {}, row {}", row / t.ne[1], row % t.ne[1])
                                            : fmt::format("row {}", row);
    return Status::errorf("tensor '{}': MXFP4 block {} of {} has scale byte 0xff, which is NaN in E8M0 (the file is "
                          "corrupt)",
                          t.name, bad % per_row, where);
  }

  // Every matrix must run on the CPU backend (the default one; a runner on
  // another backend checks it too: Model::check_backend).
  static Status check_matmul_type(const TensorView& t) {
    if (!cpu_backend_supports(t.type, WeightOp::kMatmul))
      return Status::errorf("tensor '{}' has type {} which has no matmul kernel", t.name, dtype_name(t.type));
    return Status::ok();
  }

  // A 3-D stack of n matrices [rows, cols] (ne = {cols, rows, n}), or
  // *out = null when the file does not have it.
  Status stack(const std::string& name, int64_t n, int64_t rows, int64_t cols, const TensorView** out) {
    *out = nullptr;
    const TensorView* t = file_.tensor(name);
    if (!t) return Status::ok();
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n)
      return Status::errorf("tensor '{}' has shape {}, expected [{}, {}, {}] ({} experts of [{}, {}])", name,
                            t->shape_string(), cols, rows, n, n, rows, cols);
    EMBER_RETURN_IF_ERROR(check_matmul_type(*t));
    if (t->nbytes < t->row_bytes() * static_cast<size_t>(t->nrows()))
      return Status::errorf("tensor '{}' is truncated: {} bytes of {}", name, t->nbytes,
                            t->row_bytes() * static_cast<size_t>(t->nrows()));
    EMBER_RETURN_IF_ERROR(check_block_scales(*t));
    *out = t;
    return Status::ok();
  }

  // Rows [r0, r0 + rows) of slice e of the 3-D tensor t as a 2-D matrix
  // (zero-copy), named `name`.
  const TensorView* slice(const TensorView& t, int64_t e, int64_t r0, int64_t rows, const std::string& name) {
    TensorView v;
    v.name = name;
    v.type = t.type;
    v.n_dims = 2;
    v.ne[0] = t.ne[0];
    v.ne[1] = rows;
    v.data = t.row(e * t.ne[1] + r0);
    v.nbytes = t.row_bytes() * static_cast<size_t>(rows);
    w_->views.push_back(v);
    return &w_->views.back();
  }

  // A [1, n] matrix over n owned or file floats (the shared expert's gate).
  const TensorView* row_view(const float* x, int64_t n, const std::string& name) {
    TensorView v;
    v.name = name;
    v.type = DType::kF32;
    v.n_dims = 2;
    v.ne[0] = n;
    v.ne[1] = 1;
    v.data = x;
    v.nbytes = static_cast<size_t>(n) * sizeof(float);
    w_->views.push_back(v);
    return &w_->views.back();
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

  // One listed tensor into its slot, with the shape its spec has for `sizes`.
  Status bind(const TensorSpec& spec, int il, const TensorSizes& sizes, const TensorView** matrix_slot,
              const float** vector_slot) {
    const std::vector<int64_t> ne = tensor_shape(spec, sizes);
    const std::string name = gguf_tensor_name(spec, il);
    const bool optional = spec.presence == Presence::kOptional;
    // A trimmed output vocabulary: the head has a row per kept token.
    if (matrix_slot) {
      const int64_t rows = spec.role == TensorRole::kOutput && output_rows_ > 0 ? output_rows_ : ne[1];
      return matrix(name, rows, ne[0], matrix_slot, optional);
    }
    return vector(name, ne[0], vector_slot, optional);
  }

  // A fused matrix (spec.parts): the whole is checked, then part i gets a
  // view of its rows in parts_out[i] (all null when an optional one is absent).
  Status bind_fused(const TensorSpec& spec, int il, const TensorSizes& sizes, const TensorView** parts_out) {
    const std::vector<int64_t> ne = tensor_shape(spec, sizes);
    const std::string name = gguf_tensor_name(spec, il);
    const TensorView* whole = nullptr;
    if (Status st = matrix(name, ne[1], ne[0], &whole, spec.presence == Presence::kOptional); !st) {
      std::string rows;
      for (TensorRole p : spec.parts)
        rows += fmt::format("{}{} {}", rows.empty() ? "" : " + ", role_info(p).name, sizes.of(role_info(p).ne[1]));
      return Status::errorf("{} (rows: {})", st.message(), rows);
    }
    if (!whole) return Status::ok();
    const size_t row_bytes = dtype_row_size(whole->type, whole->ne[0]);
    int64_t r0 = 0;
    for (size_t i = 0; i < spec.parts.size(); ++i) {
      const int64_t rows = sizes.of(role_info(spec.parts[i]).ne[1]);
      TensorView v = *whole;
      v.name = fmt::format("{}[{}:{}]", name, r0, r0 + rows);
      v.ne[1] = rows;
      v.data = static_cast<const uint8_t*>(whole->data) + static_cast<size_t>(r0) * row_bytes;
      v.nbytes = static_cast<size_t>(rows) * row_bytes;
      w_->views.push_back(std::move(v));
      parts_out[i] = &w_->views.back();
      r0 += rows;
    }
    return Status::ok();
  }

 private:
  const ModelFile& file_;
  ModelWeights* w_;
  int64_t output_rows_;
};

// Where each role's tensor goes in the structs (exactly one of the two
// pointers is set for a bound role; neither for roles ember does not run).
struct Slot {
  const TensorView** matrix = nullptr;
  const float** vector = nullptr;
};

Slot model_slot(ModelWeights& w, TensorRole r) {
  switch (r) {
    case TensorRole::kTokenEmbd: return {&w.tok_embd, nullptr};
    case TensorRole::kRopeFreqs: return {nullptr, &w.rope_freqs};
    case TensorRole::kRopeFactorsLong: return {nullptr, &w.rope_factors_long};
    case TensorRole::kRopeFactorsShort: return {nullptr, &w.rope_factors_short};
    case TensorRole::kOutputNorm: return {nullptr, &w.output_norm};
    case TensorRole::kOutput: return {&w.output.weight, nullptr};
    default: return {};
  }
}

Slot layer_slot(LayerWeights& l, TensorRole r) {
  switch (r) {
    case TensorRole::kAttnNorm: return {nullptr, &l.attn_norm};
    case TensorRole::kAttnQ: return {&l.q.weight, nullptr};
    case TensorRole::kAttnK: return {&l.k.weight, nullptr};
    case TensorRole::kAttnV: return {&l.v.weight, nullptr};
    case TensorRole::kAttnQBias: return {nullptr, &l.q.bias};
    case TensorRole::kAttnKBias: return {nullptr, &l.k.bias};
    case TensorRole::kAttnVBias: return {nullptr, &l.v.bias};
    case TensorRole::kAttnOutput: return {&l.o.weight, nullptr};
    case TensorRole::kAttnOutputBias: return {nullptr, &l.o.bias};
    case TensorRole::kAttnQNorm: return {nullptr, &l.q_norm};
    case TensorRole::kAttnKNorm: return {nullptr, &l.k_norm};
    case TensorRole::kPostAttnNorm: return {nullptr, &l.post_attn_norm};
    case TensorRole::kFfnNorm: return {nullptr, &l.ffn_norm};
    case TensorRole::kFfnGate: return {&l.gate.weight, nullptr};
    case TensorRole::kFfnUp: return {&l.up.weight, nullptr};
    case TensorRole::kFfnDown: return {&l.down.weight, nullptr};
    case TensorRole::kPostFfnNorm: return {nullptr, &l.post_ffn_norm};
    case TensorRole::kAttnSinks: return {nullptr, &l.attn_sinks};
    default: return {};
  }
}

// Binds every listed tensor of one scope (il < 0: the model-level ones)
// but the FFN tensors of the other kind (dense or MoE) than `ffn`.
template <typename SlotOf>
Status bind_list(Binder& b, std::span<const TensorSpec> list, int il, const TensorSizes& sizes, SlotOf slot_of,
                 FfnKind ffn = FfnKind::kDenseGated) {
  for (const TensorSpec& t : list) {
    if (t.presence == Presence::kUnbound) continue;
    if (is_moe_role(t.role) || (ffn == FfnKind::kMoe && is_dense_ffn_role(t.role))) continue;
    if (!t.parts.empty()) {
      const TensorView* views[4] = {};
      EMBER_CHECK(t.parts.size() <= 4);
      EMBER_RETURN_IF_ERROR(b.bind_fused(t, il, sizes, views));
      for (size_t i = 0; i < t.parts.size(); ++i) {
        const Slot s = slot_of(t.parts[i]);
        EMBER_CHECK_MSG(s.matrix, "a fused tensor's part must be a matrix role with a slot");
        if (views[i]) *s.matrix = views[i];
      }
      continue;
    }
    const Slot s = slot_of(t.role);
    EMBER_CHECK_MSG(s.matrix || s.vector, "a spec lists a bound tensor role that has no slot in ModelWeights");
    EMBER_RETURN_IF_ERROR(b.bind(t, il, sizes, s.matrix, s.vector));
  }
  return Status::ok();
}

// The router, experts and shared expert of MoE layer il.
Status bind_moe(Binder& b, const ArchSpec& spec, const ModelFile& file, const ModelConfig& cfg, int il,
                MoeWeights* m) {
  const LayerConfig& lc = cfg.layers[il];
  const int64_t H = cfg.n_embd, n = lc.n_expert, F = lc.n_ff_exp;
  if (!spec.find(TensorRole::kFfnGateInp))
    return Status::errorf("layer {} has {} experts but architecture {} has no Mixture-of-Experts tensors", il, n,
                          spec.name);
  using R = TensorRole;
  EMBER_RETURN_IF_ERROR(b.matrix(gguf_tensor_name(R::kFfnGateInp, il), n, H, &m->router.weight));
  const TensorView *g3 = nullptr, *u3 = nullptr, *d3 = nullptr, *gu3 = nullptr;
  EMBER_RETURN_IF_ERROR(b.stack(gguf_tensor_name(R::kFfnGateExps, il), n, F, H, &g3));
  EMBER_RETURN_IF_ERROR(b.stack(gguf_tensor_name(R::kFfnUpExps, il), n, F, H, &u3));
  EMBER_RETURN_IF_ERROR(b.stack(gguf_tensor_name(R::kFfnDownExps, il), n, H, F, &d3));
  EMBER_RETURN_IF_ERROR(b.stack(gguf_tensor_name(R::kFfnGateUpExps, il), n, 2 * F, H, &gu3));
  // The experts of one role: slices of its 3-D tensor (`row0`: where the
  // role's rows start in each slice of a fused tensor) or the per-expert
  // matrices, all of one type.
  auto experts = [&](R role, const TensorView* t3, int64_t row0, int64_t rows, int64_t cols,
                     std::vector<Linear>* out) -> Status {
    out->assign(static_cast<size_t>(n), Linear{});
    const bool per_expert = !t3 && file.tensor(gguf_expert_tensor_name(role, il, 0));
    if (!t3 && !per_expert) return Status::errorf("missing tensor '{}'", gguf_tensor_name(role, il));
    for (int64_t e = 0; e < n; ++e) {
      const std::string name = gguf_expert_tensor_name(role, il, static_cast<int>(e));
      if (t3) {
        (*out)[e].weight = b.slice(*t3, e, row0, rows, name);
      } else {
        EMBER_RETURN_IF_ERROR(b.matrix(name, rows, cols, &(*out)[e].weight));
        if ((*out)[e].weight->type != (*out)[0].weight->type)
          return Status::errorf("tensor '{}' has type {}, expert 0 {}: the experts of a layer share one type", name,
                                dtype_name((*out)[e].weight->type), dtype_name((*out)[0].weight->type));
      }
    }
    // A file with more per-expert matrices than the config's experts.
    if (per_expert && file.tensor(gguf_expert_tensor_name(role, il, static_cast<int>(n))))
      return Status::errorf("tensor '{}' is beyond the {} experts of the config",
                            gguf_expert_tensor_name(role, il, static_cast<int>(n)), n);
    return Status::ok();
  };
  // A separate 3-D gate or up tensor wins over the fused one (a quantized
  // one written next to a Hugging Face checkpoint's fused tensor).
  EMBER_RETURN_IF_ERROR(experts(R::kFfnGateExps, g3 ? g3 : gu3, 0, F, H, &m->gate));
  EMBER_RETURN_IF_ERROR(experts(R::kFfnUpExps, u3 ? u3 : gu3, u3 ? 0 : F, F, H, &m->up));
  EMBER_RETURN_IF_ERROR(experts(R::kFfnDownExps, d3, 0, H, F, &m->down));
  for (const auto& [lin, w] : {std::pair{&m->gate, &m->gate_w}, std::pair{&m->up, &m->up_w}, std::pair{&m->down, &m->down_w}})
    for (const Linear& l : *lin) w->push_back(l.weight);
  // The router's and the experts' biases (gpt-oss), where the spec lists them.
  // [width, n] (n = 1: a vector of width).
  auto bias = [&](R role, int64_t width, int64_t n_rows, const float** out) -> Status {
    const TensorSpec* t = spec.find(role);
    if (!t || t->presence == Presence::kUnbound) return Status::ok();
    const std::string name = gguf_tensor_name(*t, il);
    if (const TensorView* v = file.tensor(name); v && n_rows > 1 && (v->n_dims != 2 || v->ne[0] != width || v->ne[1] != n_rows))
      return Status::errorf("tensor '{}' has shape {}, expected [{}, {}] (one bias row per expert)", name,
                            v->shape_string(), width, n_rows);
    return b.vector(name, width * n_rows, out, t->presence != Presence::kRequired);
  };
  EMBER_RETURN_IF_ERROR(bias(R::kFfnGateInpBias, n, 1, &m->router.bias));
  EMBER_RETURN_IF_ERROR(bias(R::kFfnGateExpsBias, F, n, &m->gate_b));
  EMBER_RETURN_IF_ERROR(bias(R::kFfnUpExpsBias, F, n, &m->up_b));
  EMBER_RETURN_IF_ERROR(bias(R::kFfnDownExpsBias, H, n, &m->down_b));
  if (lc.n_ff_shexp > 0) {
    const int64_t S = lc.n_ff_shexp;
    EMBER_RETURN_IF_ERROR(b.matrix(gguf_tensor_name(R::kFfnGateShexp, il), S, H, &m->shared_gate.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(gguf_tensor_name(R::kFfnUpShexp, il), S, H, &m->shared_up.weight));
    EMBER_RETURN_IF_ERROR(b.matrix(gguf_tensor_name(R::kFfnDownShexp, il), H, S, &m->shared_down.weight));
    const TensorSpec* gi = spec.find(R::kFfnGateInpShexp);
    if (gi) {
      const std::string name = gguf_tensor_name(R::kFfnGateInpShexp, il);
      const float* g = nullptr;
      EMBER_RETURN_IF_ERROR(b.vector(name, H, &g, gi->presence != Presence::kRequired));
      if (g) m->shared_gate_inp.weight = b.row_view(g, H, name);
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<ModelWeights>> bind_weights(const ModelFile& file, ModelConfig* cfg) {
  const ArchSpec* spec = find_arch(cfg->arch);
  if (!spec) return unsupported_arch_error(cfg->arch);
  auto w = std::make_unique<ModelWeights>();
  Binder b(file, w.get(), static_cast<int64_t>(cfg->output_tokens.size()));
  // The vocabulary size is the embedding's.
  const TensorView* embd = file.tensor("token_embd.weight");
  if (!embd) return Status::error("missing tensor 'token_embd.weight'");
  if (embd->n_dims != 2 || embd->ne[0] != cfg->n_embd)
    return Status::errorf("tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", embd->shape_string(),
                          cfg->n_embd);
  cfg->n_vocab = static_cast<int>(embd->ne[1]);

  EMBER_RETURN_IF_ERROR(bind_list(b, spec->model_tensors, -1, tensor_sizes(*cfg, -1),
                                  [&](TensorRole r) { return model_slot(*w, r); }));
  if (!w->output.weight && !cfg->output_tokens.empty())
    return Status::error("a trimmed output vocabulary needs its own 'output.weight'");
  if (!w->output.weight) w->output.weight = w->tok_embd;  // tied
  if (!w->rope_factors_long != !w->rope_factors_short)
    return Status::errorf("LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; only {} is there",
                          w->rope_factors_long ? "rope_factors_long.weight" : "rope_factors_short.weight");
  w->layers.resize(cfg->n_layer);
  for (int il = 0; il < cfg->n_layer; ++il) {
    LayerWeights& l = w->layers[il];
    const FfnKind ffn = cfg->layers[il].ffn_kind;
    EMBER_RETURN_IF_ERROR(bind_list(b, spec->block_tensors, il, tensor_sizes(*cfg, il),
                                    [&](TensorRole r) { return layer_slot(l, r); }, ffn));
    if (ffn == FfnKind::kMoe) EMBER_RETURN_IF_ERROR(bind_moe(b, *spec, file, *cfg, il, &l.moe));
  }
  return w;
}

}  // namespace ember
