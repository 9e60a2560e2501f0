// What `ember quantize` and `ember prune` share: the flags that choose the
// types of the result (--type, mixes, --pure, overrides), the calibrated
// quantization method and its options, the calibration text and the quality
// check; their translation into one transform pipeline (transform/
// pipeline.h); and the run: pipeline, GGUF written, report printed.
#pragma once

#include <cstdint>
#include <string>

#include "cli/args.h"
#include "transform/pipeline.h"

namespace ember::cli {

struct CompressFlags {
  std::string type_name;
  bool pure = false;
  std::string tensor_types_arg, tensor_type_file;
  int threads = 1;
  bool strict = false, no_check = false;
  std::string check_file, output_type_name, embd_type_name, method = "rtn", imatrix_path, calib_path;
  int64_t calib_tokens = -1, check_windows = 2;
  bool act_order = false, rotate = false, rotate_attn_out = false;
  std::string gptq_scales = "dynamic";
  int act_bits = 0;
  std::string awq_rounding = "imatrix";
  int awq_grid = 20;
  bool awq_clip = false;
  float damp = 0.01f;
  float target_bpw = 0;
  std::string bpw_types, bpw_report;
  int64_t bpw_probe_tokens = 256;
};

// Registers the flags. method_flag: "--method" (quantize) or
// "--quant-method" (prune, whose --method is the pruning method). With
// `quantize_only` the options that only `ember quantize` takes (rotations,
// activation bits, target bits per weight) are registered too.
void add_compress_flags(ArgParser& p, CompressFlags* f, const char* method_flag, bool quantize_only);

// Checks the flags and fills *o (everything but the pruning stages); the
// error is a usage message. type_required: --type must be given (quantize);
// else a missing --type keeps every tensor's type.
Status compress_options(const CompressFlags& f, bool type_required, PipelineOptions* o);

// The held-out text of the report (--check-file, data/persuasion.txt, or a
// built-in paragraph); error: an unreadable or empty --check-file.
Result<std::string> check_text(const CompressFlags& f);

// Runs the pipeline, writes OUT and prints the report (`tool` names the
// command in messages). Exit status: 0, 1 (the file could not be written),
// 2 (a usage or model error).
int run_compress(const char* tool, const ArgParser& p, const CompressFlags& f, const PipelineOptions& o,
                 const std::string& out, ReportOptions report);

// A PipelineLog that prints to stdout / stderr with a live progress line.
class CliPipelineLog {
 public:
  explicit CliPipelineLog(std::string tool);
  ~CliPipelineLog();
  const PipelineLog& log() const { return log_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  PipelineLog log_;
};

}  // namespace ember::cli
