// The CPU backend (kernels/backend.h): matmul through the matmul driver
// (kernels/matmul.h: shared activation conversion, one parallel section for
// all targets), embedding through the dtype x ISA registry, and the row ops
// and attention through the op table (kernels/cpu/op_table.h), all at the
// ISA level active when the op is called, threaded over a ThreadPool; K/V
// stores with the scalar row encoder of kernels/kv_types.h; weights
// prepared in the interleaved layouts of kernels/interleave.h.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype_sparse.h"
#include "kernels/backend.h"
#include "kernels/cpu/moe_matmul.h"
#include "kernels/cpu/op_table.h"
#include "kernels/interleave.h"
#include "kernels/kv_types.h"
#include "kernels/matmul.h"
#include "kernels/ref/moe.h"
#include "kernels/registry.h"

namespace ember {
namespace {

constexpr int64_t kElementGrain = 16384;  // elements per task of the element-wise ops
constexpr int64_t kKvStoreGrain = 32;     // tokens per task of kv_store (a decode step stays on one thread)

// Backend::kv_store's rows of tokens [b, e).
void store_kv_rows(const float* k, int64_t ldk, int64_t k_width, const float* v, int64_t ldv, int64_t v_width,
                   const int32_t* pos, const KvStoreView* views, const int32_t* view_of_token, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) {
    const KvStoreView& s = views[view_of_token[t]];
    const int64_t p = pos[t], block = p / s.block_size, row = p % s.block_size;
    if (s.k_blocks) kv_store_row(s.k_type, k + t * ldk, k_width, s.k_blocks[block] + row * s.k_row_bytes);
    kv_store_row(s.v_type, v + t * ldv, v_width, s.v_blocks[block] + row * s.v_row_bytes);
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}
  const char* name() const override { return "cpu"; }
  bool supports(DType t, WeightOp op) const override { return cpu_backend_supports(t, op); }
  Result<int> prepare_weights(const WeightToPrepare* w, int64_t n, std::vector<std::shared_ptr<void>>* owners,
                              const WeightRetired& retired) override;

  void matmul(const float* x, int64_t ldx, int64_t n_tokens, const MatmulTarget* targets, int n_targets) override {
    ember::matmul(x, ldx, n_tokens, targets, n_targets, pool_, scratch_);
  }

