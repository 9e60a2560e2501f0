// Model loading: config from metadata, weights bound and checked, RoPE
// frequencies per layer; see model.h. The forward pass is forward.cpp and
// layers/.
#include "model/model.h"


#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "core/mmap_file.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/registry.h"
#include "model/archs/tensors.h"

namespace ember {

namespace {

// What the forward pass runs: every layer's sizes consistent with its
// weights, GQA head counts, its norms present, plain linears or the shards
// `shard` says this process holds (their local shapes are the config's).
Status check_forward_support(const ModelConfig& c, const ModelWeights& w, const ModelShard& shard) {
  if (static_cast<int>(c.layers.size()) != c.n_layer || static_cast<int>(w.layers.size()) != c.n_layer)
    return Status::errorf("config has {} layer entries and the weights {}, expected {}", c.layers.size(),
                          w.layers.size(), c.n_layer);
  const bool sharded = shard.tensor_parallel();
  // `what`: "layer 3 attn_q", "output".
  auto check_linear = [&](const Linear& l, const std::string& what, int64_t n_out, int64_t n_in) -> Status {
    if (!l.weight) return Status::errorf("{}: no weight", what);
    if (!l.is_plain() && (!sharded || l.shard.n_ranks != shard.tp_size || l.shard.rank != shard.tp_rank))
      return Status::errorf("{}: a tensor-parallel shard ({} of {}) in a model that holds {}", what, l.shard.rank,
                            l.shard.n_ranks, shard.describe());
    if (l.n_out() != n_out || l.n_in() != n_in)
      return Status::errorf("{}: weight is [{}, {}] (out, in), the config needs [{}, {}]", what, l.n_out(), l.n_in(),
                            n_out, n_in);
    return Status::ok();
  };
  const int64_t E = c.n_embd;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerConfig& lc = c.layers[il];
    const LayerWeights& l = w.layers[il];
    if (lc.n_head <= 0 || lc.n_head_kv <= 0 || lc.n_head % lc.n_head_kv != 0 ||
        (lc.ffn_kind == FfnKind::kDenseGated && lc.n_ff <= 0))
      return Status::errorf("layer {}: n_head {}, n_head_kv {}, n_ff {}: need positive sizes and n_head a multiple "
                            "of n_head_kv",
                            il, lc.n_head, lc.n_head_kv, lc.n_ff);
    if ((c.attn_pre_norm && !l.attn_norm) || (c.ffn_pre_norm && !l.ffn_norm) ||
        (c.qk_norm && (!l.q_norm || !l.k_norm)))
      return Status::errorf("layer {}: missing norm weights", il);
    const struct {
      const Linear& lin;
      LinearRole role;
      int64_t n_out, n_in;
    } linears[] = {
        {l.q, LinearRole::kQ, lc.n_q_dim(c.head_dim), E},
        {l.k, LinearRole::kK, lc.n_kv_dim(c.head_dim), E},
        {l.v, LinearRole::kV, lc.n_v_dim(c.head_dim_v), E},
        {l.o, LinearRole::kO, E, static_cast<int64_t>(lc.n_head) * c.head_dim_v},
    };
    for (const auto& x : linears)
      EMBER_RETURN_IF_ERROR(check_linear(x.lin, fmt::format("layer {} {}", il, linear_role_name(x.role)), x.n_out,
                                         x.n_in));
    if (lc.ffn_kind == FfnKind::kDenseGated) {
      EMBER_RETURN_IF_ERROR(check_linear(l.gate, fmt::format("layer {} ffn_gate", il), lc.n_ff, E));
      EMBER_RETURN_IF_ERROR(check_linear(l.up, fmt::format("layer {} ffn_up", il), lc.n_ff, E));
      EMBER_RETURN_IF_ERROR(check_linear(l.down, fmt::format("layer {} ffn_down", il), E, lc.n_ff));
      continue;
    }
    // Mixture of experts.
    const MoeWeights& m = l.moe;
    if (lc.n_expert < 1 || lc.n_expert_used < 1 || lc.n_expert_used > lc.n_expert ||
        lc.n_expert_used > kMaxExpertsUsed || lc.n_ff_exp <= 0 || lc.n_ff_shexp < 0)
      return Status::errorf("layer {}: {} experts, {} used, width {}: need 1 <= used <= experts (and <= {}), a "
                            "positive width",
                            il, lc.n_expert, lc.n_expert_used, lc.n_ff_exp, kMaxExpertsUsed);
    if (c.rotation.any())
      return Status::errorf("layer {}: QuaRot rotations are not supported in Mixture-of-Experts layers", il);
    EMBER_RETURN_IF_ERROR(check_linear(m.router, fmt::format("layer {} ffn_gate_inp", il), lc.n_expert, E));
    const size_t n_exp = static_cast<size_t>(lc.n_expert);
    if (m.gate.size() != n_exp || m.up.size() != n_exp || m.down.size() != n_exp || m.gate_w.size() != n_exp ||
        m.up_w.size() != n_exp || m.down_w.size() != n_exp)
      return Status::errorf("layer {}: {} experts in the config, the weights have {}", il, lc.n_expert, m.gate.size());
    for (size_t e = 0; e < n_exp; ++e) {
      EMBER_RETURN_IF_ERROR(check_linear(m.gate[e], fmt::format("layer {} expert {} ffn_gate", il, e), lc.n_ff_exp, E));
      EMBER_RETURN_IF_ERROR(check_linear(m.up[e], fmt::format("layer {} expert {} ffn_up", il, e), lc.n_ff_exp, E));
      EMBER_RETURN_IF_ERROR(check_linear(m.down[e], fmt::format("layer {} expert {} ffn_down", il, e), E, lc.n_ff_exp));
      if (m.gate[e].bias || m.up[e].bias || m.down[e].bias)
        return Status::errorf("layer {} expert {}: expert biases are not supported", il, e);
      for (const auto& v : {std::pair{&m.gate, &m.gate_w}, std::pair{&m.up, &m.up_w}, std::pair{&m.down, &m.down_w}})
        if ((*v.first)[e].weight != (*v.second)[e] || (*v.first)[e].weight->type != (*v.first)[0].weight->type)
          return Status::errorf("layer {} expert {}: the experts of a matrix must share one type", il, e);
    }
    if (lc.n_ff_shexp > 0) {
      EMBER_RETURN_IF_ERROR(check_linear(m.shared_gate, fmt::format("layer {} ffn_gate_shexp", il), lc.n_ff_shexp, E));
      EMBER_RETURN_IF_ERROR(check_linear(m.shared_up, fmt::format("layer {} ffn_up_shexp", il), lc.n_ff_shexp, E));
      EMBER_RETURN_IF_ERROR(check_linear(m.shared_down, fmt::format("layer {} ffn_down_shexp", il), E, lc.n_ff_shexp));
      if (m.shared_gate_inp)
        EMBER_RETURN_IF_ERROR(check_linear(m.shared_gate_inp, fmt::format("layer {} ffn_gate_inp_shexp", il), 1, E));
    }
  }
  if (!w.tok_embd || !w.output_norm) return Status::error("missing token embeddings or output norm");
  if (!shard.has_head()) return w.output ? Status::error("a pipeline stage without the head holds an output matrix")
                                         : Status::ok();
  for (size_t i = 0; i < c.head_tokens.size(); ++i)
    if (c.head_tokens[i] < 0 || c.head_tokens[i] >= c.n_vocab || (i > 0 && c.head_tokens[i] <= c.head_tokens[i - 1]))
      return Status::errorf("truncated output head: token {} at row {} is out of order or out of range [0, {})",
                            c.head_tokens[i], i, c.n_vocab);
  for (size_t i = 0; i < c.output_tokens.size(); ++i)
    if (c.output_tokens[i] >= c.n_vocab)
      return Status::errorf("trimmed output vocabulary: token {} is outside the vocabulary of {}", c.output_tokens[i],
                            c.n_vocab);
  if (!c.output_tokens.empty() && !c.head_tokens.empty())
    return Status::error("a truncated draft head of a trimmed output vocabulary is not supported");
  if (!c.output_tokens.empty() && sharded)
    return Status::error("a trimmed output vocabulary under tensor parallelism is not supported");
  const int64_t head_rows = sharded                     ? shard.vocab_end - shard.vocab_begin
                            : c.output_tokens.empty() ? c.n_logits()
                                                      : static_cast<int64_t>(c.output_tokens.size());
  EMBER_RETURN_IF_ERROR(check_linear(w.output, linear_role_name(LinearRole::kOutput), head_rows, E));
  return Status::ok();
}

}  // namespace

