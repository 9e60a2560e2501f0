// The CUDA Backend; see cuda_backend.h. Each op resolves its pointers (the
// backend's device buffers as they are, host buffers staged, parameters and
// weights from their caches), queues the ops.h calls, and keeps the first
// error for sync().
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/ops.h"

namespace ember::cuda {
namespace {

// Floats spanned by n rows of `width` floats, `ld` apart.
size_t span(int64_t n, int64_t ld, int64_t width) {
  return n <= 0 ? 0 : static_cast<size_t>((n - 1) * ld + width) * sizeof(float);
}

class DeviceMemoryBuffer final : public BackendBuffer {
 public:
  DeviceMemoryBuffer(DeviceBuffer b, size_t bytes, std::shared_ptr<DeviceRanges> ranges)
      : b_(std::move(b)), bytes_(bytes), ranges_(std::move(ranges)) {
    ranges_->add(b_.data(), b_.bytes());
  }
  ~DeviceMemoryBuffer() override { ranges_->remove(b_.data()); }
  void* data() const override { return b_.data(); }
  size_t bytes() const override { return bytes_; }

 private:
  DeviceBuffer b_;
  size_t bytes_;
  std::shared_ptr<DeviceRanges> ranges_;
};

// Page-locked host memory as a BackendBuffer (alloc_host).
class PinnedHostBuffer final : public BackendBuffer {
 public:
  PinnedHostBuffer(PinnedBuffer b, size_t bytes) : b_(std::move(b)), bytes_(bytes) {}
  void* data() const override { return b_.data(); }
  size_t bytes() const override { return bytes_; }

 private:
  PinnedBuffer b_;
  size_t bytes_;
};

// One layer's pages as the kernels address them: the base of the K and V
// allocations and, per sequence (view), its page ids.
struct PageTables {
  const uint8_t* k_base = nullptr;
  const uint8_t* v_base = nullptr;
  int64_t stride = 0;           // ids per sequence
  std::vector<int32_t> ids;     // [n_views, stride]
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<Context> ctx, const CudaBackendOptions& o, std::shared_ptr<WeightStore> weights)
      : ctx_(std::move(ctx)), o_(o), weights_(std::move(weights)), ranges_(std::make_shared<DeviceRanges>()),
        staging_(*ctx_) {}

  const char* name() const override { return "cuda"; }
  bool supports(DType t, WeightOp op) const override {
    return (op == WeightOp::kMatmul || op == WeightOp::kEmbed) && device_weight_supported(t);
  }
  Result<int> prepare_weights(const WeightToPrepare* w, int64_t n, std::vector<std::shared_ptr<void>>*,
                              const WeightRetired&) override {
    int done = 0;
    for (int64_t i = 0; i < n; ++i) {
      const TensorView& t = *w[i].tensor;
      if (t.ne[2] > 1 || !w[i].slices.empty())
        return Status::errorf("cuda: {} is a stack of expert matrices (mixture-of-experts layers are not on the "
                              "CUDA backend)",
                              t.name);
      auto d = weights_->get(*ctx_, t);
      if (!d) return d.status();
      ++done;
    }
    EMBER_RETURN_IF_ERROR(ctx_->sync());
    return done;
  }