  void embed(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) override {
    const int64_t E = table.ne[0];
    const DequantizeRowFn dequantize = kernels(table.type).dequantize_row;
    const OpTable& ops = op_table();
    pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        if (dequantize) {
          dequantize(table.row(ids[t]), out + t * E, E);
        } else {
          dequantize_row(table, ids[t], out + t * E);  // interleaved rows (a tied output head)
        }
        if (scale != 1.f) ops.scale_row(out + t * E, scale, E);
      }
    });
  }

  void rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows, int64_t dim,
                float eps) override {
    const OpTable& ops = op_table();
    pool_.parallel_for(n_rows, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) ops.rms_norm_row(x + t * ld_x, w, out + t * ld_out, dim, eps);
    });
  }

  void rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t,
                   float* sin_t) override {
    const int64_t half = n_rot / 2;
    const OpTable& ops = op_table();
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        ops.rope_angles(static_cast<float>(pos[t]), inv_freq, n_rot, cos_t + t * half, sin_t + t * half);
    });
  }

  void rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style,
            const float* cos_t, const float* sin_t) override {
    const int64_t half = n_rot / 2;
    const OpTable& ops = op_table();
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        for (int h = 0; h < n_heads; ++h)
          ops.rope_head(x + t * ld + static_cast<int64_t>(h) * head_dim, n_rot, style, cos_t + t * half,
                        sin_t + t * half);
    });
  }

  void add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b) override {
    const OpTable& ops = op_table();
    for (int64_t t = 0; t < n; ++t) ops.add_row(x + t * ld, b, dim);
  }

  void add(float* y, const float* x, int64_t n) override {
    const OpTable& ops = op_table();
    pool_.parallel_for(n, kElementGrain, [&](int64_t b, int64_t e, int) { ops.add_row(y + b, x + b, e - b); });
  }

  void gated_activation(GatedActivation a, float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t n,
                        int64_t dim) override {
    const OpTable& ops = op_table();
    const auto fn = a == GatedActivation::kGeGluTanh   ? ops.geglu_tanh_row
                    : a == GatedActivation::kSwiGluOai ? ops.swiglu_oai_row
                                                       : ops.swiglu_row;
    pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) fn(gate + t * ld_gate, up + t * ld_up, dim);
    });
  }

  void softcap(float* x, int64_t n, float cap) override {
    const OpTable& ops = op_table();
    pool_.parallel_for(n, kElementGrain, [&](int64_t b, int64_t e, int) { ops.softcap_row(x + b, e - b, cap); });
  }

  void hadamard(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, bool transpose) override {
    const OpTable& ops = op_table();
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        for (int h = 0; h < n_heads; ++h)
          ops.hadamard_row(x + t * ld + static_cast<int64_t>(h) * head_dim, head_dim, transpose);
    });
  }

  // The router and the combine are the scalar functions of kernels/ref/ at
  // every level (a few dozen values per token).
  void moe_route(const float* logits, int64_t ld, int64_t n, const MoeRouting& r, int32_t* ids,
                 float* weights) override {
    for (int64_t t = 0; t < n; ++t) ref::moe_route_row(logits + t * ld, r, ids + t * r.k, weights + t * r.k);
  }

  void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                  int n_expert, const ExpertTarget* targets, int n_targets) override {
    ember::moe_matmul(x, ldx, n_slots, expert, x_row, n_expert, targets, n_targets, pool_, moe_scratch_);
  }

  void moe_combine(const float* y, int64_t ldy, const float* weights, int k, int64_t n, int64_t dim, float* out,
                   int64_t ld_out, bool accumulate) override {
    pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        ref::moe_combine_row(y + t * k * ldy, ldy, weights + t * k, k, dim, out + t * ld_out, accumulate);
    });
  }

  // Rows are independent: split over the pool (each row's bytes are
  // kv_store_row's, whichever thread writes it).
  void kv_store(const float* k, int64_t ldk, int64_t k_width, const float* v, int64_t ldv, int64_t v_width,
                const int32_t* pos, int64_t n, const KvStoreView* views, const int32_t* view_of_token) override {
    pool_.parallel_for(n, kKvStoreGrain, [&](int64_t b, int64_t e, int) {
      store_kv_rows(k, ldk, k_width, v, ldv, v_width, pos, views, view_of_token, b, e);
    });
  }

  void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n, const KvView* views,
                 const int32_t* view_of_token, float* out) override {
    int32_t max_pos = 0;
    for (int64_t t = 0; t < n; ++t) max_pos = std::max(max_pos, pos[t]);
    const int64_t need = attention_scratch_floats(s, n, pool_.size(), max_pos);
    if (static_cast<int64_t>(attn_scratch_.size()) < need) attn_scratch_.resize(need);
    op_table().attention_ragged(s, q, pos, n, views, view_of_token, out, attn_scratch_.data(), pool_);
  }

 private:
  ThreadPool& pool_;
  MatmulScratch scratch_;
  MoeMatmulScratch moe_scratch_;
  std::vector<float> attn_scratch_;
};

// A buffer for a large tensor, 2 MiB aligned and marked for transparent
// huge pages (far fewer page faults when it is filled); null when out of
// memory.
std::shared_ptr<uint8_t> huge_page_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) return nullptr;
  madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// Whether the CPU interleaves w (kernels/interleave.h): a matrix when its
// layout pays for its rows at the active level; a 3-D stack when it pays
// for all its rows and for each slice's, every slice of its type and
// starting on a 16-row group (the slices then point into the rewritten
// tensor).
bool interleaves(const WeightToPrepare& w) {
  const TensorView& t = *w.tensor;
  if (w.slices.empty()) return interleave_pays(t.type, t.ne[1]);
  bool ok = interleave_pays(t.type, t.ne[1] * t.ne[2]);
  for (const TensorView* v : w.slices)
    ok = ok && v->type == t.type && interleave_pays(v->type, v->ne[1]) &&
         (static_cast<const uint8_t*>(v->data) - static_cast<const uint8_t*>(t.data)) %
                 (16 * static_cast<int64_t>(t.row_bytes())) ==
             0;
  return ok;
}

