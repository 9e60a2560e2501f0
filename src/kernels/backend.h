// Backend: the op-level interface the forward pass calls, always with whole
// batches (every row of a step at once), so that an implementation can
// thread, tile and fuse as it likes. The CPU backend (kernels/cpu/) runs the
// dtype x ISA kernel registry, the matmul driver and the per-ISA op table
// behind it, at the level active at each call (EMBER_ISA=scalar: every op
// is its scalar reference twin of kernels/ref/). A CUDA backend can sit
// beside it later (kernels/cuda/) and is tested against the same
// references, op by op, by adding its factory to
// tests/kernels/backend_under_test.h (backend_ops_test.cpp,
// backend_attention_test.cpp).
//
// Arithmetic contract, for every implementation: each output row depends
// only on its own input row(s) (and, for attention, on its sequence's K/V),
// computed in a fixed order, whatever the number of rows, how they are
// split over threads, or which other rows share the batch (batch
// invariance; see kernels/matmul.h and kernels/attention.h for the two
// reductions that need care). Pointers are the backend's memory
// (BackendBuffer; host memory for the CPU backend).
//
// Besides the compute ops, a backend stores the K/V rows into the paged pool
// (kv_store), says which weight types it runs (supports), prepares weights
// in its own layout (prepare_weights), gives out its memory (alloc,
// host_memory, copy) and reports its errors once per step (sync):
// what the engine needs of a device backend (docs/cuda.md, "The Backend
// seam"); an engine picks one with a BackendFactory.
//
// Ownership and threading: a Backend is owned by one ForwardContext and used
// from one thread at a time (it owns scratch memory and drives a thread
// pool it does not own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/act_sparse.h"
#include "kernels/attention.h"
#include "kernels/moe.h"
#include "kernels/ops.h"

namespace ember {

// silu(gate) * up, gelu_tanh(gate) * up, gpt-oss's clamped SwiGLU (swiglu_oai_row)
enum class GatedActivation { kSwiGlu, kGeGluTanh, kSwiGluOai };

// One output of a matmul that shares its input with others:
// y[t * ldy + o] = dot(x row t, w row o) for o < w->ne[1].
// act_bits 4: the activations are rounded to 4-bit levels inside their
// int8 blocks (KernelSet::quantize_row_int4: symmetric [-7, 7] per 32
// values, scale amax / 7), for weights whose activation type has that form
// (Q8_0: Q4_0, Q5_0, Q8_0 weights); 0 or 8: the activation type as it is.
// Activation sparsity (TEAL; kernels/act_sparse.h): act_threshold > 0 makes
// the product read x' = x * [|x| > act_threshold] (the same threshold for
// every target of a call: they share x); `cols`, an input-channel-blocked
// copy of w, lets the backend skip the weights of zero inputs, which gives
// the same bits as the dense product of x' (so `skip` only picks speed):
// kAuto where the measured rule says it pays (kernels/cpu/matmul.cpp), kOn
// whenever a column kernel exists and the call has at most kColMaxTokens
// tokens, kOff never.
enum class ActSkip : uint8_t { kAuto, kOn, kOff };
struct MatmulTarget {
  const TensorView* w = nullptr;  // [n_out, n_in] (ne[0] = n_in)
  float* y = nullptr;             // [n_tokens, ldy]
  int64_t ldy = 0;
  int act_bits = 0;
  float act_threshold = 0.0f;
  const ColumnWeights* cols = nullptr;  // [n_out, n_in] as w, or null
  ActSkip skip = ActSkip::kAuto;
};

// The ops a backend is asked about per weight type (Backend::supports).
enum class WeightOp : uint8_t {
  kMatmul,      // matmul / moe_matmul with weights of the type
  kMatmulAct4,  // the same with 4-bit activations (MatmulTarget::act_bits 4)
  kEmbed,       // embed from a table of the type
  kExperts,     // moe_matmul with expert matrices of the type (and the MoE ops around it)
};

// A weight for Backend::prepare_weights: a 2-D matrix the forward pass
// hands to matmul (slices empty), or a 3-D stack of expert matrices
// [n_in, rows, n_expert] (ne order) with the 2-D views into it that
// moe_matmul is handed (each expert's matrix, or a row range of one).
struct WeightToPrepare {
  TensorView* tensor = nullptr;
  std::vector<TensorView*> slices;
  bool mapped = false;  // its bytes lie in a mapped file (a copy lets them leave memory)
};
// Called by prepare_weights, from any thread, with the bytes of a weight it
// no longer reads (its rows now live elsewhere): the caller may drop them
// from memory.
using WeightRetired = std::function<void(const void* data, size_t bytes)>;

// Memory a backend computes in (activations and scratch: Backend::alloc):
// host memory for the CPU backend (and by default), device memory for a
// device backend. data() is what the backend's ops are handed; the caller
// reads or writes it directly only when the backend's memory is the host's.
// Owned by whoever allocated it; freed on destruction.
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  virtual void* data() const = 0;
  virtual size_t bytes() const = 0;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
};