  Status upload_weights(const TensorView* const* w, int64_t n) override {
    size_t need = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!device_weight_supported(w[i]->type))
        return Status::errorf("cuda: '{}' is {}, a type the CUDA backend does not hold", w[i]->name,
                              dtype_name(w[i]->type));
      need += weights_->missing_bytes(*w[i]);
    }
    if (need == 0) return Status::ok();
    auto free_b = device_free_bytes();
    if (!free_b) return free_b.status();
    EMBER_RETURN_IF_ERROR(weights_fit(need, *free_b));
    for (int64_t i = 0; i < n; ++i) {
      auto d = weights_->get(*ctx_, *w[i]);
      if (!d) return d.status().with_context(fmt::format("uploading '{}'", w[i]->name));
    }
    return ctx_->sync();
  }
  std::unique_ptr<BackendBuffer> alloc_host(size_t bytes) override {
    auto b = PinnedBuffer::alloc(std::max<size_t>(bytes, 1));
    if (!b) return Backend::alloc(bytes);  // pageable, slower copies
    return std::make_unique<PinnedHostBuffer>(std::move(*b), bytes);
  }
  int64_t graphs_captured() const { return graph_captures_; }
  size_t weight_bytes() const { return weights_->bytes(); }
  BackendTimes times() const override {
    BackendTimes t;
    t.device_measured = true;
    t.device_seconds = device_seconds_;
    t.copy_seconds = copy_seconds_;
    t.copy_bytes = copy_bytes_ + staging_.copied_bytes() + inputs_.copied_bytes();
    return t;
  }

  std::unique_ptr<BackendBuffer> alloc(size_t bytes) override {
    auto b = DeviceBuffer::alloc(std::max<size_t>(bytes, 1));
    if (!b) return nullptr;
    if (!ctx_->fill(b->data(), 0, b->bytes()) || !ctx_->sync()) return nullptr;
    return std::make_unique<DeviceMemoryBuffer>(std::move(*b), bytes, ranges_);
  }
  bool host_memory() const override { return false; }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (!begin() || bytes == 0) return;
    const bool to_host = !ranges_->find(dst);
    if (to_host && !keep(ctx_->sync())) return;  // the device's earlier work is not the copy's time
    const CopyClock clock(this);
    copy_bytes_ += static_cast<int64_t>(bytes);
    if (!keep(ctx_->copy(dst, src, bytes))) return;
    if (to_host) keep(ctx_->sync());
  }
  Status sync() override {
    Status st = status_;
    if (span_open_) {
      // The step's span on the device: from its first op to its last.
      Status t = span1_.record(ctx_->stream());
      if (t.is_ok()) t = ctx_->sync();
      auto ms = t.is_ok() ? Event::elapsed_ms(span0_, span1_) : Result<float>(t);
      if (ms) device_seconds_ += *ms / 1e3;
      if (st.is_ok()) st = ms.status();
      span_open_ = false;
    }
    if (st.is_ok()) st = ctx_->sync();
    status_ = Status::ok();
    return st;
  }

  void matmul(const float* x, int64_t ldx, int64_t n, const MatmulTarget* t, int n_t) override;
  void embed(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) override {
    if (!begin() || n <= 0) return;
    auto w = weight(table);
    const void* d_ids = in(ids, static_cast<size_t>(n) * 4);
    float* d_out = outf(out, span(n, table.ne[0], table.ne[0]), false);
    if (w && d_ids && d_out) keep(cuda::embed(*ctx_, **w, static_cast<const int32_t*>(d_ids), n, scale, d_out));
    end_op();
  }
  void rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                int64_t dim, float eps) override {
    if (!begin() || n_rows <= 0) return;
    const float* dx = inf(x, span(n_rows, ld_x, dim));
    const float* dw = param(w, dim);
    float* d_out = outf(out, span(n_rows, ld_out, dim), out == x || ld_out > dim);  // gaps kept
    if (dx && (dw || !w) && d_out) keep(cuda::rms_norm(*ctx_, dx, ld_x, dw, d_out, ld_out, n_rows, dim, eps));
    end_op();
  }
  void rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t,
                   float* sin_t) override {
    if (!begin() || n <= 0) return;
    const size_t table = static_cast<size_t>(n * (n_rot / 2)) * sizeof(float);
    const void* d_pos = in(pos, static_cast<size_t>(n) * 4);
    const float* d_freq = param(inv_freq, n_rot / 2);
    float* d_cos = outf(cos_t, table, false);
    float* d_sin = outf(sin_t, table, false);
    if (d_pos && d_freq && d_cos && d_sin)
      keep(cuda::rope_angles(*ctx_, static_cast<const int32_t*>(d_pos), n, d_freq, n_rot, d_cos, d_sin));
    end_op();
  }
  void rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style,
            const float* cos_t, const float* sin_t) override {
    if (!begin() || n <= 0) return;
    const size_t table = static_cast<size_t>(n * (n_rot / 2)) * sizeof(float);
    float* dx = outf(x, span(n, ld, static_cast<int64_t>(n_heads) * head_dim), true);
    const float* d_cos = inf(cos_t, table);
    const float* d_sin = inf(sin_t, table);
    if (dx && d_cos && d_sin) keep(cuda::rope(*ctx_, dx, ld, n, n_heads, head_dim, n_rot, style, d_cos, d_sin));
    end_op();
  }
  void add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b) override {
    if (!begin() || n <= 0) return;
    float* dx = outf(x, span(n, ld, dim), true);
    const float* db = param(b, dim);
    if (dx && db) keep(cuda::add_bias(*ctx_, dx, ld, n, dim, db));
    end_op();
  }
  void add(float* y, const float* x, int64_t n) override {
    if (!begin() || n <= 0) return;
    float* dy = outf(y, span(1, n, n), true);
    const float* dx = inf(x, span(1, n, n));
    if (dy && dx) keep(cuda::add(*ctx_, dy, dx, n));
    end_op();
  }
  void gated_activation(GatedActivation a, float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t n,
                        int64_t dim) override {
    if (!begin() || n <= 0) return;
    float* dg = outf(gate, span(n, ld_gate, dim), true);
    const float* du = inf(up, span(n, ld_up, dim));
    if (dg && du) keep(cuda::gated_activation(*ctx_, a, dg, ld_gate, du, ld_up, n, dim));
    end_op();
  }
  void softcap(float* x, int64_t n, float cap) override {
    if (!begin() || n <= 0) return;
    float* dx = outf(x, span(1, n, n), true);
    if (dx) keep(cuda::softcap(*ctx_, dx, n, cap));
    end_op();
  }
  void hadamard(float*, int64_t, int64_t, int, int, bool) override {
    lacks("Hadamard rotations (rotated KV caches, QuaRot models)");
  }
  void moe_route(const float*, int64_t, int64_t, const MoeRouting&, int32_t*, float*) override {
    lacks("mixture-of-experts layers");
  }
  void moe_matmul(const float*, int64_t, int64_t, const int32_t*, const int32_t*, int, const ExpertTarget*,
                  int) override {
    lacks("mixture-of-experts layers");
  }
  void moe_combine(const float*, int64_t, const float*, int, int64_t, int64_t, float*, int64_t, bool) override {
    lacks("mixture-of-experts layers");
  }
  void kv_store(const float* k, int64_t ldk, int64_t k_width, const float* v, int64_t ldv, int64_t v_width,
                const int32_t* pos, int64_t n, const KvStoreView* views, const int32_t* view_of_token) override;
  void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n, const KvView* views,
                 const int32_t* view_of_token, float* out) override;

 private:
  bool ok() const { return status_.is_ok(); }
  // ok(), and the step's span on the device opened at its first op.
  bool begin() {
    if (!ok()) return false;
    if (!span_open_) {
      span_open_ = true;
      keep(span0_.record(ctx_->stream()));
    }
    return ok();
  }
  // Adds the host wall time of its scope to the copies' (times()).
  class CopyClock {
   public:
    explicit CopyClock(CudaBackend* b) : b_(b), t0_(std::chrono::steady_clock::now()) {}
    ~CopyClock() { b_->copy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

   private:
    CudaBackend* b_;
    std::chrono::steady_clock::time_point t0_;
  };
  // Keeps the first error; true when st is ok.
  bool keep(const Status& st) {
    if (!st && status_.is_ok()) status_ = st.with_context("cuda backend");
    return st.is_ok();
  }
  void lacks(const char* what) { keep(Status::errorf("{} are not on the CUDA backend", what)); }
  // A device address for p: p itself when it is this backend's memory, else
  // a staged copy (read: copied in; write: copied back by end_op). Null
  // after an error (kept).
  void* arg(const void* p, size_t bytes, bool read, bool write) {
    if (!p) return nullptr;
    if (ranges_->find(p)) return const_cast<void*>(p);
    const CopyClock clock(this);
    auto d = staging_.stage(p, bytes, read, write);
    if (!keep(d.status())) return nullptr;
    return *d;
  }
  // A read-only input: small host buffers from the input cache (no copy
  // when the same bytes were seen before), larger ones staged.
  const void* in(const void* p, size_t bytes) {
    if (!p || bytes == 0 || bytes > InputCache::kMaxBytes || ranges_->find(p)) return arg(p, bytes, true, false);
    const CopyClock clock(this);
    auto d = inputs_.get(*ctx_, p, bytes);
    if (!keep(d.status())) return nullptr;
    return *d;
  }
  const float* inf(const float* p, size_t bytes) { return static_cast<const float*>(in(p, bytes)); }
  float* outf(float* p, size_t bytes, bool read) { return static_cast<float*>(arg(p, bytes, read, true)); }
  const float* param(const float* p, int64_t n) {
    if (!p) return nullptr;
    if (ranges_->find(p)) return p;
    auto d = params_.get(*ctx_, p, static_cast<size_t>(n) * sizeof(float));
    if (!keep(d.status())) return nullptr;
    return static_cast<const float*>(*d);
  }
  Result<const DeviceWeight*> weight(const TensorView& w) {
    auto d = weights_->get(*ctx_, w);
    keep(d.status());
    return d;
  }
  // Copies the op's staged outputs back: after waiting for the op (the
  // device's time, not the copy's), the copy timed.
  // One target's mat-vec: x quantized to its weights' activation kind once
  // per call (quantized[kind]), then the rows.
  Status matvec_target(const float* dx, int64_t ldx, int64_t n, const DeviceWeight& dw, float* dy, int64_t ldy,
                       bool quantized[3]);
  // With decode_graphs: a mat-vec matmul over the backend's own buffers runs
  // as a CUDA graph, one per call (x, targets, outputs, token count: the
  // batch-size bucket), captured at its first run and replayed after; the
  // same kernels in the same order, so the same bits. False: not such a
  // call (run eagerly).
  bool graph_matmul(const float* x, int64_t ldx, int64_t n, const MatmulTarget* t, int n_t);
  void end_op() {
    if (staging_.has_writes() && ok()) keep(ctx_->sync());
    const CopyClock clock(this);
    keep(staging_.finish());
  }
  // Host copies of small int arrays the planning reads (pos, sequence ids).
  const int32_t* host_ints(const int32_t* p, int64_t n, std::vector<int32_t>* buf) {
    if (!ranges_->find(p)) return p;
    buf->resize(static_cast<size_t>(n));
    if (!keep(ctx_->to_host(buf->data(), p, static_cast<size_t>(n) * 4))) return nullptr;
    return buf->data();
  }
  // The page ids of every view's pages that positions <= the largest of its
  // tokens need, from their addresses in the pool's allocations.
  template <typename View>
  bool page_tables(const View* views, const int32_t* view_of_token, const int32_t* pos, int64_t n, PageTables* pt);
  Status ensure(DeviceBuffer* b, size_t bytes) {
    if (b->bytes() >= bytes) return Status::ok();
    b->reset();
    auto nb = DeviceBuffer::alloc(std::max(bytes, b->bytes() * 2));
    if (!nb) return nb.status();
    *b = std::move(*nb);
    return Status::ok();
  }

  std::unique_ptr<Context> ctx_;
  CudaBackendOptions o_;
  std::shared_ptr<WeightStore> weights_;
  std::shared_ptr<DeviceRanges> ranges_;
  Staging staging_;
  ParamCache params_;
  InputCache inputs_;
  Status status_;
  DeviceBuffer act_[3];     // int8 activation rows per activation kind (Q8_0, Q8_K, f32 copy)
  DeviceBuffer tiles_;      // matmul_tile scratch
  PageTables pages_;
  std::vector<int32_t> pos_host_, seq_host_;
  // The attention plan of the step (rebuilt when the tokens or the head
  // layout change).
  AttentionPlan plan_;
  std::vector<int32_t> plan_pos_, plan_seq_;
  int plan_heads_[3] = {0, 0, 0};
  // times(): the device's span of each step (span0_ at its first op,
  // span1_ at sync), host wall time in copies, bytes copied by copy().
  Event span0_, span1_;
  // decode_graphs: the captured calls, by their device addresses and sizes.
  static constexpr size_t kMaxGraphs = 8192;
  std::map<std::vector<uint64_t>, Graph> graphs_;
  std::vector<const DeviceWeight*> graph_weights_;
  std::vector<uint64_t> graph_key_;  // graph_matmul's lookup key, reused
  int64_t graph_captures_ = 0;
  bool span_open_ = false;
  double device_seconds_ = 0;
  double copy_seconds_ = 0;
  int64_t copy_bytes_ = 0;
};

