// `ember quantize IN OUT --type T`: writes IN (GGUF or Hugging Face) as a
// GGUF whose weight matrices are in type T (round-to-nearest, bit-compatible
// with llama.cpp's reference quantizers), tokenizer included.
#include <chrono>
#include <cstdio>

#include "cli/common.h"
#include "model/convert.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {

int cmd_quantize(int argc, char** argv, int first) {
  ArgParser p("quantize", "ember quantize IN OUT --type q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|f16|bf16|f32");
  std::string type_name;
  int threads = default_thread_count();
  bool strict = false;
  std::vector<std::string> pos;
  p.option("--type", &type_name, "T", "target tensor type");
  p.option("-t,--threads", &threads, "N", "threads");
  p.flag("--no-fallback", &strict, "fail instead of falling back when rows do not fit the block size");
  p.positionals(&pos, "IN OUT");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() != 2) return usage_error(p, "expects IN and OUT");
  if (type_name.empty()) return usage_error(p, "--type is required");
  DType type;
  if (!dtype_from_name(type_name, &type) || !convertible_to(type))
    return usage_error(p, fmt::format("unsupported --type '{}'", type_name));
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  std::string in = resolve_model_path(p, pos[0]);
  if (in.empty()) return kExitUsage;

  auto t0 = std::chrono::steady_clock::now();
  auto file = open_model_file(in);
  if (!file) return usage_error(p, file.status().message());
  // A Hugging Face folder: bring its tokenizer into the GGUF.
  if (const std::string* dir = (*file)->metadata.get_string("ember.hf.dir");
      dir && !(*file)->metadata.find("tokenizer.ggml.tokens")) {
    if (Status st = metadata_from_hf_tokenizer(*dir, &(*file)->metadata); !st)
      return usage_error(p, fmt::format("{}: tokenizer: {}", in, st.message()));
  }
  // Refuse files ember could not run afterwards.
  if (auto cfg = config_from_metadata((*file)->metadata); !cfg)
    return usage_error(p, fmt::format("{}: {}", in, cfg.status().message()));

  ThreadPool pool(threads);
  ConvertOptions opts;
  opts.type = type;
  opts.allow_fallback = !strict;
  auto conv = convert_model(std::move(file.value()), opts, pool);
  if (!conv) return usage_error(p, conv.status().message());
  const ModelFile& out = **conv;

  GgufWriter w;
  for (const auto& [k, v] : out.metadata.entries())
    if (k.rfind("ember.hf.", 0) != 0) w.add(k, v);
  size_t bytes = 0;
  for (const auto& [name, t] : out.tensors) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (Status st = w.add_tensor_ref(name, t.type, ne, t.data, t.nbytes); !st)
      return usage_error(p, st.message());
    bytes += t.nbytes;
  }
  if (Status st = w.write(pos[1]); !st) {
    std::fprintf(stderr, "ember quantize: %s\n", st.message().c_str());
    return kExitFailure;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu tensors, %.1f MiB of weights, type %s, in %.1f s\n", pos[1].c_str(), out.tensors.size(),
              bytes / 1048576.0, dtype_name(type), dt);
  return kExitOk;
}

}  // namespace ember::cli
