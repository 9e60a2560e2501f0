// `ember quantize IN OUT --type T`: writes IN (GGUF or Hugging Face) as a
// GGUF whose weight matrices are in type T (round-to-nearest, bit-compatible
// with llama.cpp's reference quantizers), tokenizer included. Then runs both
// models over a text and prints how far the new file is from IN (KL
// divergence, top-1 agreement, perplexity), so a damaging quantization shows.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include "cli/common.h"
#include "eval/model_compare.h"
#include "model/io/gguf.h"
#include "transform/convert.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {
namespace {

// The default text of the quality check: plain expository English.
constexpr const char* kCheckText =
    "The river rises in the hills to the north, where snow lingers on the high ground until late spring. For most "
    "of its length it runs through farmland: wheat and barley on the flat ground, orchards and sheep on the "
    "slopes. Small towns grew up wherever the water could be crossed, first by ford, later by stone bridges, and "
    "each market day the roads fill with carts and, these days, with delivery vans. The old mills have mostly "
    "been turned into houses or museums, although one still grinds flour for a bakery that has traded under the "
    "same name for two hundred years. In dry summers the level drops far enough to show the foundations of a "
    "Roman ferry landing, and local schools take their pupils to see it. Engineers have argued for decades about "
    "whether to build a reservoir upstream; supporters point to the floods of the last century, while opponents "
    "worry about the fish, the farms that would be lost, and the cost.";

// Loads IN and OUT as models and prints the comparison; false on failure
// (the file is written either way: this is a report, not a gate).
bool check_quality(const std::string& in, const std::string& out, const std::string& text, ThreadPool& pool) {
  auto ref = Model::load(in);
  auto mod = Model::load(out);
  if (!ref || !mod) {
    std::fprintf(stderr, "ember quantize: quality check skipped: %s\n",
                 (!ref ? ref.status() : mod.status()).message().c_str());
    return false;
  }
  auto tok = Tokenizer::from_metadata((*mod)->file().metadata);
  if (!tok) {
    std::fprintf(stderr, "ember quantize: quality check skipped: tokenizer: %s\n", tok.status().message().c_str());
    return false;
  }
  std::vector<int32_t> ids = (*tok)->encode(text);
  if (ids.size() > 1024) ids.resize(1024);
  auto c = compare_models(**ref, **mod, ids, pool);
  if (!c) {
    std::fprintf(stderr, "ember quantize: quality check skipped: %s\n", c.status().message().c_str());
    return false;
  }
  std::printf("quality vs %s over %lld tokens: KL divergence mean %.5f, max %.4f; top-1 agreement %.1f%%; "
              "perplexity %.3f -> %.3f (%+.2f%%)\n",
              in.c_str(), static_cast<long long>(c->n_positions + 1), c->kl_mean, c->kl_max,
              100.0 * c->top1_agreement, c->ppl_reference, c->ppl_model,
              100.0 * (c->ppl_model / c->ppl_reference - 1.0));
  return true;
}

}  // namespace

int cmd_quantize(int argc, char** argv, int first) {
  ArgParser p("quantize", "ember quantize IN OUT --type q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|f16|bf16|f32");
  std::string type_name;
  int threads = default_thread_count();
  bool strict = false, no_check = false;
  std::string check_file, output_type_name, embd_type_name;
  std::vector<std::string> pos;
  p.option("--type", &type_name, "T", "target tensor type");
  p.option("-t,--threads", &threads, "N", "threads");
  p.flag("--no-fallback", &strict, "fail instead of falling back when rows do not fit the block size");
  p.option("--output-type", &output_type_name, "T",
           "type of the output head (token_embd when tied), e.g. q8_0 or q6_k (default: --type)");
  p.option("--token-embedding-type", &embd_type_name, "T", "type of the token embedding (default: --type)");
  p.flag("--no-check", &no_check, "skip the quality check (KL divergence, top-1, perplexity against IN)");
  p.option("--check-file", &check_file, "FILE", "text of the quality check (default: a built-in paragraph)");
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
  ConvertOptions opts;
  opts.type = type;
  opts.allow_fallback = !strict;
  for (auto [name, flag, dst] : {std::tuple{&output_type_name, "--output-type", &opts.output_type},
                                 std::tuple{&embd_type_name, "--token-embedding-type", &opts.token_embd_type}}) {
    if (name->empty()) continue;
    DType t;
    if (!dtype_from_name(*name, &t) || !convertible_to(t))
      return usage_error(p, fmt::format("unsupported {} '{}'", flag, *name));
    *dst = t;
  }
  std::string in = resolve_model_path(p, pos[0]);
  if (in.empty()) return kExitUsage;
  std::string check_text = kCheckText;
  if (!check_file.empty()) {
    std::ifstream f(check_file, std::ios::binary);
    if (!f) return usage_error(p, fmt::format("cannot read --check-file '{}'", check_file));
    std::ostringstream ss;
    ss << f.rdbuf();
    check_text = ss.str();
    if (check_text.empty()) return usage_error(p, fmt::format("--check-file '{}' is empty", check_file));
  }

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

  auto plan = plan_quantization(**file, opts);
  if (!plan) return usage_error(p, plan.status().message());
  std::printf("%s\n", quant_plan_summary(*plan).c_str());
  std::fflush(stdout);
  ThreadPool pool(threads);
  auto conv = convert_model(std::move(file.value()), *plan, pool);
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
  std::fflush(stdout);
  if (!no_check) check_quality(in, pos[1], check_text, pool);
  return kExitOk;
}

}  // namespace ember::cli