void CudaBackend::matmul(const float* x, int64_t ldx, int64_t n, const MatmulTarget* t, int n_t) {
  if (!begin() || n <= 0 || n_t <= 0) return;
  if (graph_matmul(x, ldx, n, t, n_t)) return;
  const int64_t n_in = t[0].w->ne[0];
  const float* dx = inf(x, span(n, ldx, n_in));
  bool quantized[3] = {false, false, false};
  for (int i = 0; i < n_t && ok() && dx; ++i) {
    const MatmulTarget& m = t[i];
    if (m.act_bits == 4 || m.act_threshold > 0.f) {
      lacks(m.act_bits == 4 ? "4-bit activations" : "sparse activations (an activation threshold)");
      break;
    }
    auto w = weight(*m.w);
    if (!w) break;
    const DeviceWeight& dw = **w;
    float* dy = outf(m.y, span(n, m.ldy, dw.n_out), m.ldy > dw.n_out);  // a staged row's gap is kept
    if (!dy) break;
    if (dw.type == DType::kF32) {
      keep(matmul_f32(*ctx_, dw, dx, ldx, n, dy, m.ldy));
    } else if (o_.gemm_min_tokens > 0 && n >= o_.gemm_min_tokens) {
      const size_t need = std::max(tile_scratch_bytes(n_in, n, 1), tile_scratch_bytes(n_in, n, 0) + o_.tile_scratch_bytes);
      if (keep(ensure(&tiles_, need)))
        keep(matmul_tile(*ctx_, dw, dx, ldx, n, dy, m.ldy, tiles_.data(), tiles_.bytes()));
    } else {
      keep(matvec_target(dx, ldx, n, dw, dy, m.ldy, quantized));
    }
  }
  end_op();
}

