// The layer-by-layer calibration driver that every calibrated transform
// shares (GPTQ, AWQ, Wanda, SparseGPT, structured-pruning statistics):
// the calibration tokens are cut into windows of W tokens (the first of
// each replaced by BOS when bos_id >= 0) and run through the embedding
// once; their hidden states [W, n_embd] per window are kept. Then for each
// block l in order, with the method's LayerwiseCallback:
//   1. observe: block l (as the file now holds it) runs over every window
//      with the callback's ForwardObserver for that block (none: the block
//      is not observed; the method has nothing to do there);
//   2. transform: the callback changes block l's tensors in the driver's
//      current ModelFile from what it observed;
//   1b. refine (callbacks with refines()): the callback may run block l
//      over every window with trial activation-sparsity thresholds as often
//      as it likes (LayerwiseBlockRunner; the hidden states stay block l's
//      inputs), e.g. to search per-input sparsities (TEAL's greedy rule);
//   3. advance: the hidden states go through block l to become the inputs
//      of block l + 1. A method whose transforms keep the function (AWQ's
//      folded scales) advances during the observe pass; the others
//      (quantization, pruning) get block l reloaded from the changed file
//      and run once more, so later blocks calibrate on the outputs of the
//      already-transformed earlier ones.
// Only one block's statistics (the callback's) and the hidden states
// [windows, W, n_embd] are held at once.
//
// Threading: runs on the calling thread; the forward pass parallelises on
// `pool`; the callback is called on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/forward_observer.h"
#include "model/io/model_file.h"
#include "model/kv_cache.h"

namespace ember {

// Block l of the driver's current model over the stored calibration windows
// (their hidden states entering block l), with trial activation-sparsity
// thresholds; the hidden states are not advanced. Valid during refine().
class LayerwiseBlockRunner {
 public:
  virtual ~LayerwiseBlockRunner() = default;
  virtual int64_t windows() const = 0;        // calibration windows
  virtual int64_t window_tokens() const = 0;  // W
  virtual int64_t n_embd() const = 0;
  // Runs block l with thresholds t[0..3] on its inputs (ActInput order,
  // model/act_sparsity.h; 0: that input dense) over every window, calling
  // out(window, y) with the block's outputs y [W * n_embd] (valid during the
  // call). The model's thresholds are restored afterwards.
  virtual Status run(const float* t, const std::function<void(int64_t, const float*)>& out) = 0;
};

class LayerwiseCallback {
 public:
  virtual ~LayerwiseCallback() = default;
  // The observer of block l's calibration pass; null: block l has nothing
  // to calibrate (it is only advanced through). Borrowed until transform().
  virtual ForwardObserver* observer(int layer) = 0;
  // Before window `window` runs through block l with the observer.
  virtual void on_window(int layer, int64_t window) {}
  // After block l's observe pass: change its tensors in *file (the driver's
  // current file, which the result becomes). Called only for observed blocks.
  virtual Status transform(int layer, ModelFile* file) = 0;
  // True when transform() never changes the model's function (the observe
  // pass then advances the hidden states too and nothing is rerun).
  virtual bool preserves_function() const { return false; }
  // True when the callback refines each observed block (refine()) between
  // its observe pass and transform().
  virtual bool refines() const { return false; }
  virtual Status refine(int layer, LayerwiseBlockRunner& runner) { return Status::ok(); }
};

struct LayerwiseOptions {
  int64_t window = 512;  // W: tokens per calibration window, in [2, 512]
  int32_t bos_id = -1;   // >= 0: the first token of every window
  // Blocks [0, n_layers) are visited (-1: every block); later blocks are
  // left as they are.
  int n_layers = -1;
  // After each block: (blocks done, blocks visited).
  std::function<void(int, int)> progress;
  // What the error messages call the method ("GPTQ calibration ...").
  const char* what = "calibration";
};

// Runs the driver over the whole windows of `tokens` and returns the
// transformed file (`src` kept alive by it). Errors: W outside [2, 512],
// no whole window, a token outside the vocabulary, a model that does not
// load, and the callback's.
Result<std::unique_ptr<ModelFile>> run_layerwise(std::unique_ptr<ModelFile> src, const std::vector<int32_t>& tokens,
                                                 const LayerwiseOptions& o, LayerwiseCallback& cb, ThreadPool& pool);

// Prepares ctx for one window seq (its positions from 0 in cache, which is
// reused window after window).
Status prepare_window(ForwardContext& ctx, const std::vector<int32_t>& seq, KvCache* cache);
// One window through blocks [l0, l1) from their input `in` [seq.size() *
// n_embd]; the outputs are left in ctx.hidden(). Every pass of the driver
// runs this, and so do probes that run the model block by block.
Status run_window_layers(ForwardContext& ctx, const std::vector<int32_t>& seq, const float* in, int64_t n_embd,
                         int l0, int l1, KvCache* cache);

// The token windows of a calibration and the hidden states entering block 0
// of each: checks every token id against the vocabulary and puts bos_id
// (when >= 0) at each window's first position.
// tokens: >= n_windows * W ids; seqs: [n_windows][W]; hidden: [n_windows][W * n_embd].
// ctx: a forward context of the model with room for W tokens; cache: a
// W-token cache, reused for every window.
Status embed_calibration_windows(ForwardContext& ctx, const ModelConfig& cfg, const std::vector<int32_t>& tokens,
                                 int64_t n_windows, int64_t W, int32_t bos_id, KvCache* cache,
                                 std::vector<std::vector<int32_t>>* seqs, std::vector<std::vector<float>>* hidden);

}  // namespace ember
