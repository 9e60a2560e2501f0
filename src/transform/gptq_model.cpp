// Layer-by-layer GPTQ over a model; see gptq_model.h.
#include "transform/gptq_model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/train.h"

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
  collect(name, -1, x, ld, n_rows, n_in);
}

void HessianCollector::on_expert_input(int layer, LinearRole role, int expert, int n_expert, const float* x,
                                       int64_t ld, int64_t n_rows, int64_t n_in) {
  if (layer != layer_) return;
  const std::string name = key(linear_tensor_name(layer, role, false), expert);
  if (x == last_x_ && n_rows == last_rows_ && expert == last_expert_ && last_ && last_->n_in == n_in) {
    by_tensor_[name] = last_;  // up reads gate's rows
    return;
  }
  collect(name, expert, x, ld, n_rows, n_in);
  (void)n_expert;
}

void HessianCollector::collect(const std::string& name, int expert, const float* x, int64_t ld, int64_t n_rows,
                               int64_t n_in) {
  std::shared_ptr<Acc>& acc = by_tensor_[name];
  if (!acc) {
    acc = std::make_shared<Acc>();
    acc->n_in = n_in;
    acc->h.assign(static_cast<size_t>(n_in * n_in), 0.0);
  }
  EMBER_CHECK(acc->n_in == n_in);
  last_x_ = x, last_rows_ = n_rows, last_ = acc, last_expert_ = expert;
  acc->n_tok += n_rows;
  acc->symmetric = false;
  // H[i][j] += sum_r x[r][i] x[r][j] for j <= i: the call's X^T X by the
  // f32 GEMM (kernels/train.h: f32 products and sums over the call's rows,
  // as the reference implementations accumulate H in f32; deterministic
  // for any thread count at a given ISA level), added to the double H; the
  // diagonal (dead columns, dampening, importance, Wanda's column norms)
  // summed in double from the rows themselves.
  std::vector<float> g(static_cast<size_t>(n_in * n_in));
  train_gemm(n_in, n_in, n_rows, x, ld, true, x, ld, false, g.data(), n_in, false, pool_);
  double* h = acc->h.data();
  pool_.parallel_for(n_in, 64, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      double* hi = h + i * n_in;
      const float* gi = &g[i * n_in];
      for (int64_t j = 0; j < i; ++j) hi[j] += gi[j];
      double d = 0;
      for (int64_t r = 0; r < n_rows; ++r) d += static_cast<double>(x[r * ld + i]) * x[r * ld + i];
      hi[i] += d;
    }
  });
}

const std::vector<double>* HessianCollector::hessian(const std::string& tensor, int expert) {
  auto it = by_tensor_.find(key(tensor, expert));
  if (it == by_tensor_.end() || it->second->n_tok == 0) return nullptr;
  Acc& a = *it->second;
  if (!a.symmetric) {
    for (int64_t i = 0; i < a.n_in; ++i)
      for (int64_t j = i + 1; j < a.n_in; ++j) a.h[i * a.n_in + j] = a.h[j * a.n_in + i];
    a.symmetric = true;
  }
  return &a.h;
}

int64_t HessianCollector::tokens(const std::string& tensor, int expert) const {
  auto it = by_tensor_.find(key(tensor, expert));
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
      // One matrix, or each expert of a 3-D tensor with its own Hessian
      // (an expert no calibration token chose: rounded to nearest); the
      // experts of an assembled entry (one source matrix per expert) are
      // written as one 3-D tensor.
      const int64_t n_mat = e->n_matrices();
      const int64_t n_in = e->ne[0], rows = e->ne.size() >= 2 ? e->ne[1] : 1;
      const size_t out_row = dtype_row_size(e->target, n_in);
      const size_t bytes = out_row * static_cast<size_t>(rows * n_mat);
      auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
      std::vector<float> w(static_cast<size_t>(n_in * rows));
      for (int64_t m = 0; m < n_mat; ++m) {
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* src_row = plan_entry_row(*current, *e, m * rows + r);
          if (!src_row) return Status::errorf("tensor '{}': the plan does not match the model", e->name);
          if (e->source == DType::kF32) std::memcpy(w.data() + r * n_in, src_row, n_in * sizeof(float));
          else dequantize_row_ref(e->source, src_row, w.data() + r * n_in, n_in);
        }
        uint8_t* dst = buf.get() + static_cast<size_t>(m * rows) * out_row;
        const std::vector<double>* H = hc_->hessian(e->name, n_mat > 1 ? static_cast<int>(m) : -1);
        if (!H && n_mat > 1) {
          for (int64_t r = 0; r < rows; ++r) quantize_row_ref(e->target, w.data() + r * n_in, dst + r * out_row, n_in);
          continue;
        }
        if (!H) return Status::errorf("tensor '{}': no calibration input reached it", e->name);
        if (static_cast<int64_t>(H->size()) != n_in * n_in)
          return Status::errorf("tensor '{}': Hessian of {} values for rows of {}", e->name, H->size(), n_in);
        Status st = gptq_quantize(w.data(), rows, n_in, H->data(), e->target, o_, dst, pool_);
        if (!st) return st.with_context(e->name);
      }
      TensorView v;
      v.name = e->name;
      v.type = e->target;
      v.n_dims = static_cast<int>(e->ne.size());
      for (size_t d = 0; d < e->ne.size(); ++d) v.ne[d] = e->ne[d];
      v.data = buf.get();
      v.nbytes = bytes;
      current->tensors[e->name] = v;
      current->owners.push_back(std::static_pointer_cast<void>(std::shared_ptr<uint8_t>(buf, buf.get())));
      e->source = e->target;
      e->method = QuantMethod::kCopy;
      e->sources.clear();
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