namespace {
// Which of the backend's activation scratch buffers (act_) a weight's
// mat-vec reads: 0 Q8_0 blocks, 1 the other integer kind, 2 floats.
Result<int> act_slot(DType type) {
  auto wt = wtype_of(type);
  if (!wt) return wt.status();
  return wtype_is_float(*wt) ? 2 : wtype_act(*wt) == ActKind::kQ8_0 ? 0 : 1;
}
}  // namespace

Status CudaBackend::matvec_target(const float* dx, int64_t ldx, int64_t n, const DeviceWeight& dw, float* dy,
                                  int64_t ldy, bool quantized[3]) {
  auto slot = act_slot(dw.type);
  if (!slot) return slot.status();
  const int kind = *slot;
  if (!quantized[kind]) {
    EMBER_RETURN_IF_ERROR(ensure(&act_[kind], static_cast<size_t>(act_stride(dw.type, dw.n_in) * n)));
    EMBER_RETURN_IF_ERROR(quantize_act(*ctx_, dw.type, dx, ldx, dw.n_in, n, act_[kind].data()));
    quantized[kind] = true;
  }
  return matvec(*ctx_, dw, act_[kind].data(), n, dy, ldy);
}

bool CudaBackend::graph_matmul(const float* x, int64_t ldx, int64_t n, const MatmulTarget* t, int n_t) {
  if (!o_.decode_graphs || (o_.gemm_min_tokens > 0 && n >= o_.gemm_min_tokens) || !ranges_->find(x)) return false;
  for (int i = 0; i < n_t; ++i)
    if (t[i].act_bits == 4 || t[i].act_threshold > 0.f || t[i].w->type == DType::kF32 || !ranges_->find(t[i].y))
      return false;
  // Everything the graph reads is in place before the capture: the weights
  // (a first use uploads) and the activation scratch at its size.
  // The key in a member vector: no allocation per call once it has grown.
  std::vector<uint64_t>& key = graph_key_;
  key.assign({reinterpret_cast<uintptr_t>(x), static_cast<uint64_t>(ldx), static_cast<uint64_t>(n)});
  graph_weights_.clear();
  for (int i = 0; i < n_t; ++i) {
    auto w = weight(*t[i].w);
    if (!w) return true;
    const DeviceWeight& dw = **w;
    auto kind = act_slot(dw.type);
    if (!keep(kind.status())) return true;
    if (!keep(ensure(&act_[*kind], static_cast<size_t>(act_stride(dw.type, dw.n_in) * n)))) return true;
    graph_weights_.push_back(&dw);
    for (uint64_t v : {static_cast<uint64_t>(reinterpret_cast<uintptr_t>(dw.buf.data())),
                       static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t[i].y)), static_cast<uint64_t>(t[i].ldy)})
      key.push_back(v);
  }
  for (const DeviceBuffer& a : act_) key.push_back(reinterpret_cast<uintptr_t>(a.data()));
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) graphs_.clear();
    Graph g;
    const Status st = g.capture(*ctx_, [&]() -> Status {
      bool quantized[3] = {false, false, false};
      for (int i = 0; i < n_t; ++i)
        EMBER_RETURN_IF_ERROR(matvec_target(x, ldx, n, *graph_weights_[static_cast<size_t>(i)], t[i].y, t[i].ldy,
                                            quantized));
      return Status::ok();
    });
    if (!keep(st)) return true;
    it = graphs_.emplace(key, std::move(g)).first;
    ++graph_captures_;
  }
  keep(it->second.launch(*ctx_));
  return true;
}

