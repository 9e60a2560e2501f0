// The teacher of a distillation, two ways:
//
// LiveTeacher: the inference forward (model/forward.h ForwardContext, any
// weight type ember runs, e.g. the Q4_K_M file) over each batch, every
// sequence with its own KV cache; the logits of chosen rows come from its
// output head on demand (so only a chunk of rows x vocabulary exists at
// once), block outputs of chosen layers through a ForwardObserver (for a
// hidden-state loss).
//
// TeacherCache: the teacher's distribution at temperature tau for every
// position of the training windows, stored as K tokens sampled from a
// proposal q ~ p_tau^beta with importance weights w = p_tau / (K q) (and
// log p_tau of each, for the KL value): p_hat = sum_i w_i delta_{x_i} is an
// unbiased estimate of p_tau ("Sparse Logit Sampling", Anshumann et al., ACL
// 2025: caching the top-k is biased), so the distillation gradient is
// unbiased. A run reads it instead of running the teacher (no teacher
// compute per step; the file can be reused across runs). Sampling is seeded
// per (window, position), so the file does not depend on batching or
// threads. File: a header (magic, version, K, seq_len, windows, tau, beta,
// seed, the data and teacher digests), [windows][seq_len][K] records of
// {int32 id, f32 weight, f32 logp}, a trailing FNV-1a checksum.
//
// Ownership and threading: a LiveTeacher borrows its Model and pool; one
// thread drives either; KdTargets::row may be called from several threads
// at once (read-only).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "train/data.h"
#include "train/step.h"

namespace ember {

class LiveTeacher : public KdTargets {
 public:
  // max_rows: most rows of a batch; hidden_layers: teacher layers whose
  // block outputs run() keeps.
  LiveTeacher(const Model& teacher, ThreadPool& pool, int64_t max_rows, std::vector<int> hidden_layers = {});
  ~LiveTeacher() override;
  // Embedding and every layer over the batch (n_seq sequences of seq_len).
  Status run(const TrainBatch& b);
  bool dense() const override { return true; }
  // Logits [n, n_vocab] of rows r0 .. r0 + n - 1 of the last run.
  void logits(int64_t r0, int64_t n, float* out) override;
  // Block output [rows, n_embd] of a layer in hidden_layers, last run.
  const float* hidden(int layer) const;
  const Model& model() const { return model_; }
  // A digest of the teacher's config and weight bytes' identity (its file
  // path, size and tensor list): a cache names the teacher it came from.
  uint64_t digest() const;

  class Observer;

 private:
  const Model& model_;
  ForwardContext ctx_;
  std::vector<std::unique_ptr<ContiguousKvCache>> caches_;
  int64_t seq_len_ = 0;
  std::unique_ptr<Observer> observer_;
  std::vector<int64_t> rows_;
};

struct TeacherCacheOptions {
  int samples = 12;    // K per position
  float tau = 1.f;     // temperature of p
  float beta = 1.f;    // proposal q ~ p_tau^beta (1: q = p, every weight 1 / K)
  uint64_t seed = 0;
};

class TeacherCache : public KdTargets {
 public:
  // Runs the teacher over every training window of `data` (batches of
  // `batch` windows) and writes the cache to `path` (atomically). progress
  // (windows done, total) after each batch; a set *stop ends it early with
  // an error (nothing written).
  static Status build(LiveTeacher& teacher, const TokenWindows& data, int64_t batch, const TeacherCacheOptions& o,
                      const std::string& path, ThreadPool& pool,
                      const std::function<void(int64_t, int64_t)>& progress = nullptr,
                      const std::atomic<bool>* stop = nullptr);
  // Reads a cache and checks it was built for this data, teacher and
  // options (tau, K, beta, seed): a mismatch, a truncated or corrupt file
  // is an error naming what differs.
  static Result<std::unique_ptr<TeacherCache>> open(const std::string& path, const TokenWindows& data,
                                                    uint64_t teacher_digest, const TeacherCacheOptions& o);

  // The training windows of the current batch, in row order.
  void set_windows(std::vector<int64_t> windows) { windows_ = std::move(windows); }
  bool dense() const override { return false; }
  KdRowTeacher row(int64_t r) override;

 private:
  TeacherCache() = default;
  int k_ = 0;
  int64_t seq_len_ = 0;
  std::vector<int32_t> ids_;
  std::vector<float> weights_, logp_;
  std::vector<int64_t> windows_;
};

}  // namespace ember
