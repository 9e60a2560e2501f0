// The layer-by-layer calibration driver; see layerwise.h.
#include "transform/layerwise.h"

#include <algorithm>
#include <cstring>

#include "model/model.h"

namespace ember {

Status prepare_window(ForwardContext& ctx, const std::vector<int32_t>& seq, KvCache* cache) {
  SeqBatch sb;
  sb.tokens = seq.data();
  sb.n = static_cast<int64_t>(seq.size());
  sb.cache = cache;
  return ctx.prepare(&sb, 1);
}

Status run_window_layers(ForwardContext& ctx, const std::vector<int32_t>& seq, const float* in, int64_t n_embd,
                         int l0, int l1, KvCache* cache) {
  EMBER_RETURN_IF_ERROR(prepare_window(ctx, seq, cache));
  std::memcpy(ctx.hidden(), in, seq.size() * static_cast<size_t>(n_embd) * sizeof(float));
  if (l1 > l0) ctx.run_layers(l0, l1);
  return Status::ok();
}

Status embed_calibration_windows(ForwardContext& ctx, const ModelConfig& cfg, const std::vector<int32_t>& tokens,
                                 int64_t n_windows, int64_t W, int32_t bos_id, KvCache* cache,
                                 std::vector<std::vector<int32_t>>* seqs, std::vector<std::vector<float>>* hidden) {
  for (int64_t i = 0; i < n_windows * W; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg.n_vocab) return Status::errorf("token id {} outside the vocabulary", tokens[i]);
  seqs->assign(static_cast<size_t>(n_windows), {});
  hidden->assign(static_cast<size_t>(n_windows), {});
  for (int64_t c = 0; c < n_windows; ++c) {
    std::vector<int32_t>& seq = (*seqs)[c];
    seq.assign(tokens.begin() + c * W, tokens.begin() + (c + 1) * W);
    if (bos_id >= 0) seq[0] = bos_id;
    EMBER_RETURN_IF_ERROR(prepare_window(ctx, seq, cache));
    ctx.embed();
    (*hidden)[c].assign(ctx.hidden(), ctx.hidden() + W * cfg.n_embd);
  }
  return Status::ok();
}

namespace {

// LayerwiseBlockRunner over the driver's model, context and windows.
class BlockRunner : public LayerwiseBlockRunner {
 public:
  BlockRunner(int l, Model* m, ForwardContext* ctx, const std::vector<std::vector<int32_t>>* seqs,
              const std::vector<std::vector<float>>* hidden, KvCache* cache, int64_t W, int64_t E)
      : l_(l), m_(m), ctx_(ctx), seqs_(seqs), hidden_(hidden), cache_(cache), W_(W), E_(E) {}
  int64_t windows() const override { return static_cast<int64_t>(hidden_->size()); }
  int64_t window_tokens() const override { return W_; }
  int64_t n_embd() const override { return E_; }
  Status run(const float* t, const std::function<void(int64_t, const float*)>& out) override {
    const std::vector<float> saved = m_->activation_thresholds();
    std::vector<float> trial = saved;
    trial.resize(static_cast<size_t>(m_->config().n_layer) * kActInputs, 0.0f);
    std::copy(t, t + kActInputs, trial.begin() + static_cast<ptrdiff_t>(l_) * kActInputs);
    EMBER_RETURN_IF_ERROR(m_->set_activation_thresholds(std::move(trial)));
    Status st = Status::ok();
    for (int64_t c = 0; c < windows() && st.is_ok(); ++c) {
      st = run_window_layers(*ctx_, (*seqs_)[c], (*hidden_)[c].data(), E_, l_, l_ + 1, cache_);
      if (st.is_ok()) out(c, ctx_->hidden());
    }
    Status restored = m_->set_activation_thresholds(saved);
    return st.is_ok() ? restored : st;
  }

