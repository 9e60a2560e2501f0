// ForwardContext: runs batches of tokens (one sequence, or a ragged batch of
// several) through a Model, on a Backend it owns, with its own activation
// buffers (allocated once for max_batch tokens; nothing is allocated per
// token or per step). The residual stream and the sub-blocks' scratch
// (Q/K/V, the attention output, the FFN's and MoE's intermediates) are the
// backend's memory (Backend::alloc); the step's layout, the RoPE tables and
// the logits are host memory (a device backend copies them in or out).
// Host code touches the residual stream only through Backend::copy, except
// on paths a device runner refuses (tensor parallelism, observers, MoE).
//
// A step has three stages, public so that other drivers can run a subset of
// the layers (pipeline stages, self-speculative drafts):
//   prepare(seqs)        validate the batch, lay out its tokens
//   embed()              hidden = token embeddings (* embd_scale)
//   run_layers(l0, l1)   blocks [l0, l1) over hidden (their K/V written)
//   head(rows)           output norm, output matmul and final softcap of
//                        chosen hidden rows -> logits
// forward_ragged() is prepare + embed + run_layers(0, n_layer) + head of the
// rows the batch asked for; forward() is a one-sequence forward_ragged per
// max_batch chunk. There is one output-head path.
//
// Arithmetic: every op is a Backend op over whole batches; each row's bits
// depend only on its own token and sequence (batch invariance, see
// kernels/backend.h). An observer does not change any value.
//
// Tensor parallelism (a model holding a tensor-parallel shard, model/shard.h,
// with set_collective): embed() looks up this rank's vocabulary rows and
// all-reduces (the other ranks add zeros: exact), each block all-reduces
// after O and after down (layers/), and the head all-gathers the ranks'
// vocabulary slices into whole logits rows on every rank. The collective
// adds in rank order, so every rank holds the same bits and a run repeats
// them. A failed collective fails the step (collective_status()).
//
// Ownership and threading: borrows the Model (must outlive it); owns the
// Backend; one thread at a time (the backend parallelises inside ops). The
// KV caches of a step are borrowed for that step, the collective for the
// context's life.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/collective.h"
#include "model/config.h"
#include "model/forward_observer.h"
#include "model/kv_cache.h"
#include "model/layers/layer_context.h"
#include "model/layers/moe.h"

namespace ember {

class Model;

// One sequence's slice of a ragged multi-sequence batch: tokens[0..n) at
// positions pos0, pos0+1, ... whose K/V are written to and read from `cache`.
struct SeqBatch {
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  int64_t pos0 = 0;
  KvCache* cache = nullptr;
  bool want_logits = false;  // logits of the last token of this slice
  bool all_logits = false;   // logits of every token of this slice (overrides want_logits)
  // Rows computed elsewhere (a speculative verification whose draft is this
  // model's own stack: engine/speculative/draft_proposer.h): the final residual
  // rows [n_pre, n_embd] of tokens 0 .. n_pre-1, whose K/V are in `cache`
  // already. Only tokens n_pre .. n-1 run through the layers; with
  // all_logits (required) the slice's n logits rows are the head over the
  // given rows, then the computed ones. 0 <= n_pre < n.
  const float* pre_hidden = nullptr;
  int64_t n_pre = 0;
};

class ForwardContext {
 public:
  // max_batch: most tokens per step (forward() splits longer inputs). The
  // CPU backend over `pool` (not owned; must outlive this).
  ForwardContext(const Model& model, ThreadPool& pool, int max_batch = 512);
  // Another backend (owned).
  ForwardContext(const Model& model, std::unique_ptr<Backend> backend, int max_batch = 512);
  ~ForwardContext();
  ForwardContext(const ForwardContext&) = delete;
  ForwardContext& operator=(const ForwardContext&) = delete;

  // Runs tokens[0..n) at positions pos0, pos0+1, ... through the model using
  // (and extending) `cache`. Logits [n_vocab] of the last token go to
  // `logits` (may be null); if `all_logits` is non-null it receives
  // [n, n_vocab] for every token.
  Status forward(const int32_t* tokens, int64_t n, int64_t pos0, KvCache& cache, float* logits,
                 float* all_logits = nullptr);

  // Ragged batch: one pass over the tokens of all sequences together (each
  // weight matrix read once for all of them); every token attends only to its
  // own sequence. The total token count must be <= max_batch. For each
  // sequence with want_logits, in order, one row [n_vocab] goes to `logits`
  // (n rows, one per token, for a slice with all_logits).
  // Each sequence gets the same bits it would get alone (batch invariance).
  Status forward_ragged(const SeqBatch* seqs, int n_seqs, float* logits);

  // --- Stages (see the top of this file) ---
  // Validates the batch (as forward_ragged) and lays out its tokens: token t
  // of the step is token j of sequence i in the order given. The caches are
  // borrowed until the next prepare().
  Status prepare(const SeqBatch* seqs, int n_seqs);
  int64_t n_tokens() const { return n_; }
  // Token indices (into the prepared step) whose logits the batch asked for,
  // in order: want_logits gives a sequence's last token, all_logits each
  // (given rows, SeqBatch::pre_hidden, are not tokens of the step: not here).
  const std::vector<int64_t>& logit_rows() const { return logit_rows_; }
  // hidden() = embeddings of the prepared tokens.
  void embed();
  // Blocks [l0, l1) over hidden(), in place; 0 <= l0 <= l1 <= n_layer. The
  // RoPE angles of the step are computed once per set of layer frequencies.
  void run_layers(int l0, int l1);
  // logits [n_rows, n_vocab] of hidden() rows rows[0..n_rows) (token
  // indices < n_tokens()).
  void head(const int64_t* rows, int64_t n_rows, float* logits);
  // The residual stream [n_tokens, n_embd] between stages (a pipeline stage
  // reads or fills it).
  // The backend's memory (Backend::host_memory: host memory on the CPU).
  float* hidden() { return x_; }
  const float* hidden() const { return x_; }

