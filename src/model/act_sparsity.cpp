// Activation sparsity of a model: the thresholds from the metadata, the
// modes, and the column copies of the sparsified linears; see
// model/act_sparsity.h and Model::set_activation_sparsity.
#include "model/act_sparsity.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "model/model.h"

namespace ember {

const char* act_input_name(ActInput i) {
  switch (i) {
    case ActInput::kAttnIn: return "attn_in";
    case ActInput::kAttnOut: return "attn_out";
    case ActInput::kFfnIn: return "ffn_in";
    case ActInput::kFfnDown: return "ffn_down";
  }
  return "?";
}

Result<ActSparsityMode> act_sparsity_mode_from_name(const std::string& s) {
  if (s == "auto") return ActSparsityMode::kAuto;
  if (s == "skip") return ActSparsityMode::kSkip;
  if (s == "dense") return ActSparsityMode::kDense;
  if (s == "off") return ActSparsityMode::kOff;
  return Status::errorf("activation sparsity '{}' is not auto, skip, dense or off", s);
}

Result<std::vector<float>> read_act_thresholds(const Metadata& md, int n_layer) {
  const GgufValue* v = md.find(kActSparsityThresholdsKey);
  if (!v) return std::vector<float>{};
  if (v->type != GgufType::kArray || (v->elem_type != GgufType::kFloat32 && v->elem_type != GgufType::kFloat64))
    return Status::errorf("{}: expected an array of float32, got {}", kActSparsityThresholdsKey,
                          v->type == GgufType::kArray ? std::string("an array of ") + gguf_type_name(v->elem_type)
                                                      : std::string(gguf_type_name(v->type)));
  const size_t want = static_cast<size_t>(n_layer) * kActInputs;
  if (v->nums.size() != want)
    return Status::errorf("{}: {} values for {} blocks (expected {} per block: attn_in, attn_out, ffn_in, ffn_down)",
                          kActSparsityThresholdsKey, v->nums.size(), n_layer, kActInputs);
  std::vector<float> t(want);
  for (size_t i = 0; i < want; ++i) {
    const double x = v->nums[i];
    if (!std::isfinite(x) || x < 0)
      return Status::errorf("{}: value {} (block {}, {}) is {}; thresholds are finite and >= 0",
                            kActSparsityThresholdsKey, i, i / kActInputs,
                            act_input_name(static_cast<ActInput>(i % kActInputs)), x);
    t[i] = static_cast<float>(x);
  }
  return t;
}

Status Model::load_activation_sparsity() {
  auto t = read_act_thresholds(file_->metadata, shard_.n_layer_total ? shard_.n_layer_total : cfg_.n_layer);
  if (!t) return t.status();
  act_thresholds_.clear();
  if (t->empty()) return Status::ok();
  // A pipeline stage holds blocks [layer_begin, ...) renamed from 0.
  act_thresholds_.assign(t->begin() + static_cast<size_t>(shard_.layer_begin) * kActInputs,
                         t->begin() + static_cast<size_t>(shard_.layer_begin + cfg_.n_layer) * kActInputs);
  set_activation_sparsity(ActSparsityMode::kAuto);
  return Status::ok();
}

Status Model::set_activation_thresholds(std::vector<float> t) {
  if (!t.empty() && t.size() != static_cast<size_t>(cfg_.n_layer) * kActInputs)
    return Status::errorf("{} activation thresholds for {} blocks (expected {})", t.size(), cfg_.n_layer,
                          static_cast<size_t>(cfg_.n_layer) * kActInputs);
  for (size_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t[i]) || t[i] < 0)
      return Status::errorf("activation threshold {} (block {}, {}) is {}; thresholds are finite and >= 0", i,
                            i / kActInputs, act_input_name(static_cast<ActInput>(i % kActInputs)), t[i]);
  act_thresholds_ = std::move(t);
  // As set_activation_sparsity applies them, but the column copies stay
  // (it drops them in kDense); empty or kOff: every linear dense.
  const bool on = !act_thresholds_.empty() && act_mode_ != ActSparsityMode::kOff;
  for (int il = 0; il < cfg_.n_layer; ++il) {
    LayerWeights& l = weights_->layers[il];
    auto th = [&](ActInput i) {
      return on ? act_thresholds_[static_cast<size_t>(il) * kActInputs + static_cast<int>(i)] : 0.0f;
    };
    l.q.act_threshold = l.k.act_threshold = l.v.act_threshold = th(ActInput::kAttnIn);
    l.o.act_threshold = th(ActInput::kAttnOut);
    if (cfg_.layers[il].ffn_kind == FfnKind::kDenseGated) {
      l.gate.act_threshold = l.up.act_threshold = th(ActInput::kFfnIn);
      l.down.act_threshold = th(ActInput::kFfnDown);
    }
  }
  return Status::ok();
}

void Model::set_activation_sparsity(ActSparsityMode mode) {
  act_mode_ = mode;
  if (act_thresholds_.empty()) return;
  const ActSkip skip = mode == ActSparsityMode::kSkip    ? ActSkip::kOn
                       : mode == ActSparsityMode::kAuto ? ActSkip::kAuto
                                                        : ActSkip::kOff;
  for (int il = 0; il < cfg_.n_layer; ++il) {
    LayerWeights& l = weights_->layers[il];
    const float* t = act_thresholds_.data() + static_cast<size_t>(il) * kActInputs;
    auto set = [&](Linear& lin, ActInput i) {
      lin.act_threshold = mode == ActSparsityMode::kOff ? 0.0f : t[static_cast<int>(i)];
      lin.act_skip = skip;
      if (mode == ActSparsityMode::kOff || mode == ActSparsityMode::kDense) lin.cols.reset();
    };
    set(l.q, ActInput::kAttnIn), set(l.k, ActInput::kAttnIn), set(l.v, ActInput::kAttnIn);
    set(l.o, ActInput::kAttnOut);
    if (cfg_.layers[il].ffn_kind == FfnKind::kDenseGated) {
      set(l.gate, ActInput::kFfnIn), set(l.up, ActInput::kFfnIn);
      set(l.down, ActInput::kFfnDown);
    }
  }
}

size_t Model::activation_column_bytes() const {
  size_t bytes = 0;
  for (const LayerWeights& l : weights_->layers)
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (lin->cols) bytes += lin->cols->bytes();
  return bytes;
}

size_t Model::build_activation_columns(int threads) {
  if (act_thresholds_.empty() || act_mode_ == ActSparsityMode::kOff || act_mode_ == ActSparsityMode::kDense) return 0;
  std::vector<Linear*> todo;
  for (int il = 0; il < cfg_.n_layer; ++il) {
    LayerWeights& l = weights_->layers[il];
    for (Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (lin->weight && lin->act_threshold > 0 && !lin->cols) {
        const DType base = dtype_layout_base(lin->weight->type);
        // auto builds copies only where its rule may take them (kernels/act_sparse.h).
        if (col_supported(base) && lin->n_in() % col_block_inputs(base) == 0 && lin->n_in() <= 65536 &&
            (act_mode_ == ActSparsityMode::kSkip || col_auto_pays(base)))
          todo.push_back(lin);
      }
  }
  std::atomic<size_t> next{0}, bytes{0};
  auto work = [&]() {
    for (size_t i; (i = next++) < todo.size();) {
      auto c = make_column_weights(*todo[i]->weight);
      if (!c) continue;  // checked above: cannot fail but for memory; the dense path stays
      bytes += c->bytes();
      todo[i]->cols = std::make_shared<const ColumnWeights>(std::move(c.value()));
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < std::max(1, threads); ++k) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  return bytes;
}

}  // namespace ember