 private:
  int l_;
  Model* m_;
  ForwardContext* ctx_;
  const std::vector<std::vector<int32_t>>* seqs_;
  const std::vector<std::vector<float>>* hidden_;
  KvCache* cache_;
  int64_t W_, E_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> run_layerwise(std::unique_ptr<ModelFile> src, const std::vector<int32_t>& tokens,
                                                 const LayerwiseOptions& o, LayerwiseCallback& cb, ThreadPool& pool) {
  const int64_t W = o.window;
  if (W < 2 || W > 512) return Status::errorf("{} chunk size {} is not in [2, 512]", o.what, W);
  const int64_t n_windows = static_cast<int64_t>(tokens.size()) / W;
  if (n_windows < 1) return Status::errorf("{} needs at least {} tokens, got {}", o.what, W, tokens.size());
  auto base = Model::from_file(std::make_unique<ModelFile>(*src));
  if (!base) return base.status();
  const ModelConfig cfg = (*base)->config();  // a copy: the model is reloaded as blocks change
  const int64_t E = cfg.n_embd;
  const int n_visit = o.n_layers < 0 ? cfg.n_layer : std::min(o.n_layers, cfg.n_layer);

  std::vector<std::vector<int32_t>> seqs;  // [n_windows][W]
  std::vector<std::vector<float>> hidden;  // [n_windows][W * E]
  ContiguousKvCache cache(cfg, W);
  std::unique_ptr<Model> model = std::move(base.value());
  auto ctx = std::make_unique<ForwardContext>(*model, pool, static_cast<int>(W));
  EMBER_RETURN_IF_ERROR(embed_calibration_windows(*ctx, cfg, tokens, n_windows, W, o.bos_id, &cache, &seqs, &hidden));
  auto current = std::make_unique<ModelFile>(*src);
  current->owners.push_back(std::shared_ptr<ModelFile>(std::move(src)));

  // Block l over every window; observer (may be null) sees it; advance:
  // its outputs replace the stored hidden states.
  auto pass = [&](int l, ForwardObserver* observer, bool advance) -> Status {
    ctx->set_observer(observer);
    for (int64_t c = 0; c < n_windows; ++c) {
      if (observer) cb.on_window(l, c);
      EMBER_RETURN_IF_ERROR(run_window_layers(*ctx, seqs[c], hidden[c].data(), E, l, l + 1, &cache));
      if (advance) std::memcpy(hidden[c].data(), ctx->hidden(), W * E * sizeof(float));
    }
    ctx->set_observer(nullptr);
    return Status::ok();
  };
  const bool keeps_function = cb.preserves_function();
  const bool refines = cb.refines();
  for (int l = 0; l < n_visit; ++l) {
    const bool last = l + 1 == n_visit;
    ForwardObserver* observer = cb.observer(l);
    if (observer) {
      EMBER_RETURN_IF_ERROR(pass(l, observer, keeps_function && !refines));
      if (refines) {
        BlockRunner runner(l, model.get(), ctx.get(), &seqs, &hidden, &cache, W, E);
        EMBER_RETURN_IF_ERROR(cb.refine(l, runner));
      }
      EMBER_RETURN_IF_ERROR(cb.transform(l, current.get()));
      if (keeps_function && refines && !last) EMBER_RETURN_IF_ERROR(pass(l, nullptr, true));
      if (!keeps_function && !last) {  // block l as transformed: reload and advance through it
        ctx.reset();
        auto next = Model::from_file(std::make_unique<ModelFile>(*current));
        if (!next) return next.status();
        model = std::move(next.value());
        ctx = std::make_unique<ForwardContext>(*model, pool, static_cast<int>(W));
        EMBER_RETURN_IF_ERROR(pass(l, nullptr, true));
      }
    } else if (!last) {
      EMBER_RETURN_IF_ERROR(pass(l, nullptr, true));
    }
    if (o.progress) o.progress(l + 1, n_visit);
  }
  return current;
}

}  // namespace ember
