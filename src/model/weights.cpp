// Weight binding and shape validation, driven by the architecture's tensor
// list (model/archs); see weights.h.
#include "model/weights.h"

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/registry.h"
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
    const KernelSet& k = kernels(t->type);
    const bool interleaved = dtype_row_group(t->type) > 1 && k.vec_dot_rows && k.vec_dot_tile;  // kernels/interleave.h
    if (!interleaved && (!k.vec_dot || !k.dequantize_row))
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

  // One listed tensor into its slot, with the shape its role gives for `sizes`.
  Status bind(const TensorSpec& spec, int il, const TensorSizes& sizes, const TensorView** matrix_slot,
              const float** vector_slot) {
    const RoleInfo& r = role_info(spec.role);
    const std::string name = gguf_tensor_name(spec.role, il);
    const bool optional = spec.presence == Presence::kOptional;
    // A trimmed output vocabulary: the head has a row per kept token.
    const int64_t rows = spec.role == TensorRole::kOutput && output_rows_ > 0 ? output_rows_ : sizes.of(r.ne[1]);
    if (matrix_slot) return matrix(name, rows, sizes.of(r.ne[0]), matrix_slot, optional);
    return vector(name, sizes.of(r.ne[0]), vector_slot, optional);
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
    default: return {};
  }
}

// Binds every listed tensor of one scope (il < 0: the model-level ones).
template <typename SlotOf>
Status bind_list(Binder& b, std::span<const TensorSpec> list, int il, const TensorSizes& sizes, SlotOf slot_of) {
  for (const TensorSpec& t : list) {
    if (t.presence == Presence::kUnbound) continue;
    const Slot s = slot_of(t.role);
    EMBER_CHECK_MSG(s.matrix || s.vector, "a spec lists a bound tensor role that has no slot in ModelWeights");
    EMBER_RETURN_IF_ERROR(b.bind(t, il, sizes, s.matrix, s.vector));
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
  w->layers.resize(cfg->n_layer);
  for (int il = 0; il < cfg->n_layer; ++il) {
    LayerWeights& l = w->layers[il];
    EMBER_RETURN_IF_ERROR(bind_list(b, spec->block_tensors, il, tensor_sizes(*cfg, il),
                                    [&](TensorRole r) { return layer_slot(l, r); }));
  }
  return w;
}

}  // namespace ember
