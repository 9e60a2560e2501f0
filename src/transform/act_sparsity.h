// Calibration of activation sparsity (TEAL, Liu et al., ICLR 2025; `ember
// prune --activations S`): for every block and each of the four inputs of
// its matrices (model/act_sparsity.h: the attention input entering Q/K/V,
// the attention output entering O, the FFN input entering gate/up, the
// input of down), the magnitude threshold t that zeroes the fraction S of
// that input's entries over the calibration tokens: t is the k-th smallest
// |x| with k = floor(S * N) over the N entries (so x' = x * [|x| > t] zeroes
// at least k of them; ties at t zero more, the report says how many). This
// is TEAL's uniform allocation (the same S for every input); its greedy
// per-layer allocation is not done.
//
// Runs on the shared layer-by-layer driver (layerwise.h) as an observer of
// each block's linear inputs; the thresholds do not change the weights, so
// each block's observe pass also advances the hidden states (the inputs of
// later blocks are the dense model's, as TEAL calibrates). The thresholds
// go into the returned file's metadata (ember.activation_sparsity.*).
//
// Threading: the calling thread drives; the forward pass runs on `pool`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"

namespace ember {

struct ActSparsityOptions {
  double sparsity = 0.4;  // S, in (0, 1)
  int64_t window = 512;   // calibration window (tokens)
  int32_t bos_id = -1;
  std::function<void(int, int)> progress;  // (blocks done, blocks)
};

struct ActSparsityReport {
  std::vector<float> thresholds;  // [n_layer * 4] as written
  std::vector<double> zeroed;     // [n_layer * 4] fraction of calibration entries the threshold zeroes
  int64_t tokens = 0;             // calibration tokens used
};

// Errors: S outside (0, 1), too few tokens for a window, the driver's.
Result<std::unique_ptr<ModelFile>> calibrate_act_sparsity(std::unique_ptr<ModelFile> src,
                                                          const std::vector<int32_t>& tokens,
                                                          const ActSparsityOptions& o, ThreadPool& pool,
                                                          ActSparsityReport* report);

}  // namespace ember