template <typename View>
bool CudaBackend::page_tables(const View* views, const int32_t* view_of_token, const int32_t* pos, int64_t n,
                              PageTables* pt) {
  int n_views = 0;
  int64_t max_pages = 1;
  for (int64_t t = 0; t < n; ++t) {
    n_views = std::max(n_views, view_of_token[t] + 1);
    max_pages = std::max<int64_t>(max_pages, pos[t] / std::max(1, views[view_of_token[t]].block_size) + 1);
  }
  std::vector<int64_t> need(static_cast<size_t>(n_views), 0);
  for (int64_t t = 0; t < n; ++t)
    need[view_of_token[t]] =
        std::max<int64_t>(need[view_of_token[t]], pos[t] / std::max(1, views[view_of_token[t]].block_size) + 1);
  pt->stride = max_pages;
  pt->ids.assign(static_cast<size_t>(n_views * max_pages), 0);
  pt->k_base = pt->v_base = nullptr;
  size_t k_bytes = 0, v_bytes = 0;
  for (int i = 0; i < n_views; ++i) {
    const View& v = views[i];
    if (need[i] == 0) continue;
    if (!v.k_blocks || !v.v_blocks) {
      lacks("token-group key caches (q4c)");
      return false;
    }
    if (v.k_type != views[view_of_token[0]].k_type || v.v_type != views[view_of_token[0]].v_type ||
        v.block_size != views[view_of_token[0]].block_size) {
      keep(Status::error("cuda: the sequences of a step have KV pages of different formats"));
      return false;
    }
    const int64_t k_page = v.block_size * v.k_row_bytes, v_page = v.block_size * v.v_row_bytes;
    for (int64_t b = 0; b < need[i]; ++b) {
      const uint8_t* kp = v.k_blocks[b];
      const uint8_t* vp = v.v_blocks[b];
      if (!kp || !vp) continue;  // a page the window released: never read
      if (!pt->k_base && (!ranges_->find(kp, &pt->k_base, &k_bytes) || !ranges_->find(vp, &pt->v_base, &v_bytes))) {
        keep(Status::error("cuda: the KV pages are not in the CUDA backend's memory (make the pool with it)"));
        return false;
      }
      const int64_t ko = kp - pt->k_base, vo = vp - pt->v_base;
      if (ko < 0 || vo < 0 || static_cast<size_t>(ko) >= k_bytes || static_cast<size_t>(vo) >= v_bytes ||
          ko % k_page != 0 || vo % v_page != 0 || ko / k_page != vo / v_page) {
        keep(Status::error("cuda: a KV page outside the layer's pool, or K and V pages of different ids"));
        return false;
      }
      pt->ids[static_cast<size_t>(i * max_pages + b)] = static_cast<int32_t>(ko / k_page);
    }
  }
  if (!pt->k_base) {
    keep(Status::error("cuda: a step without KV pages"));
    return false;
  }
  return true;
}

