// Activation-sparsity thresholds from calibration text; see act_sparsity.h.
#include "transform/act_sparsity.h"

#include <algorithm>
#include <cmath>

#include "model/act_sparsity.h"
#include "model/config.h"
#include "transform/layerwise.h"

namespace ember {

namespace {

// Collects |x| of the four inputs of the block being observed and turns
// them into thresholds after its pass.
class ThresholdCollector : public LayerwiseCallback, public ForwardObserver {
 public:
  ThresholdCollector(double s, int n_layer, ActSparsityReport* rep) : s_(s), rep_(rep) {
    rep_->thresholds.assign(static_cast<size_t>(n_layer) * kActInputs, 0.0f);
    rep_->zeroed.assign(static_cast<size_t>(n_layer) * kActInputs, 0.0);
  }

  ForwardObserver* observer(int layer) override {
    layer_ = layer;
    for (auto& v : abs_) v.clear();
    return this;
  }
  bool preserves_function() const override { return true; }

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

  Status transform(int layer, ModelFile*) override {
    for (int i = 0; i < kActInputs; ++i) {
      std::vector<float>& v = abs_[i];
      const auto k = static_cast<int64_t>(std::floor(s_ * static_cast<double>(v.size())));
      const size_t at = static_cast<size_t>(layer) * kActInputs + i;
      if (k <= 0) continue;  // no entries (a MoE layer's FFN), or too few
      std::nth_element(v.begin(), v.begin() + (k - 1), v.end());
      const float t = v[static_cast<size_t>(k - 1)];
      const auto zeroed = std::count_if(v.begin(), v.end(), [t](float a) { return a <= t; });
      rep_->thresholds[at] = t;
      rep_->zeroed[at] = static_cast<double>(zeroed) / static_cast<double>(v.size());
      v.clear();
      v.shrink_to_fit();
    }
    return Status::ok();
  }

 private:
  double s_;
  ActSparsityReport* rep_;
  int layer_ = -1;
  std::vector<float> abs_[kActInputs];
};

}  // namespace

Result<std::unique_ptr<ModelFile>> calibrate_act_sparsity(std::unique_ptr<ModelFile> src,
                                                          const std::vector<int32_t>& tokens,
                                                          const ActSparsityOptions& o, ThreadPool& pool,
                                                          ActSparsityReport* report) {
  if (!(o.sparsity > 0 && o.sparsity < 1))
    return Status::errorf("activation sparsity {} is not in (0, 1)", o.sparsity);
  auto cfg = config_from_metadata(src->metadata);
  if (!cfg) return cfg.status();
  ThresholdCollector cb(o.sparsity, cfg->n_layer, report);
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
