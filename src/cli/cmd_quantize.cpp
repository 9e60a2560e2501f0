// `ember quantize IN OUT --type T [--method rtn|imatrix|gptq|awq]`: writes IN (GGUF
// or Hugging Face) as a GGUF whose weight matrices are in type T, tokenizer
// included: round-to-nearest (bit-compatible with llama.cpp's reference
// quantizers), or importance-weighted rounding with an importance matrix
// (--imatrix FILE from `ember imatrix` or llama-imatrix, or computed here
// over calibration text: --method imatrix [--calib FILE]; bit-compatible with
// llama-quantize --imatrix), GPTQ error feedback (--method gptq) or AWQ
// scales folded into the model before rounding (--method awq; layer by
// layer over calibration text). Then runs both models over a held-out text and
// prints how far the new file is from IN (KL divergence mean / p99, top-1
// agreement, perplexity), so a damaging quantization shows. --rotate (or
// --method quarot = --rotate with round-to-nearest) fuses QuaRot's Hadamard
// rotations into the weights first (transform/quarot.h; composes with
// --method gptq, which then calibrates on the rotated model); --act-bits 4
// records 4-bit activations for the block linears (ember.activation_bits).
// The stages are the transform pipeline `ember prune` also runs
// (transform/pipeline.h); the flags they share are in compress_options.h.
#include <cstdio>

#include "cli/common.h"
#include "cli/compress_options.h"

namespace ember::cli {

int cmd_quantize(int argc, char** argv, int first) {
  ArgParser p("quantize", "ember quantize IN OUT --type Q4_K_M|Q4_K_S|Q5_K_M|Q5_K_S|Q6_K|Q3_K_M|Q3_K_S|Q3_K_L|Q2_K|"
                          "Q2_K_S|Q4_0|Q4_1|Q5_0|Q5_1|Q8_0|f16|bf16|f32 [--pure]");
  CompressFlags f;
  std::vector<std::string> pos;
  add_compress_flags(p, &f, "--method", true);
  p.positionals(&pos, "IN OUT");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() != 2) return usage_error(p, "expects IN and OUT");
  PipelineOptions o;
  if (Status st = compress_options(f, true, &o); !st) return usage_error(p, st.message());
  o.in = resolve_model_path(p, pos[0]);
  if (o.in.empty()) return kExitUsage;
  ReportOptions report;
  auto text = check_text(f);
  if (!text) return usage_error(p, text.status().message());
  report.text = *text;
  report.windows = f.check_windows;
  return run_compress("quantize", p, f, o, pos[1], report);
}

}  // namespace ember::cli
