// The compression pipeline that `ember quantize` and `ember prune` both run:
// one plan from a source model to a written GGUF, so pruning then
// quantizing is one run with one calibration text:
//   open       the source (GGUF or a Hugging Face folder, whose tokenizer
//              joins the metadata); refuse what ember could not run;
//   structured remove heads, FFN channels, layers or output-vocabulary rows
//              (prune_structured.h): a smaller dense model;
//   plan       per-tensor types (quant_plan.h: --type, a llama.cpp mix,
//              overrides; or every tensor keeps its source type);
//   rotate     QuaRot rotations fused into the weights (quarot.h);
//   imatrix    importance from a file or calibrated here (imatrix.h);
//   bpw        per-tensor types for a size budget (target_bpw.h);
//   prune      unstructured / N:M pruning of the block matrices (prune.h),
//              with GPTQ entries pruned and quantized in the same pass;
//   gptq / awq layer-by-layer calibrated quantization (gptq_model.h,
//              awq_model.h) of what the pruning left;
//   execute    the plan's rounding (then activation-sparsity thresholds
//              calibrated on the result: act_sparsity.h; then, with
//              sparse_format, the pruned matrices re-encoded sparse:
//              sparse_store.h), then the GGUF written;
//   report     the written model against the source on held-out text (KL,
//              top-1, perplexity; eval/model_compare.h), and after pruning
//              parameters, bytes and decode speed before and after.
// Messages go through PipelineLog (the CLI prints them); errors come back as
// Status with what failed named.
//
// Threading: one calling thread; the work parallelises on `pool`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"
#include "transform/act_sparsity.h"
#include "transform/awq.h"
#include "transform/gptq.h"
#include "transform/imatrix.h"
#include "transform/prune.h"
#include "transform/prune_structured.h"
#include "transform/quant_plan.h"
#include "transform/sparse_store.h"
#include "transform/target_bpw.h"

namespace ember {

class Model;
class Tokenizer;

enum class QuantizeMethod { kRtn, kImatrix, kGptq, kAwq };

struct PipelineOptions {
  std::string in;  // source path (GGUF file or Hugging Face folder)
  // Types: convert (type, mix, overrides) or, with keep_types, every tensor
  // in its source type (a pruned matrix is rounded back to it).
  ConvertOptions convert;
  bool keep_types = false;
  QuantizeMethod method = QuantizeMethod::kRtn;
  std::string imatrix_path;  // kImatrix from this file instead of calibrating
  bool rotate = false, rotate_attn_out = false;
  int act_bits = 0;  // 0: not recorded; 4 / 8: ember.activation_bits
  GptqOptions gptq;
  AwqSearchOptions awq;
  // --target-bpw (bpw.target_bpw > 0; 0: off, the default here).
  TargetBpwOptions bpw = [] {
    TargetBpwOptions b;
    b.target_bpw = 0;
    return b;
  }();
  int64_t bpw_probe_tokens = 256;
  std::string bpw_report;
  std::optional<StructuredPruneOptions> structured;
  std::optional<PruneOptions> prune;
  // After the plan: the pruned block matrices stored in the sparse formats
  // (sparse_store.h; they must be Q8_0 or Q4_0 by then).
  bool sparse_format = false;
  // After the plan: activation-sparsity thresholds calibrated to this
  // fraction of zeroed inputs (act_sparsity.h), written into the metadata.
  std::optional<double> act_sparsity;
  ActAllocation act_allocation = ActAllocation::kGreedy;  // how S is spread over a block's inputs
  // Calibration text and tokens (-1: the method's default: 16384 for the
  // importance matrix, 4096 for the layer-by-layer methods).
  std::string calib_path;
  int64_t calib_tokens = -1;
};

// What the caller is told while the pipeline runs.
struct PipelineLog {
  std::function<void(const std::string&)> info;  // a result line (stdout)
  std::function<void(const std::string&)> note;  // a status line (stderr)
  // A progress line: (done, total, seconds since its stage began, unit);
  // done == total < 0 clears it.
  std::function<void(long, long, double, const char*)> progress;
};

struct PipelineResult {
  std::unique_ptr<ModelFile> file;  // what to write
  QuantPlan plan;
  std::string type_label;           // "q4_0", "Q4_K_M", "target-bpw 4.5", "source types"
  std::optional<PruneReport> prune;
  std::optional<StructuredPruneReport> structured;
  std::optional<SparseStoreReport> sparse;
  std::optional<ActSparsityReport> act;
};

// The importance matrix of `model` over the text at `path` in chunks
// (max_tokens 0: all; the text tokenized with BOS first, as llama-imatrix),
// with a status line and progress through `log`.
Result<Imatrix> calibrate_importance(const Model& model, const Tokenizer& tok, const std::string& path,
                                     int chunk_size, int64_t max_tokens, bool include_output, const PipelineLog& log,
                                     ThreadPool& pool);

// Runs every stage up to the executed plan. Errors name the stage's cause.
Result<PipelineResult> run_pipeline(const PipelineOptions& o, const PipelineLog& log, ThreadPool& pool);

// Writes the result as GGUF (ember.hf.* keys dropped, the activation bits
// recorded); *bytes: the tensor payload written.
Status write_pipeline_output(const PipelineResult& r, int act_bits, const std::string& path, size_t* bytes);

// The report of a written file against its source over held-out text:
// windows of 512 (BOS first, at most `windows`) or one window of a shorter
// text; the KL line; with `sizes`, parameters and bytes of both; with
// speed_tokens > 0, the decode speed of both (alternating runs, medians).
// False (and a note) when a model does not load: a report, not a gate.
struct ReportOptions {
  std::string text;
  int64_t windows = 2;
  bool sizes = false;
  int speed_tokens = 0;
  int speed_runs = 3;
};
bool report_against_source(const std::string& in, const std::string& out, const ReportOptions& o,
                           const PipelineLog& log, ThreadPool& pool);

}  // namespace ember
