// Activation-sparsity thresholds from calibration text (uniform and greedy
// allocations); see act_sparsity.h.
#include "transform/act_sparsity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "model/act_sparsity.h"
#include "model/config.h"
#include "transform/layerwise.h"

namespace ember {

Result<ActAllocation> act_allocation_from_name(const std::string& s) {
  if (s == "uniform") return ActAllocation::kUniform;
  if (s == "greedy") return ActAllocation::kGreedy;
  return Status::errorf("unknown activation-sparsity allocation '{}' (uniform, greedy)", s);
}

const char* act_allocation_name(ActAllocation a) { return a == ActAllocation::kGreedy ? "greedy" : "uniform"; }

namespace {

// Parameters of block l's matrices per input (ActInput order), from the file.
void block_params(const ModelFile& f, int l, double* p) {
  auto n = [&](const char* what) {
    const TensorView* t = f.tensor(fmt::format("blk.{}.{}.weight", l, what));
    return t ? static_cast<double>(t->nelements()) : 0.0;
  };
  p[0] = n("attn_q") + n("attn_k") + n("attn_v") + n("attn_qkv");
  p[1] = n("attn_output");
  p[2] = n("ffn_gate") + n("ffn_up");
  p[3] = n("ffn_down");
}

// Collects |x| of the four inputs of the block being observed and turns
// them into thresholds after its pass (greedy: after its refine()).
class ThresholdCollector : public LayerwiseCallback, public ForwardObserver {
 public:
  ThresholdCollector(const ActSparsityOptions& o, const ModelFile& src, int n_layer, ActSparsityReport* rep)
      : o_(o), rep_(rep) {
    const size_t n = static_cast<size_t>(n_layer) * kActInputs;
    rep_->thresholds.assign(n, 0.0f);
    rep_->zeroed.assign(n, 0.0);
    rep_->level.assign(n, 0.0);
    rep_->params.assign(n, 0.0);
    rep_->step.assign(n, 0.0);
    rep_->steps.clear();
    for (int l = 0; l < n_layer; ++l) block_params(src, l, rep_->params.data() + static_cast<size_t>(l) * kActInputs);
  }

  ForwardObserver* observer(int layer) override {
    layer_ = layer;
    for (auto& v : abs_) v.clear();
    return this;
  }
  bool preserves_function() const override { return true; }
  bool refines() const override { return o_.allocation == ActAllocation::kGreedy; }

  void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                       int64_t n_in) override {
    if (layer != layer_) return;
    int i = -1;
    switch (role) {  // Q/K/V and gate/up share their input: counted once
      case LinearRole::kQ: i = static_cast<int>(ActInput::kAttnIn); break;
      case LinearRole::kO: i = static_cast<int>(ActInput::kAttnOut); break;
      case LinearRole::kGate: i = static_cast<int>(ActInput::kFfnIn); break;
      case LinearRole::kDown: i = static_cast<int>(ActInput::kFfnDown); break;
      default: return;
    }
    std::vector<float>& v = abs_[i];
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t c = 0; c < n_in; ++c) v.push_back(std::fabs(x[r * ld + c]));
  }

  Status refine(int layer, LayerwiseBlockRunner& runner) override;

  Status transform(int layer, ModelFile*) override {
    double wsum = 0, psum = 0;
    for (int i = 0; i < kActInputs; ++i) {
      std::vector<float>& v = abs_[i];
      const size_t at = static_cast<size_t>(layer) * kActInputs + i;
      if (o_.allocation == ActAllocation::kUniform) {
        const auto k = static_cast<int64_t>(std::floor(o_.sparsity * static_cast<double>(v.size())));
        if (k > 0) {  // else no entries (a MoE layer's FFN), or too few
          std::nth_element(v.begin(), v.begin() + (k - 1), v.end());
          const float t = v[static_cast<size_t>(k - 1)];
          const auto zeroed = std::count_if(v.begin(), v.end(), [t](float a) { return a <= t; });
          rep_->thresholds[at] = t;
          rep_->zeroed[at] = static_cast<double>(zeroed) / static_cast<double>(v.size());
          rep_->level[at] = o_.sparsity;
        }
      } else {  // refine() sorted v and chose the level
        rep_->thresholds[at] = threshold_at(i, rep_->level[at]);
        if (!v.empty())
          rep_->zeroed[at] = static_cast<double>(std::upper_bound(v.begin(), v.end(), rep_->thresholds[at]) -
                                                 v.begin()) / static_cast<double>(v.size());
      }
      if (!v.empty()) {
        wsum += rep_->params[at] * rep_->zeroed[at];
        psum += rep_->params[at];
      }
      v.clear();
      v.shrink_to_fit();
    }
    weighted_sum_ += psum > 0 ? wsum / psum : 0.0;
    ++blocks_;
    rep_->weighted_zeroed = weighted_sum_ / blocks_;
    return Status::ok();
  }

 private:
  // The uniform rule's quantile of input i's sorted |x| at level s (0: none).
  float threshold_at(int i, double s) const {
    const std::vector<float>& v = abs_[i];
    const auto k = static_cast<int64_t>(std::floor(s * static_cast<double>(v.size())));
    return k > 0 ? v[static_cast<size_t>(k - 1)] : 0.0f;
  }