  // Observer of linear inputs and block outputs (null: off, the default).
  // Borrowed; must outlive its use.
  void set_observer(ForwardObserver* observer) { observer_ = observer; }

  // The tensor-parallel group of a tensor-parallel shard (borrowed; every
  // rank of the group runs the same steps). Required for such a model.
  void set_collective(Collective* comm) { tp_.comm = comm; }
  // The first failed collective of the context (ok without one): stages
  // run by hand (run_layers, head) check it; forward_ragged returns it.
  const Status& collective_status() const { return tp_.status; }

  int max_batch() const { return max_batch_; }
  // The backend the steps run on (its memory holds hidden()).
  Backend& backend() { return *backend_; }
  // The backend's errors since the last call (Backend::sync, waiting for its
  // queued work), then the collective's: forward_ragged returns it; stages
  // run by hand call it after their last stage.
  Status finish();

  // Experts the MoE layers of this context's steps have read (MoeStats:
  // counted from the first step or the last reset; zero without MoE).
  const MoeStats& moe_stats() const { return moe_stats_; }
  void reset_moe_stats() { moe_stats_ = {}; }

 private:
  const Model& model_;
  const ModelConfig& cfg_;
  std::unique_ptr<Backend> backend_;
  ForwardObserver* observer_ = nullptr;
  int max_batch_;

  // The prepared step.
  int64_t n_ = 0;
  std::vector<int32_t> tok_;         // [max_batch] tokens
  std::vector<int32_t> pos_;         // [max_batch] positions
  std::vector<int32_t> seg_;         // [max_batch] sequence of each token
  std::vector<KvCache*> segs_;       // cache of each sequence
  std::vector<KvView> seg_views_;    // [max_batch] per sequence, current layer
  std::vector<KvStoreView> seg_stores_;  // [max_batch] per sequence, current layer (K/V writes)
  std::vector<int64_t> logit_rows_;  // see logit_rows()
  // forward_ragged's logits rows in order: a given row (pre_hidden) or a
  // step token's index, as -1 - index (given rows not counted in n_).
  std::vector<const float*> given_rows_;
  std::vector<int64_t> out_rows_;
  std::vector<const float*> head_src_;  // head inputs of a step (grown once)
  // Tensor parallelism (model_.shard().tensor_parallel()).
  TpGroup tp_;
  TpGroup* tp() { return tp_.comm ? &tp_ : nullptr; }
  std::vector<int32_t> tp_ids_;       // [n] this rank's embedding rows of the tokens
  std::vector<float> tp_logits_;      // [rows, vocab_stride] this rank's slice of the logits
  std::vector<float> tp_gathered_;    // [tp_size, rows, vocab_stride]
  void head_of(const float* const* src, int64_t n_rows, float* logits);

  // Activations, shapes for a step of n tokens (widths: the largest
  // layer), in the backend's memory.
  std::unique_ptr<BackendBuffer> x_buf_, xn_buf_, y_buf_;
  float* x_ = nullptr;   // [n, n_embd] residual stream
  float* xn_ = nullptr;  // [n, n_embd] normed input of a sub-block / of the head
  float* y_ = nullptr;   // [n, n_embd] sub-block output
  // The sub-blocks' scratch, in the backend's memory (Backend::alloc;
  // null: not needed by this model).
  std::unique_ptr<BackendBuffer> q_;     // [n, max_n_head * head_dim]
  std::unique_ptr<BackendBuffer> k_;     // [n, max_n_head_kv * head_dim]
  std::unique_ptr<BackendBuffer> v_;     // [n, max_n_head_kv * head_dim_v]
  std::unique_ptr<BackendBuffer> attn_;  // [n, max_n_head * head_dim_v]
  std::unique_ptr<BackendBuffer> gate_;  // [n, max_n_ff]
  std::unique_ptr<BackendBuffer> up_;    // [n, max_n_ff]
  // Mixture-of-Experts layers (model/layers/moe.h MoeBuffers; null without).
  std::unique_ptr<BackendBuffer> moe_logits_, moe_weights_, moe_gate_, moe_up_, moe_down_, moe_shared_gate_,
      moe_shared_up_, moe_shared_logit_, moe_shared_weight_;
  std::vector<float> moe_observed_;
  // A buffer of n floats from the backend (null for n == 0).
  std::unique_ptr<BackendBuffer> floats(size_t n);
  std::vector<int32_t> moe_ids_, moe_x_row_, moe_shared_id_;
  MoeShareScratch moe_share_;
  MoeStats moe_stats_;
  // RoPE angles, per Model::rope_table: [n_rope_tables][max_batch, n_rot / 2],
  // computed by the first layer of the step that needs them: host memory
  // (rope_cos_, rope_sin_), or the backend's when it is not the host's and
  // no layer scales the tables on the host (a RoPE magnitude), so that a
  // device computes and reads them in place (no copy back per step).
  std::vector<float> rope_cos_, rope_sin_;
  std::unique_ptr<BackendBuffer> rope_cos_buf_, rope_sin_buf_;
  float* rope_cos_p_ = nullptr;
  float* rope_sin_p_ = nullptr;
  std::vector<uint8_t> rope_ready_;  // [n_rope_tables], cleared by prepare()
  // Attention temperature factors [max_batch, head_dim / 2] and as many
  // zeros (ModelConfig::attn_temp_scale; empty without).
  std::vector<float> temp_scale_, temp_zeros_;
};

}  // namespace ember