void CudaBackend::kv_store(const float* k, int64_t ldk, int64_t k_width, const float* v, int64_t ldv,
                           int64_t v_width, const int32_t* pos, int64_t n, const KvStoreView* views,
                           const int32_t* view_of_token) {
  if (!begin() || n <= 0) return;
  const int32_t* hp = host_ints(pos, n, &pos_host_);
  const int32_t* hs = hp ? host_ints(view_of_token, n, &seq_host_) : nullptr;
  if (!hs || !page_tables(views, hs, hp, n, &pages_)) return;
  const KvStoreView& v0 = views[hs[0]];
  StorePages p;
  p.k = const_cast<uint8_t*>(pages_.k_base);
  p.v = const_cast<uint8_t*>(pages_.v_base);
  p.block_size = v0.block_size;
  p.k_row_bytes = v0.k_row_bytes, p.v_row_bytes = v0.v_row_bytes;
  p.k_type = v0.k_type, p.v_type = v0.v_type;
  const float* dk = inf(k, span(n, ldk, k_width));
  const float* dv = inf(v, span(n, ldv, v_width));
  const void* dpos = in(pos, static_cast<size_t>(n) * 4);
  const void* dseq = in(view_of_token, static_cast<size_t>(n) * 4);
  const void* dtab = in(pages_.ids.data(), pages_.ids.size() * 4);
  if (dk && dv && dpos && dseq && dtab)
    keep(cuda::kv_store(*ctx_, p, dk, ldk, k_width, dv, ldv, v_width, static_cast<const int32_t*>(dpos),
                        static_cast<const int32_t*>(dseq), n, static_cast<const int32_t*>(dtab), pages_.stride));
  end_op();
}

