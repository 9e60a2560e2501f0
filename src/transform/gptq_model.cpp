// Layer-by-layer GPTQ over a model; see gptq_model.h.
#include "transform/gptq_model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"

#include "model/model.h"
#include "quant/quantize.h"
#include "transform/imatrix.h"
#include "transform/layerwise.h"

namespace ember {

void HessianCollector::on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                                       int64_t n_in) {
  if (layer != layer_ || role == LinearRole::kOutput) return;
  const std::string name = linear_tensor_name(layer, role, false);
  if (x == last_x_ && n_rows == last_rows_ && last_ && last_->n_in == n_in) {  // shared input (K, V; up)
    by_tensor_[name] = last_;
    return;
  }
  std::shared_ptr<Acc>& acc = by_tensor_[name];
  if (!acc) {
    acc = std::make_shared<Acc>();
    acc->n_in = n_in;
    acc->h.assign(static_cast<size_t>(n_in * n_in), 0.0);
  }
  EMBER_CHECK(acc->n_in == n_in);
  last_x_ = x, last_rows_ = n_rows, last_ = acc;
  acc->n_tok += n_rows;
  acc->symmetric = false;
  // H[i][j] += sum_r x[r][i] x[r][j] for j <= i, in tiles of 64 x 64 over
  // rows converted to double, tiles of i spread across the pool.
  constexpr int64_t kT = 64;
  std::vector<double> xd(static_cast<size_t>(n_rows * n_in));
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < n_in; ++i) xd[r * n_in + i] = x[r * ld + i];
  double* h = acc->h.data();
  const int64_t n_tiles = (n_in + kT - 1) / kT;
  pool_.parallel_for(n_tiles, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t ti = t0; ti < t1; ++ti) {
      const int64_t i0 = ti * kT, i1 = std::min(n_in, i0 + kT);
      for (int64_t j0 = 0; j0 < i1; j0 += kT) {
        for (int64_t r = 0; r < n_rows; ++r) {
          const double* xr = &xd[r * n_in];
          for (int64_t i = i0; i < i1; ++i) {
            const double xi = xr[i];
            double* hi = h + i * n_in;
            const int64_t j1 = std::min(i + 1, j0 + kT);
            for (int64_t j = j0; j < j1; ++j) hi[j] += xi * xr[j];
          }
        }
      }
    }
  });
}

const std::vector<double>* HessianCollector::hessian(const std::string& tensor) {
  auto it = by_tensor_.find(tensor);
  if (it == by_tensor_.end() || it->second->n_tok == 0) return nullptr;
  Acc& a = *it->second;
  if (!a.symmetric) {
    for (int64_t i = 0; i < a.n_in; ++i)
      for (int64_t j = i + 1; j < a.n_in; ++j) a.h[i * a.n_in + j] = a.h[j * a.n_in + i];
    a.symmetric = true;
  }
  return &a.h;
}

int64_t HessianCollector::tokens(const std::string& tensor) const {
  auto it = by_tensor_.find(tensor);
  return it == by_tensor_.end() ? 0 : it->second->n_tok;
}

namespace {

// GPTQ as a LayerwiseCallback: a HessianCollector per block with entries,
// then those entries quantized into the current file.
class GptqLayers final : public LayerwiseCallback {
 public:
  GptqLayers(std::map<int, std::vector<QuantPlanEntry*>> by_layer, const GptqOptions& o, ThreadPool& pool)
      : by_layer_(std::move(by_layer)), o_(o), pool_(pool) {}

  ForwardObserver* observer(int layer) override {
    if (!by_layer_.count(layer)) return nullptr;
    hc_ = std::make_unique<HessianCollector>(layer, pool_);
    return hc_.get();
  }

  Status transform(int layer, ModelFile* current) override {
    for (QuantPlanEntry* e : by_layer_.at(layer)) {
      const std::vector<double>* H = hc_->hessian(e->name);
      if (!H) return Status::errorf("tensor '{}': no calibration input reached it", e->name);
      const TensorView& t = *current->tensor(e->name);
      const int64_t n_in = t.ne[0], n_out = t.nrows();
      if (static_cast<int64_t>(H->size()) != n_in * n_in)
        return Status::errorf("tensor '{}': Hessian of {} values for rows of {}", e->name, H->size(), n_in);
      std::vector<float> w = read_f32_rows(t);
      const size_t bytes = dtype_row_size(e->target, n_in) * n_out;
      auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
      Status st = gptq_quantize(w.data(), n_out, n_in, H->data(), e->target, o_, buf.get(), pool_);
      if (!st) return st.with_context(e->name);
      replace_tensor(current, e->name, e->target, std::move(buf), bytes);
      e->source = e->target;
      e->method = QuantMethod::kCopy;
    }
    hc_.reset();
    return Status::ok();
  }

 private:
  std::map<int, std::vector<QuantPlanEntry*>> by_layer_;
  const GptqOptions& o_;
  ThreadPool& pool_;
  std::unique_ptr<HessianCollector> hc_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> run_gptq(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                            const std::vector<int32_t>& tokens, const GptqRunOptions& o,
                                            ThreadPool& pool) {
  std::map<int, std::vector<QuantPlanEntry*>> by_layer;
  for (QuantPlanEntry& e : plan->entries) {
    if (e.method != QuantMethod::kGptq) continue;
    if (e.layer < 0) return Status::errorf("tensor '{}': GPTQ runs only on the matrices of the blocks", e.name);
    if (!gptq_supports(e.target)) return Status::errorf("tensor '{}': GPTQ cannot write {}", e.name, dtype_name(e.target));
    if (e.transform != TensorTransform::kNone)
      return Status::errorf("tensor '{}': GPTQ of a permuted (Hugging Face) tensor is not supported; convert it to "
                            "GGUF first", e.name);
    by_layer[e.layer].push_back(&e);
  }
  GptqLayers cb(std::move(by_layer), o.gptq, pool);
  LayerwiseOptions lo;
  lo.window = o.chunk_size;
  lo.bos_id = o.bos_id;
  lo.progress = o.progress;
  lo.what = "GPTQ calibration";
  return run_layerwise(std::move(src), tokens, lo, cb, pool);
}

}  // namespace ember
