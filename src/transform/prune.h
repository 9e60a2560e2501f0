// Unstructured and semi-structured (N:M) weight pruning of the block
// matrices (attn_q/k/v/output, ffn_gate/up/down; not the embedding or the
// output head), the method of `ember prune --method M --sparsity S`:
//   magnitude  the smallest |W| of each matrix (one threshold per matrix,
//              as the Wanda paper's magnitude baseline);
//   wanda      (Sun et al., 2023; locuslab/wanda) the smallest
//              |W_ij| * ||X_j||_2 within each output row i, ||X_j||^2 the
//              sum of squares of input column j over the calibration tokens;
//              no weight update;
//   sparsegpt  (Frantar & Alistarh, 2023) masks chosen by w^2 / [H^-1]_jj
//              with the error fed back into the weights not yet pruned
//              (sparsegpt.h), H = X^T X.
// N:M patterns ("2:4", "4:8") prune n of every m consecutive inputs of a row
// by the same scores. Wanda and SparseGPT run layer by layer on the shared
// calibration driver (layerwise.h): block l's statistics are taken on the
// outputs of the already-pruned blocks before it, as both references do.
// Magnitude needs no calibration.
//
// Layer sparsity: uniform, or OWL (Yin et al., ICML 2024; luuyin/OWL): a
// first pass over the unpruned model gives each block's outlier ratio D_l,
// the fraction of its Wanda scores |W_ij| ||X_j|| (all its matrices
// together) above m times their mean (m = 5); block l keeps a density of
//   (1 - S) + 2 lambda (D_l - min D) / (max D - min D) - mean over blocks of that term,
// so the mean sparsity stays S and the blocks' sparsities span 2 lambda
// (lambda = 0.08; shifted by the mean term, so a block can be up to
// 2 lambda below S): blocks with more outliers are pruned less.
// `kl` (ember's, not a paper's): the same mapping with D_l = log of the
// mean KL(dense || model with only block l pruned at S by Wanda's masks of
// the dense statistics) over the first kl_windows calibration windows: the
// blocks whose pruning alone hurts most are pruned less. For SparseGPT too
// the probe uses Wanda's masks (as OWL uses Wanda's scores).
//
// Counts (exact, the tests check them): magnitude floor(s * n_out * n_in)
// per matrix; wanda floor(s * n_in) per row; sparsegpt floor(s * n_out * B)
// per batch of B columns (sparsegpt.h); N:M exactly n per group. Ties go to
// the lower index. With a per-row quota (PruneOptions::per_row, `--quota
// row`) magnitude compares within each row too (floor(s * n_in) per row) and
// sparsegpt within each row of a batch (floor(s * B) per row and batch), so
// every row keeps the same count: the sparse format sizes all rows by the
// densest (quant/sparse.h), so even rows are fewer bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"
#include "transform/quant_plan.h"

namespace ember {

enum class PruneMethod { kMagnitude, kWanda, kSparseGpt };
std::optional<PruneMethod> prune_method_from_name(std::string_view name);  // "magnitude", "wanda", "sparsegpt"
const char* prune_method_name(PruneMethod m);

// n of every m consecutive inputs of a row pruned; m == 0: unstructured.
struct PrunePattern {
  int n = 0, m = 0;
  bool unstructured() const { return m == 0; }
  double sparsity() const { return m ? static_cast<double>(n) / m : 0.0; }
};
// "unstructured", or "N:M" with 0 < N < M <= 64 ("2:4", "4:8").
Result<PrunePattern> parse_prune_pattern(std::string_view s);
std::string prune_pattern_name(const PrunePattern& p);

enum class LayerSparsity { kUniform, kOwl, kKl };
std::optional<LayerSparsity> layer_sparsity_from_name(std::string_view name);  // "uniform", "owl", "kl"
const char* layer_sparsity_name(LayerSparsity l);

// Masks (1 = pruned) of one matrix W [n_out, n_in] (row-major), by the
// scores above. col_sq: [n_in] sum of squares of each input column (Wanda).
// per_row: magnitude's per-row quota (above).
void magnitude_mask(const float* W, int64_t n_out, int64_t n_in, double sparsity, const PrunePattern& p,
                    uint8_t* mask, bool per_row = false);
void wanda_mask(const float* W, int64_t n_out, int64_t n_in, const double* col_sq, double sparsity,
                const PrunePattern& p, uint8_t* mask);

// OWL: the fraction of |W_ij| sqrt(col_sq_j) over the given matrices (one
// block) that exceed m times their mean.
struct OwlMatrix {
  const float* W;
  int64_t n_out, n_in;
  const double* col_sq;
};
double owl_outlier_ratio(const std::vector<OwlMatrix>& block, double m);
// Per-block sparsity from the outlier ratios (above); equal ratios: uniform.
std::vector<double> owl_layer_sparsity(const std::vector<double>& outlier_ratio, double sparsity, double lambda);

struct PruneOptions {
  PruneMethod method = PruneMethod::kWanda;
  double sparsity = 0.5;  // unstructured target in [0, 1); N:M: n / m
  PrunePattern pattern;
  LayerSparsity layers = LayerSparsity::kUniform;
  bool per_row = false;   // magnitude / sparsegpt: the per-row quota (above); wanda always compares rows
  double owl_lambda = 0.08, owl_m = 5.0;  // owl; kl uses owl_lambda too
  int kl_windows = 2;     // kl: calibration windows of the probe
  double damp = 0.01;     // SparseGPT (and joint GPTQ) dampening
  int block_size = 128;   // SparseGPT batch
  int64_t window = 512;   // calibration window (tokens)
  int32_t bos_id = -1;
  // After each block of the pruning pass: (done, total).
  std::function<void(int, int)> progress;
};

struct PruneReport {
  std::vector<double> layer_sparsity;  // per block: the target
  std::vector<double> outlier_ratio;   // per block, OWL only
  std::vector<double> block_kl;        // per block, kl only: KL with only that block pruned
  int64_t pruned = 0, weights = 0;     // over the pruned matrices
  int matrices = 0;
  int joint = 0;  // matrices pruned and quantized in one pass (GPTQ entries)
};

// Prunes the block matrices of `src` as above over the whole windows of
// `tokens` (unused by magnitude without OWL or GPTQ entries). The plan's
// entries say what follows: an entry of method kGptq is pruned and
// quantized in one pass (SparseGPT's error feedback with GPTQ rounding,
// keeping the mask: sparsegpt.h; its target must be sparse_quant_supports)
// and becomes a kCopy of the result; every other pruned tensor becomes f32
// in the result and its entry is re-planned from f32 (its method kept, a
// kCopy rounded by method_from_f32). Errors: a bad option, too few tokens,
// a joint entry of a type without an exact zero or of a permuted (Hugging
// Face) tensor, an N:M group that does not divide a row, OWL with N:M.
Result<std::unique_ptr<ModelFile>> prune_model(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                               const std::vector<int32_t>& tokens, const PruneOptions& o,
                                               ThreadPool& pool, PruneReport* report);

}  // namespace ember