void CudaBackend::attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n,
                            const KvView* views, const int32_t* view_of_token, float* out) {
  if (!begin() || n <= 0) return;
  const int32_t* hp = host_ints(pos, n, &pos_host_);
  const int32_t* hs = hp ? host_ints(view_of_token, n, &seq_host_) : nullptr;
  if (!hs) return;
  for (int64_t t = 0; t < n; ++t)
    if (views[hs[t]].k_tails) return lacks("token-group key caches (q4c)");
  if (!page_tables(views, hs, hp, n, &pages_)) return;
  const bool same = plan_.n_tokens == n && plan_heads_[0] == s.n_head && plan_heads_[1] == s.n_head_kv &&
                    plan_heads_[2] == s.head_dim_v && std::equal(hp, hp + n, plan_pos_.begin()) &&
                    std::equal(hs, hs + n, plan_seq_.begin());
  if (!same) {
    if (!keep(replan_attention(*ctx_, s, hs, hp, n, &plan_))) {
      plan_.n_tokens = 0;  // no stale plan matches the next call
      return;
    }
    plan_pos_.assign(hp, hp + n);
    plan_seq_.assign(hs, hs + n);
    plan_heads_[0] = s.n_head, plan_heads_[1] = s.n_head_kv, plan_heads_[2] = s.head_dim_v;
  }
  const KvView& v0 = views[hs[0]];
  DevicePages kv;
  kv.k = pages_.k_base;
  kv.v = pages_.v_base;
  kv.block_size = v0.block_size;
  kv.k_row_bytes = v0.k_row_bytes, kv.v_row_bytes = v0.v_row_bytes;
  kv.k_type = v0.k_type, kv.v_type = v0.v_type;
  const float* dq = inf(q, span(n, static_cast<int64_t>(s.n_head) * s.head_dim, static_cast<int64_t>(s.n_head) * s.head_dim));
  float* dout = outf(out, span(n, static_cast<int64_t>(s.n_head) * s.head_dim_v,
                               static_cast<int64_t>(s.n_head) * s.head_dim_v),
                     false);
  const void* dpos = in(pos, static_cast<size_t>(n) * 4);
  const void* dseq = in(view_of_token, static_cast<size_t>(n) * 4);
  const void* dtab = in(pages_.ids.data(), pages_.ids.size() * 4);
  if (dq && dout && dpos && dseq && dtab)
    keep(cuda::attention(*ctx_, s, kv, dq, static_cast<const int32_t*>(dpos), static_cast<const int32_t*>(dseq),
                         static_cast<const int32_t*>(dtab), pages_.stride, plan_, dout));
  end_op();
}

}  // namespace