// Every matrix of a block; with_routers false: not the MoE routers (the
// router and the shared expert's gate keep full-precision activations).
static void for_each_block_linear(LayerWeights& l, const std::function<void(Linear&)>& f, bool with_routers = true) {
  for (Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
    if (lin->weight) f(*lin);
  MoeWeights& m = l.moe;
  for (Linear* lin : {&m.shared_gate, &m.shared_up, &m.shared_down})
    if (lin->weight) f(*lin);
  if (with_routers)
    for (Linear* lin : {&m.router, &m.shared_gate_inp})
      if (lin->weight) f(*lin);
  for (std::vector<Linear>* v : {&m.gate, &m.up, &m.down})
    for (Linear& lin : *v) f(lin);
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelShard& shard) {
  auto file = open_model_file(path);
  if (!file) return file.status();
  auto m = from_file(std::move(file.value()), shard);
  if (!m) return m.status().with_context(path);
  return m;
}

Result<std::unique_ptr<Model>> Model::from_file(std::unique_ptr<ModelFile> file, const ModelShard& shard) {
  auto cfg = config_from_metadata(file->metadata);
  if (!cfg) return cfg.status();
  ModelShard sh = shard;
  sh.n_layer_total = cfg->n_layer;
  if (sh.layer_end < 0) sh.layer_end = cfg->n_layer;
  const bool sharded = !sh.whole();
  if (sharded) EMBER_RETURN_IF_ERROR(shard_model_file(file.get(), &cfg.value(), &sh).with_context(sh.describe()));
  auto w = bind_weights(*file, &cfg.value());
  if (!w) return w.status();
  if (sharded) {
    ModelWeights& mw = *w.value();
    cfg->n_vocab = sh.n_vocab_total;  // the binder read the shard's rows
    const LinearShard rows{LinearShard::Split::kRows, sh.tp_rank, sh.tp_size};
    const LinearShard cols{LinearShard::Split::kCols, sh.tp_rank, sh.tp_size};
    if (sh.tensor_parallel()) {
      for (LayerWeights& l : mw.layers) {
        for (Linear* lin : {&l.q, &l.k, &l.v, &l.gate, &l.up}) lin->shard = rows;
        for (Linear* lin : {&l.o, &l.down}) {
          lin->shard = cols;
          if (sh.tp_rank != 0) lin->bias = nullptr;  // added once, by rank 0, before the all-reduce
        }
        // Experts and the shared expert: split by their FFN width, as the
        // dense FFN; the router (and the shared expert's gate) replicated.
        MoeWeights& me = l.moe;
        for (Linear* lin : {&me.shared_gate, &me.shared_up})
          if (lin->weight) lin->shard = rows;
        if (me.shared_down.weight) me.shared_down.shard = cols;
        for (Linear& e : me.gate) e.shard = rows;
        for (Linear& e : me.up) e.shard = rows;
        for (Linear& e : me.down) e.shard = cols;
        if (sh.tp_rank != 0) me.down_b = nullptr;
      }
      mw.output.shard = rows;
    }
    if (!sh.has_head()) mw.output = Linear{};
  }
  return from_parts(std::move(cfg.value()), std::move(w.value()), std::move(file), sh);
}

Result<std::unique_ptr<Model>> Model::from_parts(ModelConfig cfg, std::unique_ptr<ModelWeights> weights,
                                                 std::unique_ptr<ModelFile> file, const ModelShard& shard) {
  if (!weights || !file) return Status::error("model: missing weights or file");
  ModelShard sh = shard;
  if (sh.n_layer_total == 0) sh.n_layer_total = cfg.n_layer;
  if (sh.layer_end < 0) sh.layer_end = sh.n_layer_total;
  EMBER_RETURN_IF_ERROR(check_forward_support(cfg, *weights, sh));
  auto m = std::unique_ptr<Model>(new Model());
  m->cfg_ = std::move(cfg);
  m->shard_ = sh;
  m->weights_ = std::move(weights);
  m->file_ = std::move(file);

  EMBER_RETURN_IF_ERROR(m->set_activation_bits(m->cfg_.act_bits));
  EMBER_RETURN_IF_ERROR(m->load_activation_sparsity());
  const ModelConfig& c = m->cfg_;
  const ModelWeights& w = *m->weights_;
  if (c.attn_temp_scale > 0 && c.rope_orig_ctx <= 0)
    return Status::error("the attention temperature needs the original context length (rope.scaling.original_context_length)");
  if (w.rope_factors_long && w.rope_freqs)
    return Status::error("the model has both rope_freqs.weight and LongRoPE factors; only one set of frequency factors can apply");
  if (c.rope_longrope && !w.rope_factors_long)
    return Status::errorf("the {} file declares LongRoPE scaling but has no rope_factors_long.weight / "
                          "rope_factors_short.weight", c.arch);
  if (w.rope_factors_long && c.rope_orig_ctx <= 0)
    return Status::error("LongRoPE factors need the original context length (rope.scaling.original_context_length)");
  m->rope_long_ = w.rope_factors_long && c.n_ctx_train > c.rope_orig_ctx;
  m->compute_rope_frequencies();
  return m;
}

void Model::set_context_length(int64_t n_ctx) { use_rope_long_factors(n_ctx > cfg_.rope_orig_ctx); }

void Model::use_rope_long_factors(bool long_factors) {
  long_factors = long_factors && weights_->rope_factors_long;
  if (long_factors == rope_long_) return;
  rope_long_ = long_factors;
  compute_rope_frequencies();
}

// Per layer: theta_i = base^(-2i / n_rot) / factor_i (rope_freqs or the
// LongRoPE set in use), interpolated by rope_freq_scale and, with YaRN,
// blended back towards theta_i over the ramp between the dimensions that
// turn beta_fast and beta_slow times in the original context (llama.cpp's
// ggml_rope_yarn_corr_dims and rope_yarn; transformers' _compute_yarn_parameters).
void Model::compute_rope_frequencies() {
  const ModelConfig& c = cfg_;
  const ModelWeights& w = *weights_;
  const float* factors = w.rope_freqs ? w.rope_freqs : rope_long_ ? w.rope_factors_long : w.rope_factors_short;
  const int half = c.n_rot / 2;
  inv_freq_.clear();
  rope_table_.clear();
  n_rope_tables_ = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerConfig& l = c.layers[il];
    double lo = 0, hi = 0;
    if (l.rope_ext_factor > 0) {
      const double kPi = 3.14159265358979323846;
      auto corr_dim = [&](double rotations) {
        return c.n_rot * std::log(c.rope_orig_ctx / (rotations * 2 * kPi)) / (2 * std::log(static_cast<double>(l.rope_base)));
      };
      lo = corr_dim(c.yarn_beta_fast), hi = corr_dim(c.yarn_beta_slow);
      if (c.yarn_truncate) lo = std::floor(lo), hi = std::ceil(hi);
      lo = std::max(0.0, lo);
      hi = std::min(static_cast<double>(c.n_rot - 1), hi);
    }
    std::vector<float> f(half);
    for (int i = 0; i < half; ++i) {
      double extrap = std::pow(static_cast<double>(l.rope_base), -2.0 * i / c.n_rot);
      if (l.use_rope_freq_factors && factors) extrap /= factors[i];
      double inv = extrap * l.rope_freq_scale;
      if (l.rope_ext_factor > 0) {
        const double y = (i - lo) / std::max(0.001, hi - lo);
        const double ramp = (1 - std::min(1.0, std::max(0.0, y))) * l.rope_ext_factor;
        inv = inv * (1 - ramp) + extrap * ramp;
      }
      f[i] = static_cast<float>(inv);
    }
    int table = n_rope_tables_;
    for (int j = 0; j < il; ++j)
      if (inv_freq_[j] == f && c.layers[j].rope_attn_factor == l.rope_attn_factor) table = rope_table_[j];
    if (table == n_rope_tables_) ++n_rope_tables_;
    rope_table_.push_back(table);
    inv_freq_.push_back(std::move(f));
  }
}

