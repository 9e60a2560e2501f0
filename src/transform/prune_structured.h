// Structured pruning: a smaller dense model of the same architecture, which
// every kernel runs faster at once (`ember prune --ffn F --heads F
// --kv-groups F --drop-layers N --vocab N`):
//   FFN channels  channel j of a block scores ||W_down[:, j]||^2 * sum x_j^2
//                 (x: ffn_down's input over the calibration tokens: the energy
//                 it adds to the FFN output); the lowest go with their gate /
//                 up rows and down column;
//   query heads   head h scores the same over its columns of W_o (the energy
//                 of its share of the attention output); the same number goes
//                 from every KV group, so the group mapping holds; Q rows and
//                 O columns removed;
//   KV groups     (grouped-query attention) a group scores the sum of its
//                 query heads; its K / V rows go with its query heads;
//   layers        block l scores its influence BI_l = 1 - mean_t cos(x_t,
//                 y_t) (ShortGPT: x, y its input and output residual rows over
//                 the calibration tokens) or the mean KL divergence of the
//                 next-token distributions when only block l is skipped
//                 (first two windows); the lowest are removed;
//   vocabulary    the output head keeps the given tokens only (their rows;
//                 the tokenizer and the input embedding stay whole so any
//                 text can be read): kOutputTokensKey records them and the
//                 forward pass gives every other token probability 0.
// All statistics come from the unpruned model in one pass (plus one per
// block for the KL metric). Counts are the same in every layer (files whose
// sizes are single values, as llama.cpp's llama / gemma3 / qwen loaders
// need) unless `global` ranks FFN channels across layers by their share of
// their layer's total score; then the sizes are llama.cpp's per-layer
// arrays (<arch>.feed_forward_length, .attention.head_count), which ember
// reads and those llama.cpp loaders do not (they size every layer as layer
// 0). A trimmed vocabulary does not run in llama.cpp (its head must have a
// row per token). Removed layers renumber the blocks; per-layer metadata
// arrays are re-indexed and Gemma 3's sliding-window pattern becomes one
// flag per remaining layer (the array form llama.cpp reads too).
//
// Threading: the calling thread; the forward passes parallelise on `pool`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"

namespace ember {

enum class LayerMetric { kBlockInfluence, kKl };

struct StructuredPruneOptions {
  double ffn = 0;        // fraction of FFN channels removed, [0, 1)
  double heads = 0;      // fraction of each KV group's query heads removed
  double kv_groups = 0;  // fraction of KV groups removed (with their query heads)
  int drop_layers = 0;   // blocks removed
  LayerMetric layer_metric = LayerMetric::kBlockInfluence;
  bool global = false;   // FFN channels ranked across layers (per-layer widths)
  int ffn_multiple = 0;  // kept channels a multiple of this (0: 256 if n_ff is, else 32)
  // Output tokens kept (ascending ids; empty: the whole vocabulary).
  std::vector<int32_t> vocab;
  int64_t window = 512;  // calibration window
  int32_t bos_id = -1;
  int kl_windows = 2;    // windows of the KL layer metric
  std::function<void(int, int)> progress;
  bool needs_calibration() const { return ffn > 0 || heads > 0 || kv_groups > 0 || drop_layers > 0; }
};

struct StructuredPruneReport {
  std::vector<double> layer_scores;  // per source block (with drop_layers)
  std::vector<int> dropped;          // source blocks removed
  std::vector<int> n_head, n_head_kv, n_ff;  // per remaining block
  // Per remaining block, in source indices: query heads, KV groups, FFN channels kept.
  std::vector<std::vector<int>> kept_heads, kept_groups, kept_channels;
  int64_t params_before = 0, params_after = 0;
  // The type of the tensor each output tensor came from (a sliced one is f32
  // in the result; ember prune without --type rounds it back to this).
  std::map<std::string, DType> origin_type;
  bool llama_cpp = true;             // the file's shape is one llama.cpp loads
  std::vector<std::string> lines;    // a summary to print
};

// Indices of the `keep` highest of score (ties: the lower index), ascending.
std::vector<int> keep_highest(const std::vector<double>& score, int keep);

// Prunes `src` as above over the whole windows of `tokens`. Errors: a
// fraction outside [0, 1), more layers than the model has (one must stay),
// a model that does not load, too few calibration tokens, a head or FFN
// width that would reach 0, a token id outside the vocabulary.
Result<std::unique_ptr<ModelFile>> prune_structured(std::unique_ptr<ModelFile> src, const std::vector<int32_t>& tokens,
                                                    const StructuredPruneOptions& o, ThreadPool& pool,
                                                    StructuredPruneReport* report);

}  // namespace ember