CudaBackendOptions cuda_backend_options_from_env() {
  CudaBackendOptions o;
  if (const char* e = std::getenv("EMBER_CUDA_GEMM_MIN_TOKENS"); e && *e) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end && *end == '\0' && v >= 0 && v < (1 << 30)) o.gemm_min_tokens = static_cast<int>(v);
  }
  if (const char* e = std::getenv("EMBER_CUDA_GRAPHS"); e && *e) o.decode_graphs = std::string(e) == "1";
  return o;
}

namespace {
Result<std::unique_ptr<Backend>> make_with(const CudaBackendOptions& o, std::shared_ptr<WeightStore> weights) {
  auto ctx = Context::create();
  if (!ctx) return ctx.status();
  return std::unique_ptr<Backend>(new CudaBackend(std::move(*ctx), o, std::move(weights)));
}
}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& o) {
  return make_with(o, std::make_shared<WeightStore>());
}

int64_t cuda_graphs_captured(const Backend& b) {
  const auto* c = dynamic_cast<const CudaBackend*>(&b);
  return c ? c->graphs_captured() : 0;
}

size_t cuda_weight_bytes(const Backend& b) {
  const auto* c = dynamic_cast<const CudaBackend*>(&b);
  return c ? c->weight_bytes() : 0;
}

BackendFactory cuda_backend_factory(const CudaBackendOptions& o) {
  auto weights = std::make_shared<WeightStore>();
  return [o, weights](ThreadPool&) { return make_with(o, weights); };
}

}  // namespace ember::cuda
