// `ember imatrix MODEL -f TEXT -o FILE`: runs MODEL over calibration text and
// writes the importance matrix (sum of squared activations per input column
// of every weight matrix) in llama.cpp's GGUF imatrix format (or its legacy
// .dat with --output-format dat), so `ember quantize --imatrix FILE` and
// llama-quantize --imatrix both read it (the calibration is the pipeline's,
// transform/pipeline.h). Also default_calibration_path().
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/compress_options.h"
#include "transform/imatrix.h"

namespace ember::cli {

namespace fs = std::filesystem;

std::string default_calibration_path() {
  constexpr const char* kRel = "data/calibration.txt";
  std::error_code ec;
  if (fs::exists(kRel, ec)) return kRel;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = 0;
    const fs::path p = fs::path(buf).parent_path().parent_path() / kRel;
    if (fs::exists(p, ec)) return p.string();
  }
  return kRel;
}

int cmd_imatrix(int argc, char** argv, int first) {
  ArgParser p("imatrix", "ember imatrix [MODEL] -f TEXT -o FILE [--chunk 512] [--chunks N] [--output-format gguf|dat]");
  std::string text_path, out_path, format = "gguf";
  int threads = default_thread_count(), chunk = 512;
  int64_t chunks = 0;
  bool process_output = false;
  std::vector<std::string> pos;
  p.option("-f,--file", &text_path, "TEXT", "calibration text (default: data/calibration.txt)");
  p.option("-o,--output", &out_path, "FILE", "importance matrix to write");
  p.option("-c,--chunk", &chunk, "N", "tokens per chunk, BOS first (default 512, as llama-imatrix)");
  p.option("--chunks", &chunks, "N", "use at most N chunks (default: all)");
  p.option("--output-format", &format, "F", "gguf (default; llama.cpp's current format) or dat (legacy)");
  p.flag("--process-output", &process_output, "also collect the output head's input");
  p.option("-t,--threads", &threads, "N", "threads");
  p.positionals(&pos, "[MODEL]");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() > 1) return usage_error(p, "expects at most one MODEL");
  if (out_path.empty()) return usage_error(p, "an output file is required (-o FILE)");
  if (format != "gguf" && format != "dat") return usage_error(p, "--output-format must be gguf or dat");
  if (chunk < 2 || chunk > 131072) return usage_error(p, "--chunk must be in [2, 131072]");
  if (chunks < 0) return usage_error(p, "--chunks must be >= 0");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (text_path.empty()) text_path = default_calibration_path();
  LoadedModel lm;
  if (!load_model_and_tokenizer(p, pos.empty() ? "" : pos[0], &lm)) return kExitUsage;
  ThreadPool pool(threads);
  const auto t0 = std::chrono::steady_clock::now();
  CliPipelineLog log("imatrix");
  auto m = calibrate_importance(*lm.model, *lm.tokenizer, text_path, chunk, chunks * chunk, process_output, log.log(),
                                pool);
  if (!m) return usage_error(p, m.status().message());
  const Status st = format == "gguf" ? write_imatrix_gguf(*m, out_path) : write_imatrix_legacy(*m, out_path);
  if (!st) {
    std::fprintf(stderr, "ember imatrix: %s\n", st.message().c_str());
    return kExitFailure;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu matrices, %d chunks of %d tokens, in %.1f s\n", out_path.c_str(), m->entries.size(),
              m->chunk_count, m->chunk_size, dt);
  return kExitOk;
}

}  // namespace ember::cli
