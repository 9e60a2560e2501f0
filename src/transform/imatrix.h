// Importance matrices ("imatrix"): per weight matrix, the sum over
// calibration tokens of the squared activations entering each of its input
// columns, and the number of tokens. Written and read in llama.cpp's formats
// so either tool's file works in either quantizer:
//   - GGUF (what llama-imatrix writes today): general.type = "imatrix",
//     imatrix.datasets (string array), imatrix.chunk_count,
//     imatrix.chunk_size (u32); per matrix NAME two f32 tensors
//     NAME.in_sum2 [n_in, n_mat] (raw sums) and NAME.counts [1, n_mat];
//   - legacy .dat: i32 n_entries; per entry i32 name length, the name, i32
//     ncall, i32 nval, f32 values[nval] (mean * ncall); then i32 chunk
//     count, i32 dataset name length and the name.
// The importance a quantizer uses is the mean: in_sum2 / counts (GGUF) or
// values / ncall (legacy), as llama-quantize computes it.
//
// ImportanceCollector is the ForwardObserver that accumulates the sums (in
// double) while a model runs over calibration text; collect_importance
// drives it over chunks of tokens as llama-imatrix does (each chunk of
// chunk_size tokens starting with BOS, every position counted).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/forward_observer.h"
#include "model/model.h"
#include "transform/quant_plan.h"

namespace ember {

struct ImatrixEntry {
  std::vector<double> sums;     // [n_mat, n_in] sum of x^2 per input column
  std::vector<int64_t> counts;  // [n_mat] tokens seen (legacy files: {ncall}, sums = mean * ncall)
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by GGUF tensor name
  std::vector<std::string> datasets;
  int32_t chunk_count = 0, chunk_size = 0;
  bool legacy = false;  // read from a .dat file (sums already mean * ncall)

  // The mean squared activation per input column of `tensor` (n_in values),
  // nullopt when the file has no entry for it. Columns of a matrix with no
  // tokens get 1, as in llama-quantize.
  std::optional<std::vector<float>> importance(const std::string& tensor) const;
};

// Reads either format (GGUF by its magic, else legacy). Errors name the file
// and what is wrong (truncation, sizes that do not match, non-finite values).
Result<Imatrix> read_imatrix(const std::string& path);
// Writes the GGUF format.
Status write_imatrix_gguf(const Imatrix& m, const std::string& path);
// Writes the legacy format (for llama.cpp builds older than the GGUF one).
Status write_imatrix_legacy(const Imatrix& m, const std::string& path);

// The GGUF name of the matrix that reads the input of (layer, role):
// "blk.3.attn_q.weight"; kOutput: "output.weight", or "token_embd.weight"
// when the model has no separate output matrix (tied).
std::string linear_tensor_name(int layer, LinearRole role, bool tied_output);

// Accumulates sum x^2 per input column and token counts per matrix. With
// include_output false (llama-imatrix's default) the output head is skipped.
class ImportanceCollector final : public ForwardObserver {
 public:
  ImportanceCollector(bool tied_output, bool include_output) : tied_(tied_output), output_(include_output) {}
  void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                       int64_t n_in) override;
  // A MoE layer's experts: one matrix per expert in the entry of the 3-D
  // tensor (sums [n_expert, n_in], counts [n_expert]: the tokens routed to
  // each), as llama-imatrix collects ffn_*_exps.
  void on_expert_input(int layer, LinearRole role, int expert, int n_expert, const float* x, int64_t ld,
                       int64_t n_rows, int64_t n_in) override;
  Imatrix& result() { return m_; }

 private:
  bool tied_, output_;
  Imatrix m_;
};

struct CalibrationOptions {
  int chunk_size = 512;     // tokens per chunk
  int32_t bos_id = -1;      // >= 0: the first token of every chunk is replaced by it (llama-imatrix)
  int64_t max_tokens = 0;   // 0: every whole chunk of the text
  bool include_output = false;
  // Called after every chunk with (chunks done, chunks in all).
  std::function<void(int64_t, int64_t)> progress;
};

// Runs `model` over `tokens` in chunks and returns the importance matrix
// (datasets / chunk fields filled except the dataset name). Needs at least
// one whole chunk.
Result<Imatrix> collect_importance(const Model& model, const std::vector<int32_t>& tokens,
                                   const CalibrationOptions& opts, ThreadPool& pool);

// Switches the round-to-nearest entries of `plan` that `m` has statistics
// for to QuantMethod::kImatrix (when the importance quantizers write their
// target) and stores their importance vectors in *importance, by tensor
// name. Returns how many entries changed. Errors: an entry whose statistics
// have another number of columns than its rows, naming the tensor.
Result<int> apply_imatrix(const Imatrix& m, QuantPlan* plan, std::map<std::string, std::vector<float>>* importance);

}  // namespace ember