Status Model::set_activation_bits(int bits) {
  if (bits != 4 && bits != 8) return Status::errorf("activation bits must be 4 or 8, not {}", bits);
  for (int il = 0; il < cfg_.n_layer; ++il) {
    Status st;
    for_each_block_linear(
        weights_->layers[il],
        [&](Linear& lin) {
          const DType act = vec_dot_type(lin.weight->type);
          if (st && bits == 4 && !cpu_backend_supports(lin.weight->type, WeightOp::kMatmulAct4))
            st = Status::errorf("4-bit activations need weights that multiply Q8_0 activations (Q4_0, Q5_0, Q8_0); "
                                "layer {} has a {} matrix (activations {})",
                                il, dtype_name(lin.weight->type), dtype_name(act));
        },
        false);
    EMBER_RETURN_IF_ERROR(st);
  }
  for (LayerWeights& l : weights_->layers)
    for_each_block_linear(l, [&](Linear& lin) { lin.act_bits = bits == 4 ? 4 : 0; }, false);
  cfg_.act_bits = bits;
  return Status::ok();
}

Status Model::set_moe_routing(int top_k, const MoeSharing& sharing) {
  if (top_k < 0) return Status::errorf("the experts per token must be >= 1, not {}", top_k);
  if (!(sharing.fraction >= 0.f && sharing.fraction <= 1.f))
    return Status::errorf("the expert-sharing fraction must be in (0, 1], not {}", sharing.fraction);
  if (!cfg_.has_moe()) {
    if (top_k > 0 || sharing.on())
      return Status::error("the model has no Mixture-of-Experts layers (no experts to route)");
    return Status::ok();
  }
  int min_expert = kMaxExpertsUsed;
  for (const LayerConfig& l : cfg_.layers)
    if (l.n_expert > 0) min_expert = std::min(min_expert, l.n_expert);
  if (top_k > min_expert)
    return Status::errorf("the experts per token must be in [1, {}] for this model (its layers have {} experts{}), "
                          "not {}",
                          min_expert, min_expert, min_expert == kMaxExpertsUsed ? " or more" : "", top_k);
  const int k = top_k > 0 ? top_k : cfg_.max_n_expert_used();
  if (sharing.on() && (sharing.keep < 1 || sharing.keep > k))
    return Status::errorf("the experts each token keeps under expert sharing must be in [1, {}] (its experts per "
                          "token), not {}",
                          k, sharing.keep);
  if (top_k > 0)
    for (LayerConfig& l : cfg_.layers)
      if (l.n_expert > 0) l.n_expert_used = top_k;
  cfg_.moe_sharing = sharing;
  return Status::ok();
}

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& [name, t] : file_->tensors) n += t.nelements();
  return n;
}

