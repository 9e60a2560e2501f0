// Model: a loaded model file with its config and bound weights, and
// ForwardContext: the buffers and the single transformer-block
// implementation that runs a batch of tokens of one sequence through it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/io/model_file.h"
#include "model/weights.h"

namespace ember {

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path);
  // From an already opened file (takes ownership).
  static Result<std::unique_ptr<Model>> from_file(std::unique_ptr<ModelFile> file);

  const ModelConfig& config() const { return cfg_; }
  const ModelFile& file() const { return *file_; }
  const ModelWeights& weights() const { return *weights_; }
  // Inverse RoPE frequencies of layer il: [n_rot / 2].
  const float* inv_freq(int il) const { return inv_freq_[il].data(); }
  // Total parameters and bytes of weight tensors.
  int64_t n_params() const;
  size_t weight_bytes() const;

 private:
  ModelConfig cfg_;
  std::unique_ptr<ModelFile> file_;
  std::unique_ptr<ModelWeights> weights_;
  std::vector<std::vector<float>> inv_freq_;
};

// One sequence's slice of a ragged multi-sequence batch: tokens[0..n) at
// positions pos0, pos0+1, ... whose K/V are written to and read from `cache`.
struct SeqBatch {
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  int64_t pos0 = 0;
  KvCache* cache = nullptr;
  bool want_logits = false;  // logits of the last token of this slice
  bool all_logits = false;   // logits of every token of this slice (overrides want_logits)
};

class ForwardContext {
 public:
  // max_batch: most tokens per forward() call (longer inputs are split).
  ForwardContext(const Model& model, ThreadPool& pool, int max_batch = 512);

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

  int max_batch() const { return max_batch_; }

 private:
  void forward_batch(const int32_t* tokens, int64_t n, int64_t pos0, KvCache& cache, float* logits,
                     float* all_logits);
  // Core pass over n tokens; token t belongs to segment seg_[t] of segs_.
  void run_tokens(const int32_t* tokens, int64_t n);
  void attention_block(int il, int64_t n);
  void ffn_block(int il, int64_t n);
  void rows_rms_norm(const float* in, float* out, int64_t n, const float* w);

  const Model& model_;
  const ModelConfig& cfg_;
  ThreadPool& pool_;
  int max_batch_;
  MatmulScratch mm_scratch_;
  std::vector<int32_t> pos_;
  std::vector<int32_t> seg_;       // [max_batch] segment of each token
  std::vector<KvCache*> segs_;     // cache of each segment
  std::vector<KvView> seg_views_;  // per segment, current layer
  std::vector<int32_t> tok_;       // [max_batch] gathered tokens
  std::vector<int64_t> logit_rows_;
  // Activations, shapes for a batch of n tokens:
  std::vector<float> x_;     // [n, n_embd] residual stream
  std::vector<float> xn_;    // [n, n_embd] normed input of a sub-block
  std::vector<float> tmp_;   // [n, n_embd] sub-block output
  std::vector<float> q_;     // [n, n_head*head_dim]
  std::vector<float> k_;     // [n, n_kv_dim]
  std::vector<float> v_;     // [n, n_v_dim]
  std::vector<float> attn_;  // [n, n_head*head_dim_v]
  std::vector<float> gate_;  // [n, n_ff]
  std::vector<float> up_;    // [n, n_ff]
  std::vector<float> attn_scratch_;
  std::vector<float> rope_cos_, rope_sin_;  // [n, n_rot/2]
};

}  // namespace ember