// What a backend measured of its own work, summed since it was made
// (Backend::times): the model runner reports each step's share (ModelRunner
// ::last_step_times), `ember bench throughput` the CPU-side overhead per
// step against it.
struct BackendTimes {
  // A device backend: the device's time over the steps' work (per step,
  // from its first op reaching the device to its last one done: kernels and
  // copies, plus any gaps the host left between them). false: the backend
  // computes on the calling thread (its time is the caller's wall time).
  bool device_measured = false;
  double device_seconds = 0;
  // Host wall time spent copying between host memory and the backend's
  // (inputs staged, outputs copied back, page copies; waits for the
  // device's earlier work not included), and the bytes copied.
  double copy_seconds = 0;
  int64_t copy_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Whether this backend runs `op` with weights of type t (a model's
  // weights are checked against it before a runner is made over it:
  // Model::check_backend). Default: nothing (a backend says what it runs).
  virtual bool supports(DType t, WeightOp op) const {
    (void)t;
    (void)op;
    return false;
  }
  // Weight preparation, once per model before its first step: rewrites the
  // weights w[0..n) into this backend's own layout where it has one (the
  // views' type, data and nbytes changed in place, a 3-D tensor's slices
  // moved with it; every op's result keeps its bits), or keeps its own copy
  // keyed by the view (a device upload). Buffers the rewritten views point
  // into are appended to *owners (the caller keeps them as long as the
  // views); `retired` (may be empty) hears of every source range no longer
  // read. Returns how many weights were rewritten or copied; on an error (a
  // failed allocation or upload, a type it cannot hold) no view has
  // changed. Not thread-safe: before any step runs over the weights.
  // Default: nothing to prepare (0).
  virtual Result<int> prepare_weights(const WeightToPrepare* w, int64_t n, std::vector<std::shared_ptr<void>>* owners,
                                      const WeightRetired& retired) {
    (void)w;
    (void)n;
    (void)owners;
    (void)retired;
    return 0;
  }

  // A buffer of `bytes` (> 0) in this backend's memory, zeroed and 64-byte
  // aligned; null when the memory cannot be had. Default: host memory.
  virtual std::unique_ptr<BackendBuffer> alloc(size_t bytes);
  // Whether alloc()'s memory is host memory (the caller may then read and
  // write it directly). A backend whose memory is not (a device's) takes
  // host pointers as well in every op (it copies them in and out), but is
  // fast only over its own buffers. Default: true.
  virtual bool host_memory() const { return true; }
  // Copies `bytes` from src to dst, each host memory or this backend's;
  // when dst is host memory it holds the bytes on return. Default: memcpy.
  virtual void copy(void* dst, const void* src, size_t bytes);
  // Waits for the work queued so far and returns the first error of the
  // ops since the last call (then clears it): ops return nothing, so a
  // backend whose ops can fail (a device's: an unsupported case, a failed
  // launch or allocation) keeps the error for here; the forward pass asks
  // once per step. Default: ok (the CPU backend's ops do not fail).
  virtual Status sync() { return Status::ok(); }
  // Host memory for buffers the backend copies to or from at every step
  // (the logits rows): page-locked on a device backend, so the copies run
  // at the bus's rate without a bounce through the driver's buffers.
  // Zeroed; null when the memory cannot be had. Default: Backend::alloc's
  // host memory.
  virtual std::unique_ptr<BackendBuffer> alloc_host(size_t bytes) { return Backend::alloc(bytes); }
  // Copies the weights w[0..n) into the backend's memory now (the views
  // unchanged), so that a model too large for the device is an error when
  // the engine is made and its first step uploads nothing. Errors: the
  // memory is short (said with the bytes needed and free), a type it cannot
  // hold, a failed copy. Default: nothing (the weights are read in place).
  virtual Status upload_weights(const TensorView* const* w, int64_t n) {
    (void)w;
    (void)n;
    return Status::ok();
  }
  // Its measures so far (see BackendTimes). Default: none (a host backend).
  virtual BackendTimes times() const { return {}; }

  // Every target's product with the same activations x [n_tokens, n_in]
  // (row stride ldx; every target's w has ne[0] = n_in). x is converted to
  // each distinct activation type (vec_dot_type of the weights) once and
  // shared by all targets reading it (Q/K/V; gate/up; the 4-bit form of a
  // type counts as a type of its own, MatmulTarget::act_bits). Results are
  // bit-identical to one matmul per target.
  virtual void matmul(const float* x, int64_t ldx, int64_t n_tokens, const MatmulTarget* targets,
                      int n_targets) = 0;
  void matmul(const TensorView& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens) {
    const MatmulTarget t{&w, y, ldy};
    matmul(x, ldx, n_tokens, &t, 1);
  }

  // out[t, :] = dequantize(table row ids[t]) * scale; out: [n, table.ne[0]].
  virtual void embed(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) = 0;

  // RMSNorm of n_rows rows of dim elements: out = x / rms(x) * w (w [dim],
  // null: no weight). Row strides ld_x / ld_out; out may equal x.
  virtual void rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                        int64_t dim, float eps) = 0;

