// `ember eval kl BASE MODEL -f TEXT`: how far MODEL (e.g. a quantized copy)
// is from BASE on a held-out text: KL divergence (mean, p99, max) of its
// next-token distributions from BASE's, top-1 agreement and the perplexity
// of both, over windows of --ctx positions (BOS first when the model uses
// one). The same statistics `ember quantize` prints after writing a file.
// --kv-cache-dtype (-ctk / -ctv) and --kv-rotation set MODEL's KV cache
// format (BASE keeps f32, unrotated): `ember eval kl M M --kv-cache-dtype q8`
// measures the cache alone. --act-bits 8|4 sets MODEL's activation bits
// (cli/act_options.h). --kv-cache-dtype and --kv-rotation take comma
// lists, and so do -ctk / -ctv: every combination is measured against one
// pass of BASE (`--kv-cache-dtype f16,q8,q4 --kv-rotation none,hadamard`,
// `-ctk q4,q4c -ctv f16,q4`), one line each.
// --score-from P scores positions P.. of each window only (llama-perplexity
// --kl-divergence scores the second half: --score-from ctx/2).
// --moe-top-k / --moe-share set MODEL's expert routing (cli/moe_options.h);
// --concurrency B runs the windows B at a time as concurrent sequences
// decoding in lockstep (what expert sharing acts on), and for MoE models
// prints the distinct experts a layer read per step on both sides, with the
// uniform-routing bound E (1 - (1 - k/E)^B).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/act_options.h"
#include "cli/moe_options.h"
#include "cli/kv_options.h"
#include "eval/model_compare.h"

namespace ember::cli {
namespace {

// "a,b" -> {"a", "b"}; "" -> {""} (the flag's default).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(',', b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

}  // namespace

int cmd_eval(int argc, char** argv, int first) {
  ArgParser p("eval", "ember eval kl BASE MODEL -f TEXT [--ctx 512] [--chunks N] [--score-from P] "
                      "[--kv-cache-dtype T[,T...]] [--kv-rotation R[,R...]] [--act-bits 8|4] [-t THREADS]");
  std::string text_path;
  int64_t n_ctx = 512, chunks = 8, score_from = 0;
  int threads = default_thread_count();
  std::vector<std::string> pos;
  p.option("-f,--file", &text_path, "TEXT", "held-out evaluation text (e.g. data/persuasion.txt)");
  p.option("-c,--ctx", &n_ctx, "N", "positions per window (default 512)");
  p.option("--chunks", &chunks, "N", "windows to evaluate (default 8; 0: the whole text)");
  p.option("--score-from", &score_from, "P", "first scored position of each window (default 0: all)");
  p.option("-t,--threads", &threads, "N", "threads");
  int concurrency = 0;
  p.option("--concurrency", &concurrency, "B",
           "run the windows B at a time as concurrent sequences decoding in lockstep (default 0: one window at a "
           "time, in chunks)");
  p.positionals(&pos, "kl BASE MODEL");
  KvOptions kv_opts;
  kv_opts.add_to(p);
  ActOptions act_opts;
  act_opts.add_to(p);
  MoeOptions moe_opts;
  moe_opts.add_to(p);
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.empty() || pos[0] != "kl") return usage_error(p, "expects the metric 'kl' first");
  if (pos.size() != 3) return usage_error(p, "expects kl BASE MODEL");
  if (text_path.empty()) return usage_error(p, "an evaluation text is required (-f TEXT)");
  if (n_ctx < 2 || n_ctx > 4096) return usage_error(p, "--ctx must be in [2, 4096]");
  if (chunks < 0) return usage_error(p, "--chunks must be >= 0");
  if (score_from < 0 || score_from >= n_ctx - 1) return usage_error(p, "--score-from must be in [0, ctx - 1)");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (concurrency < 0 || concurrency > 512) return usage_error(p, "--concurrency must be in [0, 512]");
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return usage_error(p, fmt::format("cannot read '{}'", text_path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LoadedModel base, mod;
  if (!load_model_and_tokenizer(p, pos[1], &base) || !load_model_and_tokenizer(p, pos[2], &mod)) return kExitUsage;
  if (Status st = act_opts.apply(mod.model.get()); !st) return usage_error(p, st.message());
  if (Status st = moe_opts.apply(mod.model.get()); !st) return usage_error(p, st.message());
  const std::vector<int32_t> tokens = base.tokenizer->encode(text, {.add_bos = false});
  WindowedCompareOptions o;
  o.n_ctx = n_ctx;
  o.max_windows = chunks;
  o.bos_id = base.tokenizer->add_bos() ? base.tokenizer->bos_id() : -1;
  o.score_from = score_from;
  o.concurrency = concurrency;
  std::vector<KvTypes> kvs;
  for (const std::string& dtype : split_commas(kv_opts.both))
    for (const std::string& kd : split_commas(kv_opts.k))
      for (const std::string& vd : split_commas(kv_opts.v))
        for (const std::string& rotation : split_commas(kv_opts.rotation)) {
          KvOptions one = kv_opts;
          one.both = dtype;
          one.k = kd;
          one.v = vd;
          one.rotation = rotation;
          auto t = one.to_types(mod.model->config());
          if (!t) return usage_error(p, t.status().message());
          if (std::find(kvs.begin(), kvs.end(), *t) == kvs.end()) kvs.push_back(*t);  // "q4 x auto,hadamard": once
        }
  ThreadPool pool(threads);
  auto cs = compare_models_windows(*base.model, *mod.model, tokens, o, kvs, pool);
  if (!cs) return usage_error(p, cs.status().message());
  for (size_t i = 0; i < kvs.size(); ++i) {
    const ModelComparison& c = (*cs)[i];
    std::printf("%s (KV cache %s, %d-bit activations) vs %s on %s: %lld positions in windows of %lld\n",
                pos[2].c_str(), kv_types_name(kvs[i]).c_str(), mod.model->config().act_bits, pos[1].c_str(),
                text_path.c_str(),
                static_cast<long long>(c.n_positions), static_cast<long long>(n_ctx));
    std::printf(
        "KL divergence mean %.6f, p99 %.5f, max %.4f; top-1 agreement %.2f%%; perplexity %.4f -> %.4f (%+.2f%%)\n",
        c.kl_mean, c.kl_p99, c.kl_max, 100.0 * c.top1_agreement, c.ppl_reference, c.ppl_model,
        100.0 * (c.ppl_model / c.ppl_reference - 1.0));
    if (mod.model->config().has_moe()) {
      const ModelConfig& bc = base.model->config();
      // A step: one token of each of B windows (--concurrency B), else a
      // chunk of up to o.chunk positions of one window.
      const double E = bc.max_n_expert(), k = bc.max_n_expert_used();
      const double B = concurrency > 0 ? concurrency : static_cast<double>(std::min<int64_t>(o.chunk, n_ctx));
      const std::string step = concurrency > 0 ? fmt::format("at concurrency {}", concurrency)
                                               : fmt::format("(steps of up to {:g} positions of one window)", B);
      std::printf("MoE routing%s%s: %.2f -> %.2f distinct experts read per layer and step %s "
                  "(uniform routing of %g of %g experts, %g tokens: %.2f)\n",
                  moe_opts.describe().empty() ? "" : " ", moe_opts.describe().c_str(), c.experts_per_step_reference,
                  c.experts_per_step_model, step.c_str(), k, E, B, E * (1.0 - std::pow(1.0 - k / E, B)));
    }
  }
  return kExitOk;
}

}  // namespace ember::cli
