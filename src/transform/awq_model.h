// AWQ over a whole model (the method of `ember quantize --method awq`), on
// the shared calibration driver (layerwise.h): for each block l in order,
// block l runs over the stored hidden states of every calibration window
// with an AwqCollector (mean |x|, mean x^2 per input channel
// of its four input groups and evenly spaced sample rows), advancing them to
// block l + 1. For each group the scales are searched (awq.h) and folded so
// that the model stays the same function:
//   Q/K/V (input: attn_norm output)   columns * s, attn_norm / s;
//   O     (input: attention output)   columns * s, V rows (and bias) / s;
//         with grouped-query attention the scale of O's channel (head h,
//         dim d) is the one of V's row (kv head of h, d), so the search
//         uses mean |x| averaged over the query heads of each kv head;
//   gate/up (input: ffn_norm output)  columns * s, ffn_norm / s;
//   down  (input: act(gate) * up)     columns * s, up rows / s.
// (GGUF norms are applied as x / rms * w, Gemma's included: its files store
// 1 + w.) Folding does not change the function, so the next block's inputs
// are the source model's and nothing is re-run. The folded tensors become
// f32 in the result; the AWQ entries are then rounded by the plan (RTN, or
// imatrix with the scaled importance) like any other.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/forward_observer.h"
#include "model/io/model_file.h"
#include "transform/awq.h"
#include "transform/quant_plan.h"

namespace ember {

// The statistics of one block's four input groups (kQ: Q/K/V, kO, kGate:
// gate/up, kDown). Rows are sampled at global row indices that are
// multiples of sample_stride (set_chunk gives the chunk of the next calls),
// at most max_samples of them.
class AwqCollector final : public ForwardObserver {
 public:
  AwqCollector(int layer, int64_t rows_per_chunk, int64_t sample_stride, int64_t max_samples)
      : layer_(layer), rows_per_chunk_(rows_per_chunk), stride_(sample_stride), max_samples_(max_samples) {}
  void set_chunk(int64_t c) { chunk_ = c; }
  void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                       int64_t n_in) override;

  struct Group {
    int64_t n_in = 0, n_tok = 0;
    std::vector<double> sum_abs, sum_sq;  // [n_in]
    std::vector<float> samples;           // [n_samples, n_in]
    int64_t n_samples() const { return n_in ? static_cast<int64_t>(samples.size()) / n_in : 0; }
  };
  // Null if no rows reached the group (role: kQ, kO, kGate or kDown).
  const Group* group(LinearRole role) const;

 private:
  int layer_;
  int64_t rows_per_chunk_, stride_, max_samples_;
  int64_t chunk_ = 0;
  std::map<LinearRole, Group> groups_;
};

struct AwqRunOptions {
  AwqSearchOptions search;
  int chunk_size = 512;
  int32_t bos_id = -1;           // >= 0: replaces the first token of every chunk
  int64_t search_tokens = 512;   // sample rows per group for the output error
  bool fold_vo = true;           // search O's scales (folded into V)
  bool fold_up_down = true;      // search down's scales (folded into up)
  // After each block: (blocks done, blocks in all).
  std::function<void(int, int)> progress;
};

// What the search found, per group ("blk.3.attn_q" names the Q/K/V group).
// With clipping, each clipped matrix adds a report of its own (clip true,
// group = the matrix, e.g. "blk.3.ffn_down"; errors are the within-block
// ones of awq_clip_search, blocks / clipped its counts).
struct AwqGroupReport {
  std::string group;
  float alpha = 0.f;
  double error = 0, error_plain = 0;
  bool clip = false;
  int64_t blocks = 0, clipped = 0;
};

// Folds AWQ scales into every block that has entries of method kAwq, as
// above, over the whole chunks of `tokens`. Returns the folded source (the
// changed tensors in f32, owned by the result) and turns the kAwq entries
// into kRtn or, with imatrix rounding, kImatrix entries whose importance
// (mean x^2 / s^2) goes to *importance by name; entries of other tensors the
// folds changed are re-planned from f32. Errors: no whole chunk, a kAwq
// entry outside the blocks, of a type AWQ cannot round, or of a Hugging Face
// (permuted) tensor; a token outside the vocabulary.
Result<std::unique_ptr<ModelFile>> run_awq(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                           const std::vector<int32_t>& tokens, const AwqRunOptions& o,
                                           ThreadPool& pool, std::map<std::string, std::vector<float>>* importance,
                                           std::vector<AwqGroupReport>* report = nullptr);

}  // namespace ember
