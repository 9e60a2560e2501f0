// Calibration of activation sparsity (TEAL, Liu et al., ICLR 2025; `ember
// prune --activations S`): for every block and each of the four inputs of
// its matrices (model/act_sparsity.h: the attention input entering Q/K/V,
// the attention output entering O, the FFN input entering gate/up, the
// input of down), the magnitude threshold t that zeroes the fraction S of
// that input's entries over the calibration tokens: t is the k-th smallest
// |x| with k = floor(S * N) over the N entries (so x' = x * [|x| > t] zeroes
// at least k of them; ties at t zero more, the report says how many). This
// is TEAL's uniform allocation (the same S for every input; `--act-allocation
// uniform`).
//
// Greedy allocation (TEAL's block-wise greedy rule; the default): per block, each input i gets its own level s_i, from 0. Its
// weight p_i is its share of the block's parameters (attn_in: Q+K+V,
// attn_out: O, ffn_in: gate+up, ffn_down: down; inputs without calibration
// entries, a MoE layer's FFN, take no part). Its step is
// step_i = base_step * (P / n) / p_i (P: the block's parameters over the n
// taking part): normalised so that every step raises the block's
// parameter-weighted mean sparsity sum(p_i s_i) / P by base_step / n
// (0.0125 for 4 inputs), whichever input takes it. While that mean is below
// S, each input whose s_i + step_i stays below 1 is tried: the block runs
// over every calibration window (its inputs: the dense model's, as above)
// with all four inputs thresholded at their levels, s_i raised by step_i;
// the error is the mean over every position of every window of the L2
// norm over the hidden dimension of the block's output minus its dense
// output (TEAL averages the last 25% of positions only; ember sparsifies
// every position, prefill included, so all count). The input with the
// least error takes its step. The levels become thresholds by the uniform
// rule's quantile (k = floor(s_i * N)). The mean ends in
// [S - 1e-6, S + base_step / n).
//
// Runs on the shared layer-by-layer driver (layerwise.h) as an observer of
// each block's linear inputs (greedy: and its refine step, which reruns the
// block with trial thresholds); the thresholds do not change the weights,
// so the hidden states advance through the dense block (uniform: in the
// observe pass; greedy: in a pass after the search), and the inputs of
// later blocks are the dense model's, as TEAL calibrates. The thresholds
// go into the returned file's metadata (ember.activation_sparsity.*).
//
// Threading: the calling thread drives; the forward pass runs on `pool`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"

namespace ember {

enum class ActAllocation { kUniform, kGreedy };
Result<ActAllocation> act_allocation_from_name(const std::string& s);  // uniform, greedy
const char* act_allocation_name(ActAllocation a);

struct ActSparsityOptions {
  double sparsity = 0.4;  // S, in (0, 1)
  ActAllocation allocation = ActAllocation::kGreedy;  // the default: lower KL (docs/pruning.md)
  double base_step = 0.05;  // greedy: in (0, 1)
  int64_t window = 512;   // calibration window (tokens)
  int32_t bos_id = -1;
  std::function<void(int, int)> progress;  // (blocks done, blocks)
};

struct ActSparsityReport {
  std::vector<float> thresholds;  // [n_layer * 4] as written
  std::vector<double> zeroed;     // [n_layer * 4] fraction of calibration entries the threshold zeroes
  int64_t tokens = 0;             // calibration tokens used
  // [n_layer * 4]: each input's level s_i (uniform: S where it has entries),
  // its parameters p_i (0: takes no part) and greedy step.
  std::vector<double> level, params, step;
  // Greedy: every step of every block in order: the candidates' block
  // errors (NaN: not tried, at the cap or not taking part) and the input
  // that took the step.
  struct GreedyStep {
    int layer = 0;
    int chosen = -1;
    double error[4] = {0, 0, 0, 0};
  };
  std::vector<GreedyStep> steps;
  // The parameter-weighted mean of `zeroed` per block, averaged over the
  // blocks (about the share of block weight reads decode skips).
  double weighted_zeroed = 0;
};

// Errors: S or base_step outside (0, 1), too few tokens for a window, the driver's.
Result<std::unique_ptr<ModelFile>> calibrate_act_sparsity(std::unique_ptr<ModelFile> src,
                                                          const std::vector<int32_t>& tokens,
                                                          const ActSparsityOptions& o, ThreadPool& pool,
                                                          ActSparsityReport* report);

}  // namespace ember
