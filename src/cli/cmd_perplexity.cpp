// `ember perplexity`: perplexity of a model over a text file with sliding
// windows (eval/perplexity.h explains the window rules and the logits file
// format), optionally saving every scored position's log-probabilities
// (--save-logits) or comparing against such a file from a reference model
// (--kl-base: KL divergence and top-1 agreement).
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli/common.h"
#include "cli/moe_options.h"
#include "cli/progress.h"
#include "eval/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {

namespace {


// A live status line on a terminal; otherwise a plain line every 10% of the
// windows or every 30 seconds.
class ProgressDisplay {
 public:
  ProgressDisplay() : tty_(isatty(fileno(stderr)) != 0) {}
  void update(const PerplexityProgress& p) {
    const double frac = p.scored_total ? static_cast<double>(p.scored) / p.scored_total : 1.0;
    const double rate = p.elapsed_s > 0 ? p.evaluated / p.elapsed_s : 0;
    const double eta = frac > 0 ? p.elapsed_s * (1 - frac) / frac : 0;
    const double ppl = p.scored ? std::exp(p.nll_sum / p.scored) : 0;
    const std::string line =
        fmt::format("[{}/{}] {:5.1f}%  {} tokens scored  ppl {:.4f}  {:.1f} tok/s  elapsed {}  ETA {}", p.windows_done,
                    p.windows_total, 100 * frac, p.scored, ppl, rate, format_duration(p.elapsed_s),
                    format_duration(eta));
    const bool last = p.windows_done == p.windows_total;
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), last ? "\n" : "");
      std::fflush(stderr);
      return;
    }
    const int decile = static_cast<int>(frac * 10);
    if (last || decile > last_decile_ || p.elapsed_s - last_print_ >= 30) {
      std::fprintf(stderr, "%s\n", line.c_str());
      last_decile_ = decile;
      last_print_ = p.elapsed_s;
    }
  }

 private:
  bool tty_;
  int last_decile_ = 0;
  double last_print_ = 0;
};

}  // namespace