  const ActSparsityOptions& o_;
  ActSparsityReport* rep_;
  int layer_ = -1;
  std::vector<float> abs_[kActInputs];
  double weighted_sum_ = 0;
  int blocks_ = 0;
};

// TEAL's greedy search for block `layer` (act_sparsity.h).
Status ThresholdCollector::refine(int layer, LayerwiseBlockRunner& runner) {
  const size_t base = static_cast<size_t>(layer) * kActInputs;
  double* p = rep_->params.data() + base;
  bool part[kActInputs];
  double P = 0;
  int n = 0;
  for (int i = 0; i < kActInputs; ++i) {
    std::sort(abs_[i].begin(), abs_[i].end());
    part[i] = !abs_[i].empty() && p[i] > 0;
    if (part[i]) P += p[i], ++n;
  }
  if (n == 0) return Status::ok();
  int count[kActInputs] = {0, 0, 0, 0};  // steps taken: s_i = count_i * step_i (no drift)
  for (int i = 0; i < kActInputs; ++i) rep_->step[base + i] = part[i] ? o_.base_step * (P / n) / p[i] : 0.0;
  auto level = [&](int i, int extra) { return (count[i] + extra) * rep_->step[base + i]; };

  // The dense block outputs, then the error of a trial.
  const int64_t W = runner.window_tokens(), E = runner.n_embd();
  std::vector<std::vector<float>> dense(static_cast<size_t>(runner.windows()));
  const float zero[kActInputs] = {0, 0, 0, 0};
  EMBER_RETURN_IF_ERROR(runner.run(zero, [&](int64_t c, const float* y) {
    dense[c].assign(y, y + W * runner.n_embd());
  }));
  auto error = [&](const float* t, double* err) -> Status {
    double sum = 0;
    EMBER_RETURN_IF_ERROR(runner.run(t, [&](int64_t c, const float* y) {
      const std::vector<float>& d = dense[c];
      for (int64_t r = 0; r < W; ++r) {
        double sq = 0;
        for (int64_t e = 0; e < E; ++e) {
          const double diff = static_cast<double>(y[r * E + e]) - d[r * E + e];
          sq += diff * diff;
        }
        sum += std::sqrt(sq);
      }
    }));
    *err = sum / static_cast<double>(W * runner.windows());
    return Status::ok();
  };

  auto mean = [&]() {
    double m = 0;
    for (int i = 0; i < kActInputs; ++i)
      if (part[i]) m += p[i] * level(i, 0);
    return m / P;
  };
  // 1e-6: an S read as a float (0.4f) must not cost one more step at a multiple of the step.
  while (mean() < o_.sparsity - 1e-6) {
    ActSparsityReport::GreedyStep st;
    st.layer = layer;
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < kActInputs; ++i) {
      st.error[i] = std::numeric_limits<double>::quiet_NaN();
      if (!part[i] || level(i, 1) >= 1.0) continue;
      float t[kActInputs];
      for (int j = 0; j < kActInputs; ++j) t[j] = part[j] ? threshold_at(j, level(j, j == i ? 1 : 0)) : 0.0f;
      EMBER_RETURN_IF_ERROR(error(t, &st.error[i]));
      if (st.error[i] < best) best = st.error[i], st.chosen = i;
    }
    if (st.chosen < 0) break;  // every input at its cap
    ++count[st.chosen];
    rep_->steps.push_back(st);
  }
  for (int i = 0; i < kActInputs; ++i) rep_->level[base + i] = part[i] ? level(i, 0) : 0.0;
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<ModelFile>> calibrate_act_sparsity(std::unique_ptr<ModelFile> src,
                                                          const std::vector<int32_t>& tokens,
                                                          const ActSparsityOptions& o, ThreadPool& pool,
                                                          ActSparsityReport* report) {
  if (!(o.sparsity > 0 && o.sparsity < 1))
    return Status::errorf("activation sparsity {} is not in (0, 1)", o.sparsity);
  if (!(o.base_step > 0 && o.base_step < 1))
    return Status::errorf("greedy activation-sparsity step {} is not in (0, 1)", o.base_step);
  auto cfg = config_from_metadata(src->metadata);
  if (!cfg) return cfg.status();
  ThresholdCollector cb(o, *src, cfg->n_layer, report);
  LayerwiseOptions lo;
  lo.window = o.window;
  lo.bos_id = o.bos_id;
  lo.progress = o.progress;
  lo.what = "activation-sparsity calibration";
  auto out = run_layerwise(std::move(src), tokens, lo, cb, pool);
  if (!out) return out.status();
  report->tokens = static_cast<int64_t>(tokens.size()) / o.window * o.window;
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kFloat32;
  a.count = report->thresholds.size();
  a.nums.assign(report->thresholds.begin(), report->thresholds.end());
  (*out)->metadata.set(kActSparsityThresholdsKey, std::move(a));
  (*out)->metadata.set(kActSparsityTargetKey, Metadata::make_float(o.sparsity));
  return out;
}

}  // namespace ember