Result<int> Model::prepare_weights(Backend& backend) {
  std::set<const TensorView*> mats;
  for (LayerWeights& l : weights_->layers) for_each_block_linear(l, [&](Linear& lin) { mats.insert(lin.weight); });
  if (weights_->output.weight) mats.insert(weights_->output.weight);
  std::vector<WeightToPrepare> todo;
  for (auto& [name, t] : file_->tensors)
    if (mats.count(&t) && t.n_dims == 2) todo.push_back({&t, {}});
  // Experts: a 3-D tensor goes with every view of it (each expert's 2-D
  // slice, ModelWeights::views), which move with it. Row views of fused
  // matrices (attn_qkv) go each on its own.
  std::map<TensorView*, std::vector<TensorView*>> slices;
  for (TensorView& v : weights_->views) {
    if (!mats.count(&v)) continue;
    bool sliced = false;
    for (auto& [name, t] : file_->tensors) {
      const auto* b = static_cast<const uint8_t*>(t.data);
      const auto* p = static_cast<const uint8_t*>(v.data);
      if (t.n_dims == 3 && p >= b && p < b + t.nbytes) slices[&t].push_back(&v), sliced = true;
    }
    if (!sliced) todo.push_back({&v, {}});
  }
  for (auto& [t, views] : slices) todo.push_back({t, views});
  // Source bytes the backend no longer reads leave the resident set when
  // they lie in the mapped file, so a prepared model does not hold its
  // weights twice.
  const auto files = file_mappings();
  for (WeightToPrepare& w : todo) w.mapped = in_file_mapping(w.tensor->data, w.tensor->nbytes, files);
  std::vector<std::shared_ptr<void>> owners;
  auto n = backend.prepare_weights(todo.data(), static_cast<int64_t>(todo.size()), &owners,
                                   [&](const void* p, size_t bytes) { release_file_pages(p, bytes, files); });
  if (!n) return n.status().with_context(fmt::format("preparing the weights for the {} backend", backend.name()));
  for (std::shared_ptr<void>& o : owners) file_->owners.push_back(std::move(o));
  return n;
}

