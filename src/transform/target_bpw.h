// `ember quantize --target-bpw B`: per-tensor types chosen by measured
// sensitivity so that the whole file has at most B bits per weight and the
// least predicted damage.
//
// For every free matrix t of the plan (not pinned by --output-type /
// --token-embedding-type / --tensor-type) and every candidate type c whose
// block fits its rows:
//   E_t(c) = (rows / S) * sum over S sampled rows r, columns j of
//            a_j * (w_rj - deq(quant_c(w_r))_j)^2
// with a_j the mean squared calibration activation entering column j (1
// without statistics) and quant_c the quantizer the plan will run (importance-
// weighted rounding when statistics exist and the type supports it, else
// round-to-nearest): the expected squared error of the matrix's output.
// Sensitivity (the probe): the mean KL divergence of the model's next-token
// distributions (f32 softmax, calibration windows, every position) when only
// t is quantized to its probe type p_t (the candidate nearest to B from
// below whose error is at least 5% of the smallest candidate's: a source
// dequantized from a candidate re-rounds to it without error) against the unquantized model, s_t = KL_t / E_t(p_t); then the
// predicted damage of c is s_t * E_t(c) (first order: KL adds over tensors
// and scales with the output error). Without a probe s_t = 1 (the raw
// weighted error).
// Allocation: minimize sum_t s_t E_t(c_t) subject to
//   sum_t bits(c_t) * n_t + fixed bits <= B * (all elements of the file)
// (bits(c) = 8 * block bytes / block size; tensors outside the choice count
// as they are planned), exactly by dynamic programming over the budget
// above the cheapest choice cut into kBudgetUnits units (each tensor's cost
// rounded up, so the result never exceeds the budget and is optimal among
// choices that leave one unit per tensor spare), then leftover budget spent
// greedily on the upgrades that lower the damage most per bit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"
#include "transform/quant_plan.h"

namespace ember {

// One choice of a tensor: its bits per weight and predicted damage.
struct BpwChoice {
  DType type = DType::kQ8_0;
  double bits = 0;    // per weight
  double damage = 0;  // s_t * E_t(c)
};

struct BpwItem {
  int64_t n_elements = 0;
  std::vector<BpwChoice> choices;  // at least one
};

// Picks one choice per item minimizing the summed damage with
// sum bits * n_elements <= budget_bits (see the header comment). Errors: an
// item without choices, a budget below the cheapest choices (naming the
// smallest feasible total).
inline constexpr int kBudgetUnits = 1 << 15;
Result<std::vector<int>> allocate_bpw(const std::vector<BpwItem>& items, double budget_bits);

struct TargetBpwOptions {
  double target_bpw = 4.5;
  // Candidate types (those whose block size divides a tensor's rows are
  // offered to it).
  std::vector<DType> candidates = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_0, DType::kQ4_K,
                                   DType::kQ5_0, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0};
  int64_t sample_rows = 256;  // rows per tensor in the error estimate
  // Probe: the model is run over these windows of tokens (each of probe_ctx
  // positions, the first replaced by bos_id when >= 0); empty: no probe.
  std::vector<int32_t> probe_tokens;
  int64_t probe_ctx = 128;
  int32_t bos_id = -1;
  // Called after each probed tensor with (done, total).
  std::function<void(int, int)> progress;
  bool imatrix_rounding = false;
};

struct TargetBpwTensor {
  std::string name;
  DType chosen = DType::kQ8_0;
  DType probe = DType::kQ8_0;
  double probe_kl = 0;     // measured KL with only this tensor at its probe type (0 without a probe)
  double sensitivity = 1;  // s_t
  double damage = 0;       // predicted, at the chosen type
};

struct TargetBpwReport {
  std::vector<TargetBpwTensor> tensors;  // the free matrices
  double bpw = 0;               // of the planned file, all tensors
  double predicted_kl = 0;      // sum of the chosen damages (with a probe: a KL estimate)
  bool probed = false;
};

// Sets the targets of plan's free matrices to reach opts.target_bpw (a
// target above what the candidates reach gives every tensor its least
// damaging choice). `src` is the plan's source; importance gives each
// entry's column statistics for the error weights (may return null);
// imatrix_rounding: the plan rounds with them (entries become kImatrix where
// the chosen type supports it), else round-to-nearest. Errors: a target below
// the cheapest choice (naming it), no free matrix, an unreadable tensor,
// probe tokens shorter than one window.
Result<TargetBpwReport> plan_target_bpw(const ModelFile& src, QuantPlan* plan, const ImportanceFor& importance,
                                        const TargetBpwOptions& opts, ThreadPool& pool);

// Bits per weight of the file the plan writes (all tensors, as llama.cpp
// counts its "BPW": 8 * bytes / elements).
double plan_bits_per_weight(const QuantPlan& plan);

}  // namespace ember
