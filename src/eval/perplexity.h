// Perplexity and KL divergence of a model over a token sequence, with
// sliding windows (the core of `ember perplexity`).
//
// Windows. The text tokens t[0..N) are cut into windows of W text tokens,
// W = n_ctx - 1 when a BOS token is given (it takes position 0 of every
// window, as llama.cpp's perplexity does) and W = n_ctx otherwise. Window k
// covers t[k*S, min(k*S + W, N)), S = stride. Every window is evaluated from
// an empty KV cache. Window 0 scores all its tokens but the first (t[0]
// has no context and is never scored); window k > 0 scores only the tokens
// past the end of window k-1, i.e. its last S tokens (fewer for the last
// window). So every token after t[0] is scored exactly once, and each token
// scored by window k > 0 sees at least W - S text tokens of context (plus
// BOS). Windows stop once the end of the text is reached, or after
// max_windows. The stride must satisfy 1 <= S <= W (S <= W - 1 without BOS,
// since then a window's first token cannot be predicted inside it).
//
// Perplexity = exp(mean NLL) over the scored tokens; the uncertainty is the
// standard error of the mean NLL carried through exp (ppl * stderr), which
// treats tokens as independent and so somewhat understates it.
//
// Logits file (--save-logits / --kl-base), little-endian:
//   header (64 bytes):
//     char[8]  magic "EMBERLP1"
//     u32      version = 1
//     u32      n_vocab
//     i64      n_ctx
//     i64      stride
//     i32      bos_id (-1: none)
//     u32      reserved (0)
//     u64      n_tokens      text tokens of the evaluated text
//     u64      tokens_hash   FNV-1a 64 of the text token ids (i32 LE)
//     u64      n_rows        scored positions stored
//   n_rows records, in scoring order:
//     u32      index         text position of the scored token
//     i32      target        its token id
//     f16[n_vocab]           log-softmax of the logits that predict it
// Size: n_rows * (8 + 2 * n_vocab) bytes (512 KiB per token for a 262k
// vocabulary), so use --chunks for large vocabularies.
//
// KL divergence: both distributions are taken at the precision of the file
// (this model's log-probabilities are rounded to f16 the same way) and each
// is renormalized, so KL(P || P) is exactly 0. Per token:
// KL = sum_i p_i (log p_i - log q_i), with P the base model from the file
// and Q this model; top-1 agreement compares the argmax of both rows.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace ember {

struct PerplexityOptions {
  int64_t n_ctx = 512;      // positions per window, BOS included
  int64_t stride = 0;       // 0: n_ctx / 2
  int64_t max_windows = 0;  // 0: all
  int32_t bos_id = -1;      // >= 0: at position 0 of every window
  int logits_batch = 32;    // positions whose logits one forward call produces
};

struct PplWindow {
  int64_t begin = 0;        // first text token of the window
  int64_t end = 0;          // one past its last text token
  int64_t score_begin = 0;  // text tokens [score_begin, end) are scored here
};

// Checks the options against a text of n_tokens tokens and fills in the
// default stride.
Status resolve_perplexity_options(int64_t n_tokens, PerplexityOptions* opts);

// The windows for a text of n_tokens tokens (options as resolved above).
Result<std::vector<PplWindow>> plan_perplexity_windows(int64_t n_tokens, const PerplexityOptions& opts);

// Called for every scored token, in order: its text index, its id, and the
// log-softmax [n_vocab] of the logits that predict it.
using ScoredRowFn = std::function<Status(int64_t index, int32_t target, const float* logprobs)>;

struct PerplexityProgress {
  int64_t windows_done = 0, windows_total = 0;
  int64_t scored = 0, scored_total = 0;  // tokens
  int64_t evaluated = 0;                 // tokens run through the model
  double elapsed_s = 0;
  double nll_sum = 0;
};
using PerplexityProgressFn = std::function<void(const PerplexityProgress&)>;

struct PerplexityResult {
  int64_t n_scored = 0;
  int64_t n_windows = 0;
  int64_t n_evaluated = 0;  // tokens run through the model (BOS included)
  double nll_mean = 0;
  double nll_stderr = 0;
  double ppl = 0;
  double ppl_err = 0;
  double seconds = 0;
};

// Runs the windows over `tokens` (ids < n_vocab). on_row and progress may
// be empty.
Result<PerplexityResult> compute_perplexity(const Model& model, ThreadPool& pool, const std::vector<int32_t>& tokens,
                                            const PerplexityOptions& opts, const ScoredRowFn& on_row = {},
                                            const PerplexityProgressFn& progress = {});

// FNV-1a 64 over the token ids as little-endian i32.
uint64_t hash_tokens(const std::vector<int32_t>& tokens);

struct LogitsFileHeader {
  uint32_t n_vocab = 0;
  int64_t n_ctx = 0;
  int64_t stride = 0;
  int32_t bos_id = -1;
  uint64_t n_tokens = 0;
  uint64_t tokens_hash = 0;
  uint64_t n_rows = 0;
};
constexpr size_t kLogitsHeaderBytes = 64;

// Writes a logits file; n_rows in the header is patched by finish().
class LogitsWriter {
 public:
  static Result<std::unique_ptr<LogitsWriter>> create(const std::string& path, const LogitsFileHeader& h);
  ~LogitsWriter();
  Status add(int64_t index, int32_t target, const float* logprobs);
  Status finish();  // writes n_rows, closes; the file is removed if never finished
  uint64_t rows() const { return rows_; }

 private:
  LogitsWriter() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  LogitsFileHeader h_;
  uint64_t rows_ = 0;
  std::vector<uint16_t> buf_;
};

// Reads a logits file record by record, checking it against its header.
class LogitsReader {
 public:
  static Result<std::unique_ptr<LogitsReader>> open(const std::string& path);
  ~LogitsReader();
  const LogitsFileHeader& header() const { return h_; }
  // Next record; logprobs [n_vocab] gets the stored f16 values.
  Status next(int64_t* index, int32_t* target, float* logprobs);

 private:
  LogitsReader() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  LogitsFileHeader h_;
  uint64_t read_ = 0;
  std::vector<uint16_t> buf_;
};

// Accumulates per-token KL divergence KL(base || this) and top-1 agreement.
class KlAccumulator {
 public:
  explicit KlAccumulator(int64_t n_vocab) : n_vocab_(n_vocab), p_(n_vocab), q_(n_vocab) {}
  // base: log-probabilities from the file (f16 values); ours: this model's
  // log-softmax. Both are rounded to f16 and renormalized first.
  void add(const float* base, const float* ours);

  struct Summary {
    int64_t n = 0;
    double mean = 0, stderr_ = 0, median = 0, p99 = 0, max = 0;
    double top1_agree = 0;  // fraction in [0, 1]
  };
  Summary summary() const;

 private:
  int64_t n_vocab_;
  std::vector<double> p_, q_;
  std::vector<double> kl_;
  int64_t agree_ = 0;
};

}  // namespace ember
