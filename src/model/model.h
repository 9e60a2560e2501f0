// Model: a loaded model file with its config and bound weights, checked at
// load against what the forward pass supports. Immutable after load: any
// number of ForwardContexts (model/forward.h) may run it at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/act_sparsity.h"
#include "model/config.h"
#include "model/forward.h"  // ForwardContext, SeqBatch: the callers of a Model use them
#include "model/io/model_file.h"
#include "model/kv_cache.h"
#include "model/shard.h"
#include "model/weights.h"

namespace ember {

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelShard& shard = {});
  // From an already opened file (takes ownership). A shard other than the
  // whole model (tensor / pipeline parallelism, model/shard.h) cuts the
  // file's tensors and the config down to it before binding: the config
  // then holds the shard's layers with their local sizes (n_vocab stays the
  // whole vocabulary), its linears carry their LinearShard, and a stage
  // without the head has no output matrix.
  static Result<std::unique_ptr<Model>> from_file(std::unique_ptr<ModelFile> file, const ModelShard& shard = {});
  // From a config, weights bound for it (bind_weights) and the file they
  // point into (owned). The config's layers may differ from what the file's
  // metadata says (a structured-pruning tool, tests); every layer is checked
  // against its weights and against what the forward pass runs: per-layer
  // head counts (n_head a multiple of n_head_kv), weight shapes, norms, and
  // plain linears only (Linear::is_plain()) unless `shard` says which.
  static Result<std::unique_ptr<Model>> from_parts(ModelConfig cfg, std::unique_ptr<ModelWeights> weights,
                                                   std::unique_ptr<ModelFile> file, const ModelShard& shard = {});

  // Activation bits of every block linear (Linear::act_bits; the output
  // head keeps its own): 8, the weights' int8 activation blocks, or 4, 4-bit
  // levels in them (W4A4 / W8A4; kernels/backend.h MatmulTarget). Set at
  // load from the file's ember.activation_bits (default 8); a runtime
  // override (--act-bits) calls this before any ForwardContext runs the
  // model (not thread-safe). 4 needs every block weight to multiply Q8_0
  // activations (Q4_0, Q5_0, Q8_0): an error names the first that does not.
  Status set_activation_bits(int bits);
  // Run-time routing of the MoE layers: top_k > 0 sets every MoE layer's
  // n_expert_used (experts per token; 1 <= top_k <= the smallest n_expert
  // and kMaxExpertsUsed), 0 keeps the file's; `sharing` turns batch-aware
  // expert sharing on (fraction in (0, 1], keep in [1, k]) or off
  // (fraction 0). A model without MoE layers accepts only top_k 0 and
  // sharing off. Before any ForwardContext runs the model (it sizes its
  // buffers by n_expert_used); not thread-safe.
  Status set_moe_routing(int top_k, const MoeSharing& sharing);
  // Hands every matmul weight (block linears and experts, the output head,
  // tied or not) to backend.prepare_weights (kernels/backend.h), which
  // rewrites them into its own layout or keeps its own copies; the buffers
  // it returns are owned by the model, and source bytes it no longer reads
  // leave the resident set where they lie in the mapped file. Every forward
  // result stays bit-identical. Returns how many weights it prepared, or
  // its error (nothing changed). Not thread-safe: call before any
  // ForwardContext runs the model (like set_activation_bits).
  Result<int> prepare_weights(Backend& backend);
  // prepare_weights for the CPU backend over `threads` threads: the
  // matrices whose interleaved layout pays at the active ISA level
  // (kernels/interleave.h: Q4_0, Q8_0, Q4_K, Q6_K with rows % 16 == 0 on
  // AVX-512) rewritten into it, in owned memory; sparse matrices and expert
  // stacks of the file that are not interleaved (MXFP4) copied unchanged
  // into 2 MiB pages. Returns how many tensors were rewritten or copied (0
  // when out of memory: the plain rows stay).
  int interleave_weights(int threads = 1);
  // The dtype part of what a backend must run for this model: every block
  // linear's matmul (with 4-bit activations where Linear::act_bits is 4),
  // the output head's, the embedding lookup (Backend::supports). Error:
  // the first weight the backend refuses, named. Shapes and structure are
  // checked at load.
  Status check_backend(const Backend& backend) const;
  // The tensors a device backend holds for this model
  // (Backend::upload_weights, at engine creation): every block linear's
  // matrix, the output head's and the embedding table, each once, in
  // layer order.
  std::vector<const TensorView*> backend_weights() const;
  // Activation sparsity (model/act_sparsity.h): the file's thresholds are
  // read at load (mode kAuto). set_activation_sparsity switches them (kOff:
  // the dense model) and picks the kernels (kDense drops the column copies);
  // build_activation_columns makes the input-channel-blocked copies of the
  // sparsified linears whose type has a column layout (Q8_0, Q4_K, Q6_K)
  // where the mode can use them (skip; auto while the driver's rule takes
  // columns at all: kernels/act_sparse.h) and returns their bytes (the weights stay as they are for prefill). Not
  // thread-safe: call before any ForwardContext runs the model.
  void set_activation_sparsity(ActSparsityMode mode);
  size_t build_activation_columns(int threads = 1);
  size_t activation_column_bytes() const;  // of the copies held now
  // The per-block thresholds [n_layer * 4] (empty: none).
  const std::vector<float>& activation_thresholds() const { return act_thresholds_; }
  // Replaces the thresholds (empty: none, the dense model; else [n_layer * 4],
  // finite and >= 0) and applies them under the current mode; column copies
  // are neither built nor dropped (calibration trials use it: the greedy
  // allocation of transform/act_sparsity.h). Errors: a wrong length, a
  // negative or non-finite value (nothing changed). Not thread-safe: no
  // ForwardContext may be running the model meanwhile (like
  // set_activation_sparsity).
  Status set_activation_thresholds(std::vector<float> t);
  // The context length this model runs with (prompt + output per sequence;
  // default at load: the trained context, n_ctx_train). It picks LongRoPE's
  // factors as llama.cpp and vLLM do: rope_factors_long when it exceeds the
  // original context (ModelConfig::rope_orig_ctx), else rope_factors_short,
  // for every token, so a sequence's cached keys never mix the two (the same
  // choice transformers makes for a sequence computed in one pass).
  // Recomputes the RoPE frequencies: call before any ForwardContext is
  // made for the model (not thread-safe, like set_activation_bits).
  void set_context_length(int64_t n_ctx);
  // Whether LongRoPE's long factors are in use (false without LongRoPE).
  bool rope_long_factors() const { return rope_long_; }
  // Picks LongRoPE's factor set directly (what set_context_length decides):
  // a tensor-parallel or pipeline rank takes rank 0's choice at the start of
  // each session (engine/parallel_runner.h). No effect without LongRoPE.
  // Same rules as set_context_length.
  void use_rope_long_factors(bool long_factors);
  const ModelConfig& config() const { return cfg_; }
  // The part of the model this process holds (the whole model by default).
  const ModelShard& shard() const { return shard_; }
  const ModelFile& file() const { return *file_; }
  const ModelWeights& weights() const { return *weights_; }
  // Inverse RoPE frequencies of layer il: [n_rot / 2].
  const float* inv_freq(int il) const { return inv_freq_[il].data(); }
  // Layers with bit-identical frequencies and magnitude share one RoPE table index in
  // [0, n_rope_tables()) (Gemma 3: local and global layers; most models: one),
  // so a step computes each set of angle tables once.
  int rope_table(int il) const { return rope_table_[il]; }
  int n_rope_tables() const { return n_rope_tables_; }
  // Total parameters and bytes of weight tensors.
  int64_t n_params() const;
  size_t weight_bytes() const;
  // What one decode step reads, in expectation: every tensor once, but one
  // row of the embedding table (all of it when it is also the output head)
  // and, of each MoE layer's experts, the share n_expert_used / n_expert
  // (uniform routing). Parameters likewise (the "active" parameters).
  struct DecodeReads {
    double bytes = 0, params = 0;
  };
  DecodeReads decode_reads() const;

 private:
  ModelConfig cfg_;
  ModelShard shard_;
  std::unique_ptr<ModelFile> file_;
  std::unique_ptr<ModelWeights> weights_;
  void compute_rope_frequencies();
  Status load_activation_sparsity();
  std::vector<float> act_thresholds_;  // [n_layer * 4], this model's blocks
  ActSparsityMode act_mode_ = ActSparsityMode::kAuto;
  std::vector<std::vector<float>> inv_freq_;
  bool rope_long_ = false;
  std::vector<int> rope_table_;  // [n_layer]
  int n_rope_tables_ = 0;
};

}  // namespace ember