// Whether w's bytes are copied, unchanged, into 2 MiB pages: a weight in the
// file mapping, whose pages are mostly 4 KiB (decode streams it once a token
// and would meet a TLB miss every 4 KiB), that is not interleaved (which
// copies it anyway): a sparse matrix (core/dtype_sparse.h; docs/pruning.md,
// "Kernels"), or a stack of experts (MXFP4: a decode step streams a few of
// them, 2 - 5 MB each at scattered places; docs/history/2026-12-07-moe-tg-c.md).
// A weight made at load (--detect-sparsity, converted Hugging Face experts)
// stays where it is: a copy would hold it twice.
bool relocates(const WeightToPrepare& w) {
  if (!w.mapped || interleaves(w)) return false;
  return w.slices.empty() ? dtype_is_sparse(w.tensor->type) : true;
}

Result<int> CpuBackend::prepare_weights(const WeightToPrepare* w, int64_t n, std::vector<std::shared_ptr<void>>* owners,
                                        const WeightRetired& retired) {
  std::vector<const WeightToPrepare*> todo;
  for (int64_t i = 0; i < n; ++i)
    if (interleaves(w[i]) || relocates(w[i])) todo.push_back(&w[i]);
  // Every buffer first: an allocation that fails leaves every view as it was.
  std::vector<std::shared_ptr<uint8_t>> bufs(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) {
    bufs[i] = huge_page_buffer(todo[i]->tensor->nbytes);
    if (!bufs[i])
      return Status::errorf("out of memory for the interleaved layout of '{}' ({} bytes)", todo[i]->tensor->name,
                            todo[i]->tensor->nbytes);
  }
  pool_.parallel_for(static_cast<int64_t>(todo.size()), 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const TensorView& t = *todo[i]->tensor;
      if (relocates(*todo[i]))
        std::memcpy(bufs[i].get(), t.data, t.nbytes);
      else
        interleave_rows(t.type, t.data, t.nrows(), t.ne[0], bufs[i].get());
      if (retired) retired(t.data, t.nbytes);
    }
  });
  for (size_t i = 0; i < todo.size(); ++i) {
    TensorView& t = *todo[i]->tensor;
    const bool relocated = relocates(*todo[i]);
    for (TensorView* v : todo[i]->slices) {
      if (!relocated) v->type = interleaved_type(v->type);
      v->data = bufs[i].get() + (static_cast<const uint8_t*>(v->data) - static_cast<const uint8_t*>(t.data));
    }
    if (!relocated) t.type = interleaved_type(t.type);
    t.data = bufs[i].get();
    owners->push_back(bufs[i]);
  }
  return static_cast<int>(todo.size());
}

// Host memory, 64-byte aligned and zeroed.
class HostBuffer final : public BackendBuffer {
 public:
  HostBuffer(void* p, size_t bytes) : p_(p), bytes_(bytes) {}
  ~HostBuffer() override { std::free(p_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const override { return p_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* p_;
  size_t bytes_;
};

}  // namespace

std::unique_ptr<BackendBuffer> Backend::alloc(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) return nullptr;
  std::memset(p, 0, rounded);
  return std::make_unique<HostBuffer>(p, bytes);
}

void Backend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

bool cpu_backend_supports(DType t, WeightOp op) {
  const KernelSet& k = kernels(t);
  const bool interleaved = dtype_row_group(t) > 1 && k.vec_dot_rows && k.vec_dot_tile;  // kernels/interleave.h
  const bool matmul = interleaved || (k.vec_dot && k.dequantize_row);
  switch (op) {
    case WeightOp::kMatmul:
    case WeightOp::kExperts: return matmul;
    case WeightOp::kMatmulAct4: return matmul && kernels(vec_dot_type(t)).quantize_row_int4 != nullptr;
    case WeightOp::kEmbed: return interleaved || k.dequantize_row != nullptr;
  }
  return false;
}

void Backend::kv_store(const float* k, int64_t ldk, int64_t k_width, const float* v, int64_t ldv, int64_t v_width,
                       const int32_t* pos, int64_t n, const KvStoreView* views, const int32_t* view_of_token) {
  store_kv_rows(k, ldk, k_width, v, ldv, v_width, pos, views, view_of_token, 0, n);
}

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }

Result<std::unique_ptr<Backend>> make_backend(const BackendFactory& f, ThreadPool& pool) {
  if (!f) return make_cpu_backend(pool);
  auto be = f(pool);
  if (be && !be.value()) return Status::error("the backend factory made no backend");
  return be;
}

}  // namespace ember