int Model::interleave_weights(int threads) {
  ThreadPool pool(std::max(1, threads));
  auto n = prepare_weights(*make_cpu_backend(pool));
  return n ? *n : 0;
}

std::vector<const TensorView*> Model::backend_weights() const {
  std::vector<const TensorView*> out;
  std::set<const TensorView*> seen;
  auto add = [&](const TensorView* t) {
    if (t && seen.insert(t).second) out.push_back(t);
  };
  for (LayerWeights& l : weights_->layers) for_each_block_linear(l, [&](Linear& lin) { add(lin.weight); });
  add(weights_->output.weight);
  add(weights_->tok_embd);
  return out;
}

Status Model::check_backend(const Backend& backend) const {
  auto check = [&](const TensorView* t, WeightOp op, const char* what) -> Status {
    if (!t || backend.supports(t->type, op)) return Status::ok();
    return Status::errorf("the {} backend does not run {} with {} weights ('{}')", backend.name(), what,
                          dtype_name(t->type), t->name);
  };
  auto check_linear = [&](const Linear& lin) {
    return lin.act_bits == 4 ? check(lin.weight, WeightOp::kMatmulAct4, "matmul with 4-bit activations")
                             : check(lin.weight, WeightOp::kMatmul, "matmul");
  };
  Status st;
  for (LayerWeights& l : weights_->layers) {
    for_each_block_linear(l, [&](Linear& lin) {
      if (st) st = check_linear(lin);
    });
    for (const TensorView* e : l.moe.gate_w)
      if (st) st = check(e, WeightOp::kExperts, "mixture-of-experts layers");
  }
  EMBER_RETURN_IF_ERROR(st);
  EMBER_RETURN_IF_ERROR(check_linear(weights_->output));
  return check(weights_->tok_embd, WeightOp::kEmbed, "the embedding");
}

Model::DecodeReads Model::decode_reads() const {
  DecodeReads r;
  const bool tied = weights_->output.weight == weights_->tok_embd;
  for (const auto& [name, t] : file_->tensors) {
    int layer = -1, expert = -1;
    TensorRole role = role_from_gguf_expert_name(name, &layer, &expert);
    if (role == TensorRole::kUnknown) role = role_from_gguf_name(name, &layer);
    double share = 1;
    if (role != TensorRole::kUnknown && role_info(role).kind == TensorKind::kExperts && layer >= 0 &&
        layer < cfg_.n_layer && cfg_.layers[layer].n_expert > 0) {
      share = static_cast<double>(cfg_.layers[layer].n_expert_used) / cfg_.layers[layer].n_expert;
    } else if (&t == weights_->tok_embd && !tied) {
      r.params += static_cast<double>(t.nelements());
      r.bytes += static_cast<double>(t.nbytes) / static_cast<double>(t.nrows());
      continue;
    }
    r.params += share * static_cast<double>(t.nelements());
    r.bytes += share * static_cast<double>(t.nbytes);
  }
  return r;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : file_->tensors) n += t.nbytes;
  return n;
}

}  // namespace ember