  // RoPE tables for n positions: cos/sin [n, n_rot / 2], angle pos[t] * inv_freq[i].
  virtual void rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* cos_t,
                           float* sin_t) = 0;
  // Rotates the first n_rot dims of each of n_heads heads (head_dim apart)
  // of each of n rows (stride ld), row t with table row t.
  virtual void rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style,
                    const float* cos_t, const float* sin_t) = 0;

  // x[t, :dim] += b for n rows of stride ld.
  virtual void add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b) = 0;
  // y[i] += x[i] for n elements (residual connection).
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // gate[t, :] = act(gate[t, :]) * up[t, :] for n rows of dim.
  virtual void gated_activation(GatedActivation a, float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                                int64_t n, int64_t dim) = 0;
  // x[i] = cap * tanh(x[i] / cap) for n elements (cap > 0).
  virtual void softcap(float* x, int64_t n, float cap) = 0;

  // Orthonormal Hadamard rotation (kernels/hadamard.h) of each of n_heads
  // heads (head_dim apart, head_dim a valid size) of each of n rows (stride
  // ld), in place; transpose: the inverse rotation.
  virtual void hadamard(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, bool transpose) = 0;

  // Mixture of experts (contracts in kernels/moe.h). Router: for each of n
  // rows of logits [n, r.n_expert] (stride ld), the r.k chosen experts
  // ids [n, r.k] in rank order and their weights [n, r.k].
  virtual void moe_route(const float* logits, int64_t ld, int64_t n, const MoeRouting& r, int32_t* ids,
                         float* weights) = 0;
  // Grouped expert matmul, one call per layer and step: for each slot
  // s < n_slots, targets[i].y[s * ldy + o] = dot(x row x_row[s] (x_row null:
  // row s), targets[i].experts[expert[s]] row o), each x row converted once
  // per activation type and each chosen expert's matrix read once for all
  // its slots; bit-identical to matmul() of that row and matrix.
  virtual void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                          int n_expert, const ExpertTarget* targets, int n_targets) = 0;
  // out[t, :dim] (+)= sum_{j < k} weights[t * k + j] * y[(t * k + j) * ldy + :]
  // for n rows (stride ld_out), j in order.
  virtual void moe_combine(const float* y, int64_t ldy, const float* weights, int k, int64_t n, int64_t dim, float* out,
                           int64_t ld_out, bool accumulate) = 0;

  // K/V stores into the paged pool, one call per layer and step: for each
  // token t < n, the k_width floats at k + t * ldk are encoded
  // (kv_store_row, kernels/kv_types.h) into the K row of position pos[t]
  // of views[view_of_token[t]] (KvStoreView: skipped where k_blocks is
  // null), and the v_width floats at v + t * ldv into its V row. Every row
  // gets the bytes kv_store_row gives it alone, whatever the batch or the
  // threads; the (view, position) pairs of a call are distinct. The default
  // writes host pages on the calling thread (what a backend over host
  // memory may keep).
  virtual void kv_store(const float* k, int64_t ldk, int64_t k_width, const float* v, int64_t ldv, int64_t v_width,
                        const int32_t* pos, int64_t n, const KvStoreView* views, const int32_t* view_of_token);

  // Ragged causal attention (see kernels/attention.h): token t attends
  // through views[view_of_token[t]] to the keys at positions <= pos[t].
  // q: [n, n_head * head_dim]; out: [n, n_head * head_dim_v].
  virtual void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n,
                         const KvView* views, const int32_t* view_of_token, float* out) = 0;
};

// The CPU backend: kernels at the active ISA level (core/cpu_features.h,
// EMBER_ISA), work split over `pool` (not owned; must outlive it). Its
// prepare_weights interleaves the matrices whose layout pays at the active
// level (kernels/interleave.h) into 2 MiB-aligned host buffers; supports()
// is cpu_backend_supports.
std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);
// Makes the Backend a model runner computes on (one per runner: the
// target's, a draft's), over `pool` (not owned; must outlive the backend);
// an error when the backend cannot start (no device). An empty factory
// means the CPU backend (EngineConfig::backend).
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(ThreadPool& pool)>;
// The backend `f` makes, or the CPU backend for an empty f.
Result<std::unique_ptr<Backend>> make_backend(const BackendFactory& f, ThreadPool& pool);

// What the CPU backend runs at the active ISA level: matmul where the
// registry has a dot and a dequantizer for t (or the interleaved forms), 4-bit
// activations where t's activation type has a 4-bit quantizer, embedding
// where t's rows can be dequantized (the model loader checks every file
// against it).
bool cpu_backend_supports(DType t, WeightOp op);

}  // namespace ember
