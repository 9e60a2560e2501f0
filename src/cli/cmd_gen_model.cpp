// `ember gen-model`: writes a random-weight GGUF model of a real
// architecture and shape (transform/gen_model.h), for speed tests at realistic
// sizes without downloads. Both ember and llama.cpp load the result.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/common.h"
#include "model/archs/archs.h"
#include "transform/convert.h"
#include "transform/gen_model.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {

namespace {

// Names of the architectures whose gen-model vocabulary is (not) copied
// from the default model, "a, b".
std::string archs_copying_vocab(bool copies) {
  std::string out;
  for (const ArchSpec* a : arch_specs())
    if (a->gen.copy_default_vocab == copies) out += std::string(out.empty() ? "" : ", ") + a->name;
  return out;
}

}  // namespace

int cmd_gen_model(int argc, char** argv, int first) {
  ArgParser p("gen-model",
              "ember gen-model (--shape NAME | --arch " + arch_names("|") +
                  " --n-layer N --n-embd N --n-ff N --n-head N "
                  "[--n-head-kv N] [--head-dim N] [--n-vocab N]) [--type T] [--seed S] [--vocab-from MODEL | "
                  "--synthetic-vocab] -o OUT.gguf");
  std::string shape_name, arch, type_name = "q8_0", out, vocab_from;
  int n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0, n_ctx = 0;
  int n_expert = -1, n_expert_used = -1, n_ff_exp = -1, n_ff_shexp = -1, sliding_window = -1;
  int threads = default_thread_count();
  uint64_t seed = 0;
  bool synthetic = false, list = false;
  std::string shape_names;
  for (const std::string& n : gen_model_shape_names()) shape_names += (shape_names.empty() ? "" : ", ") + n;
  p.option("--shape", &shape_name, "NAME", shape_names);
  p.option("--arch", &arch, "A", "architecture for explicit sizes: " + arch_names());
  p.option("--n-layer", &n_layer, "N", "layers (overrides the shape's)");
  p.option("--n-embd", &n_embd, "N", "embedding size");
  p.option("--n-ff", &n_ff, "N", "feed-forward size");
  p.option("--n-head", &n_head, "N", "attention heads");
  p.option("--n-head-kv", &n_head_kv, "N", "key/value heads (default: n-head)");
  p.option("--head-dim", &head_dim, "N", "head size (default: n-embd / n-head)");
  p.option("--n-vocab", &n_vocab, "N", "vocabulary size of the synthetic vocabulary");
  p.option("--ctx", &n_ctx, "N", "trained context length written to the file");
  p.option("--n-expert", &n_expert, "N", "experts per layer (0: dense; llama: the Mixtral layout)");
  p.option("--n-expert-used", &n_expert_used, "N", "experts used per token");
  p.option("--n-ff-exp", &n_ff_exp, "N", "an expert's FFN size (qwen2moe / qwen3moe; default: --n-ff)");
  p.option("--n-ff-shexp", &n_ff_shexp, "N", "the shared expert's FFN size (qwen2moe; default: --n-ff)");
  p.option("--type", &type_name, "T", "type of the weight matrices (default q8_0): f32 f16 bf16 q4_0 q4_1 q5_0 "
                                      "q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k, or mxfp4 (experts; other matrices "
                                      "q8_0)");
  p.option("--sliding-window", &sliding_window, "N", "window of the sliding-window layers (0: none)");
  p.option("--seed", &seed, "S", "random seed (default 0); same seed, same file");
  p.option("--vocab-from", &vocab_from, "MODEL",
           "copy the tokenizer of this model (default for " + archs_copying_vocab(true) + ": the default model's)");
  p.flag("--synthetic-vocab", &synthetic,
         "use a synthetic byte-level BPE vocabulary (default for " + archs_copying_vocab(false) + ")");
  p.option("-t,--threads", &threads, "N", "threads");
  p.option("-o,--output", &out, "OUT", "output .gguf file");
  p.flag("--list-shapes", &list, "print the known shapes and exit");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (list) {
    for (const std::string& n : gen_model_shape_names()) {
      auto s = gen_model_shape(n);
      if (!s) {
        std::printf("%-14s (refused: %s)\n", n.c_str(), s.status().message().c_str());
        continue;
      }
      std::printf("%-14s %-6s layers %3d  embd %5d  ff %5d  heads %2d/%d  head_dim %3lld  vocab %6d%s", n.c_str(),
                  s->arch.c_str(), s->n_layer, s->n_embd, s->n_ff, s->n_head, s->n_head_kv,
                  static_cast<long long>(s->head_size()), s->n_vocab, s->tied_embeddings ? "  tied" : "");
      if (s->n_expert > 0)
        std::printf("  experts %d (%d used, ff %d)", s->n_expert, s->n_expert_used,
                    s->n_ff_exp > 0 ? s->n_ff_exp : s->n_ff);
      std::printf("\n");
    }
    return kExitOk;
  }
  if (out.empty()) return usage_error(p, "an output file is required (-o OUT.gguf)");
  if (shape_name.empty() == arch.empty()) return usage_error(p, "give exactly one of --shape and --arch");
  if (synthetic && !vocab_from.empty()) return usage_error(p, "use either --vocab-from or --synthetic-vocab");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  DType type;
  if (!dtype_from_name(type_name, &type) || !convertible_to(type))
    return usage_error(p, fmt::format("unsupported --type '{}'", type_name));

  auto base = shape_name.empty() ? gen_model_arch_defaults(arch) : gen_model_shape(shape_name);
  if (!base) return usage_error(p, base.status().message());
  GenModelShape shape = *base;
  for (auto [v, dst] : {std::pair{n_layer, &shape.n_layer}, {n_embd, &shape.n_embd}, {n_ff, &shape.n_ff},
                        {n_head, &shape.n_head}, {head_dim, &shape.head_dim}, {n_vocab, &shape.n_vocab},
                        {n_ctx, &shape.n_ctx}}) {
    if (v < 0) return usage_error(p, "sizes must be positive");
    if (v > 0) *dst = v;
  }
  if (n_head_kv < 0) return usage_error(p, "sizes must be positive");
  if (n_expert >= 0) shape.n_expert = n_expert;
  if (n_ff_exp >= 0) shape.n_ff_exp = n_ff_exp;
  if (n_ff_shexp >= 0) shape.n_ff_shexp = n_ff_shexp;
  if (sliding_window >= 0) shape.sliding_window = sliding_window;
  if (n_expert_used >= 0) shape.n_expert_used = n_expert_used;
  if (shape.n_expert == 0 && n_expert_used < 0) shape.n_expert_used = 0;
  else if (shape.n_expert_used == 0) shape.n_expert_used = std::min(2, shape.n_expert);
  if (n_head_kv > 0) shape.n_head_kv = n_head_kv;
  if (shape.n_head_kv == 0) shape.n_head_kv = shape.n_head;  // --arch without --n-head-kv: no GQA
  if (shape.sliding_window > 0 && n_ctx > 0 && shape.sliding_window > n_ctx) shape.sliding_window = n_ctx;
  if (!arch.empty() && (shape.n_layer == 0 || shape.n_embd == 0 || shape.n_ff == 0 || shape.n_head == 0))
    return usage_error(p, "--arch needs --n-layer, --n-embd, --n-ff and --n-head");
  if (Status st = validate_gen_model_shape(shape); !st) return usage_error(p, st.message());

  // The vocabulary: copied from a model, or synthetic.
  Metadata vocab_md;
  bool copy_vocab = !vocab_from.empty();
  if (!copy_vocab && !synthetic && find_arch(shape.arch)->gen.copy_default_vocab) {
    vocab_from = default_model_path();
    copy_vocab = true;
    if (n_vocab > 0)
      return usage_error(p, fmt::format("--n-vocab needs --synthetic-vocab for {} (its vocabulary is copied)",
                                        shape.arch));
  }
  if (copy_vocab) {
    if (n_vocab > 0) return usage_error(p, "--n-vocab cannot be combined with --vocab-from");
    std::string path = resolve_model_path(p, vocab_from);
    if (path.empty()) return kExitUsage;
    auto file = open_model_file(path);
    if (!file) return usage_error(p, file.status().message());
    vocab_md = (*file)->metadata;
    if (const std::string* dir = vocab_md.get_string("ember.hf.dir"); dir && !vocab_md.find("tokenizer.ggml.tokens")) {
      if (Status st = metadata_from_hf_tokenizer(*dir, &vocab_md); !st)
        return usage_error(p, fmt::format("{}: tokenizer: {}", path, st.message()));
    }
    if (!vocab_md.find("tokenizer.ggml.tokens")) return usage_error(p, fmt::format("{} has no vocabulary", path));
    std::printf("vocabulary: copied from %s\n", path.c_str());
  }

  GenModelOptions opts;
  opts.type = type;
  opts.seed = seed;
  opts.vocab = copy_vocab ? &vocab_md : nullptr;
  ThreadPool pool(threads);
  const auto t0 = std::chrono::steady_clock::now();
  // Progress: a live line on a terminal, a line every 25% otherwise.
  const bool tty = isatty(fileno(stderr)) != 0;
  int last_quarter = 0;
  opts.progress = [&](uint64_t done, uint64_t total) {
    const double frac = total ? static_cast<double>(done) / total : 1.0;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = frac > 0 ? dt * (1 - frac) / frac : 0;
    const int quarter = static_cast<int>(frac * 4);
    if (!tty && quarter == last_quarter) return;
    last_quarter = quarter;
    std::fprintf(stderr, "%s%5.1f%%  %.0f / %.0f MiB  %.1f MiB/s  ETA %.0f s%s", tty ? "\r\033[K" : "", 100 * frac,
                 done / 1048576.0, total / 1048576.0, dt > 0 ? done / 1048576.0 / dt : 0.0, eta,
                 tty ? (done == total ? "\n" : "") : "\n");
    std::fflush(stderr);
  };
  auto stats = write_random_model(shape, opts, out, pool);
  if (!stats) {
    std::fprintf(stderr, "ember gen-model: %s\n", stats.status().message().c_str());
    return kExitFailure;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& f : stats->fallbacks) std::printf("fallback: %s\n", f.c_str());
  if (shape.n_expert > 0)
    std::printf("mixture of experts: %d experts, %d used per token\n", shape.n_expert, shape.n_expert_used);
  std::printf("wrote %s: %s %s, %d layers, embd %d, ff %d, heads %d/%d, head_dim %lld, vocab %d; %lld tensors, "
              "%.1f M params, type %s, %.1f MiB, seed %llu, in %.1f s\n",
              out.c_str(), shape.name.c_str(), shape.arch.c_str(), shape.n_layer, shape.n_embd, shape.n_ff,
              shape.n_head, shape.n_head_kv, static_cast<long long>(shape.head_size()), stats->n_vocab,
              static_cast<long long>(stats->n_tensors), stats->n_params / 1e6, dtype_name(type),
              stats->file_bytes / 1048576.0, static_cast<unsigned long long>(seed), dt);
  return kExitOk;
}

}  // namespace ember::cli