int cmd_perplexity(int argc, char** argv, int first) {
  ArgParser p("perplexity",
              "ember perplexity [-m MODEL] -f FILE [--ctx 512] [--stride S] [--chunks K] [-t THREADS] "
              "[--save-logits OUT] [--kl-base LOGITS]");
  std::string model_path, text_path, save_path, kl_path;
  int64_t n_ctx = 0, stride = 0, chunks = 0;
  int threads = default_thread_count(), batch = 32;
  bool no_bos = false;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.option("-f,--file", &text_path, "FILE", "text to evaluate (e.g. data/persuasion.txt)");
  p.option("-c,--ctx", &n_ctx, "N", "positions per window, BOS included (default 512)");
  p.option("--stride", &stride, "S", "window step in tokens; windows after the first score their last S tokens "
                                     "(default ctx/2)");
  p.option("--chunks", &chunks, "K", "evaluate only the first K windows (default: all)");
  p.option("-t,--threads", &threads, "N", "threads (default: all cores)");
  p.option("--batch", &batch, "N", "positions per forward call while scoring (default 32)");
  p.flag("--no-bos", &no_bos, "do not start windows with BOS even if the model wants one");
  p.option("--save-logits", &save_path, "OUT", "write the log-probabilities of every scored position (f16; large)");
  p.option("--kl-base", &kl_path, "LOGITS", "compare against a file written by --save-logits (KL, top-1)");
  MoeOptions moe_opts;
  moe_opts.add_to(p);
  LoadFlags load_flags;
  load_flags.add_to(p);
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (text_path.empty()) return usage_error(p, "a text file is required (-f FILE)");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (chunks < 0) return usage_error(p, "--chunks must be >= 0");
  if (n_ctx < 0 || stride < 0) return usage_error(p, "--ctx and --stride must be positive");
  if (batch < 1 || batch > 512) return usage_error(p, "--batch must be in [1, 512]");
  if (!save_path.empty() && save_path == kl_path) return usage_error(p, "--save-logits would overwrite --kl-base");

  std::unique_ptr<LogitsReader> base;
  if (!kl_path.empty()) {
    auto r = LogitsReader::open(kl_path);
    if (!r) return usage_error(p, r.status().message());
    base = std::move(r.value());
    const LogitsFileHeader& h = base->header();
    if (n_ctx && n_ctx != h.n_ctx)
      return usage_error(p, fmt::format("--ctx {} differs from the base file's {}", n_ctx, h.n_ctx));
    if (stride && stride != h.stride)
      return usage_error(p, fmt::format("--stride {} differs from the base file's {}", stride, h.stride));
    n_ctx = h.n_ctx;
    stride = h.stride;
  }
  if (n_ctx == 0) n_ctx = 512;

  std::ifstream in(text_path, std::ios::binary);
  if (!in) return usage_error(p, fmt::format("cannot read '{}'", text_path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  LoadedModel lm;
  if (!load_model_and_tokenizer(p, model_path, &lm, {}, load_flags)) return kExitUsage;
  if (Status st = moe_opts.apply(lm.model.get()); !st) return usage_error(p, st.message());
  const std::string& path = lm.path;
  const Model& m = *lm.model;
  const std::unique_ptr<Tokenizer>* tok = &lm.tokenizer;
  const std::vector<int32_t> tokens = (*tok)->encode(text, {.add_bos = false});
  const int64_t V = m.config().n_vocab;

  PerplexityOptions opts;
  opts.n_ctx = n_ctx;
  opts.stride = stride;
  opts.max_windows = chunks;
  opts.bos_id = (!no_bos && (*tok)->add_bos()) ? (*tok)->bos_id() : -1;
  opts.logits_batch = batch;
  if (Status st = resolve_perplexity_options(static_cast<int64_t>(tokens.size()), &opts); !st)
    return usage_error(p, st.message());
  auto plan = plan_perplexity_windows(static_cast<int64_t>(tokens.size()), opts);
  if (!plan) return usage_error(p, plan.status().message());
  int64_t n_score = 0;
  for (const PplWindow& w : *plan) n_score += w.end - w.score_begin;

  std::printf("model: %s (%s, %.1f M params)\n", path.c_str(), m.config().arch.c_str(), m.n_params() / 1e6);
  std::printf("text: %s: %zu bytes, %zu tokens\n", text_path.c_str(), text.size(), tokens.size());
  std::printf("windows: %zu of %lld positions (%s%lld text tokens), stride %lld; scoring %lld tokens; threads %d\n",
              plan->size(), static_cast<long long>(opts.n_ctx), opts.bos_id >= 0 ? "BOS + " : "",
              static_cast<long long>(opts.bos_id >= 0 ? opts.n_ctx - 1 : opts.n_ctx),
              static_cast<long long>(opts.stride), static_cast<long long>(n_score), threads);
  if (opts.n_ctx > m.config().n_ctx_train)
    std::fprintf(stderr, "ember perplexity: warning: --ctx %lld exceeds the model's trained context %d\n",
                 static_cast<long long>(opts.n_ctx), m.config().n_ctx_train);
  std::fflush(stdout);

  const uint64_t hash = hash_tokens(tokens);
  if (base) {
    const LogitsFileHeader& h = base->header();
    if (h.n_vocab != static_cast<uint64_t>(V))
      return usage_error(p, fmt::format("the base file has {} vocabulary entries, this model {}", h.n_vocab, V));
    if (h.n_tokens != tokens.size() || h.tokens_hash != hash)
      return usage_error(p, "the base file was made from another text or tokenizer (token ids differ)");
    if (h.bos_id != opts.bos_id)
      return usage_error(p, fmt::format("the base file used BOS id {}, this run {}", h.bos_id, opts.bos_id));
    if (h.n_rows < static_cast<uint64_t>(n_score))
      return usage_error(p, fmt::format("the base file holds {} scored positions, this run needs {}: use the same "
                                        "--chunks",
                                        h.n_rows, n_score));
  }
  std::unique_ptr<LogitsWriter> writer;
  if (!save_path.empty()) {
    const double bytes = static_cast<double>(n_score) * (8.0 + 2.0 * V) + kLogitsHeaderBytes;
    std::printf("writing %s: %lld positions x %.1f KiB = %.2f GiB\n", save_path.c_str(), static_cast<long long>(n_score),
                (8.0 + 2.0 * V) / 1024, bytes / 1073741824.0);
    if (bytes > 1073741824.0)
      std::fprintf(stderr, "ember perplexity: warning: the logits file will take %.1f GiB (use --chunks to limit)\n",
                   bytes / 1073741824.0);
    std::string dir = save_path.find('/') == std::string::npos ? "." : save_path.substr(0, save_path.rfind('/') + 1);
    struct statvfs vfs;
    if (statvfs(dir.c_str(), &vfs) == 0 && static_cast<double>(vfs.f_bavail) * vfs.f_frsize < bytes)
      return usage_error(p, fmt::format("not enough free space for {} ({:.2f} GiB needed)", save_path,
                                        bytes / 1073741824.0));
    LogitsFileHeader h;
    h.n_vocab = static_cast<uint32_t>(V);
    h.n_ctx = opts.n_ctx;
    h.stride = opts.stride;
    h.bos_id = opts.bos_id;
    h.n_tokens = tokens.size();
    h.tokens_hash = hash;
    auto w = LogitsWriter::create(save_path, h);
    if (!w) return usage_error(p, w.status().message());
    writer = std::move(w.value());
  }

  KlAccumulator kl(V);
  std::vector<float> base_row(base ? V : 0);
  double base_nll = 0;
  ScoredRowFn on_row;
  if (writer || base) {
    on_row = [&](int64_t index, int32_t target, const float* lp) -> Status {
      if (writer) EMBER_RETURN_IF_ERROR(writer->add(index, target, lp));
      if (base) {
        int64_t bi = 0;
        int32_t bt = 0;
        EMBER_RETURN_IF_ERROR(base->next(&bi, &bt, base_row.data()));
        if (bi != index || bt != target)
          return Status::errorf("base file row for token {} ({}) does not match this run's token {} ({})", bi, bt,
                                index, target);
        base_nll -= base_row[target];
        kl.add(base_row.data(), lp);
      }
      return Status::ok();
    };
  }

  ThreadPool pool(threads);
  ProgressDisplay display;
  auto res = compute_perplexity(m, pool, tokens, opts, on_row,
                                [&](const PerplexityProgress& pr) { display.update(pr); });
  if (!res) {
    std::fprintf(stderr, "ember perplexity: %s\n", res.status().message().c_str());
    return kExitFailure;
  }
  if (writer) {
    if (Status st = writer->finish(); !st) {
      std::fprintf(stderr, "ember perplexity: %s\n", st.message().c_str());
      return kExitFailure;
    }
  }
  const PerplexityResult& r = *res;
  std::printf("perplexity: %.4f +/- %.4f (mean NLL %.5f +/- %.5f nats) over %lld tokens in %lld windows\n", r.ppl,
              r.ppl_err, r.nll_mean, r.nll_stderr, static_cast<long long>(r.n_scored),
              static_cast<long long>(r.n_windows));
  std::printf("time: %.2f s; %.1f tok/s evaluated (%lld tokens), %.1f tok/s scored\n", r.seconds,
              r.n_evaluated / r.seconds, static_cast<long long>(r.n_evaluated), r.n_scored / r.seconds);
  if (writer) std::printf("saved %llu positions to %s\n", static_cast<unsigned long long>(writer->rows()),
                          save_path.c_str());
  if (base) {
    const KlAccumulator::Summary s = kl.summary();
    std::printf("base perplexity (from %s): %.4f\n", kl_path.c_str(), std::exp(base_nll / std::max<int64_t>(1, s.n)));
    std::printf("KL divergence (base || this): mean %.6f +/- %.6f, median %.6f, p99 %.6f, max %.6f over %lld tokens\n",
                s.mean, s.stderr_, s.median, s.p99, s.max, static_cast<long long>(s.n));
    std::printf("top-1 agreement: %.3f%%\n", 100 * s.top1_agree);
  }
  return kExitOk;
}

}  // namespace ember::cli
