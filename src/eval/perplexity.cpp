// Sliding-window perplexity, the logits file and KL statistics; see
// perplexity.h for the window rules and the file format.
#include "eval/perplexity.h"

#include "kernels/ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "model/kv_cache.h"

namespace ember {

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'E', 'R', 'L', 'P', '1'};
constexpr uint32_t kVersion = 1;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Text tokens per window.
int64_t window_tokens(const PerplexityOptions& o) { return o.bos_id >= 0 ? o.n_ctx - 1 : o.n_ctx; }

// In place: row[i] -= logsumexp(row) (vectorized, accumulated in double).
void log_softmax_row(float* row, int64_t n) {
  const float lse = static_cast<float>(log_sum_exp_row(row, n));
  for (int64_t i = 0; i < n; ++i) row[i] -= lse;
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t get_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

void encode_header(const LogitsFileHeader& h, uint8_t* b) {
  std::memset(b, 0, kLogitsHeaderBytes);
  std::memcpy(b, kMagic, 8);
  put_u32(b + 8, kVersion);
  put_u32(b + 12, h.n_vocab);
  put_u64(b + 16, static_cast<uint64_t>(h.n_ctx));
  put_u64(b + 24, static_cast<uint64_t>(h.stride));
  put_u32(b + 32, static_cast<uint32_t>(h.bos_id));
  put_u64(b + 40, h.n_tokens);
  put_u64(b + 48, h.tokens_hash);
  put_u64(b + 56, h.n_rows);
}

// f16 value as a double log-probability; the row is then renormalized.
void to_f16_logprobs(const float* src, double* dst, int64_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = f16_to_f32(f32_to_f16(src[i]));
    mx = std::max(mx, dst[i]);
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(dst[i] - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) dst[i] -= lse;
}

}  // namespace

Status resolve_perplexity_options(int64_t n_tokens, PerplexityOptions* o) {
  if (o->n_ctx < 2 || o->n_ctx > (int64_t{1} << 24)) return Status::errorf("context {} must be in [2, 2^24]", o->n_ctx);
  if (o->bos_id >= 0 && o->n_ctx < 3) return Status::error("context must be at least 3 with a BOS token");
  if (o->stride == 0) o->stride = o->n_ctx / 2;
  const int64_t w = window_tokens(*o);
  const int64_t max_stride = o->bos_id >= 0 ? w : w - 1;
  if (o->stride < 1 || o->stride > max_stride)
    return Status::errorf("stride {} must be in [1, {}] for context {}{}", o->stride, max_stride, o->n_ctx,
                          o->bos_id >= 0 ? " with BOS" : " without BOS");
  if (o->max_windows < 0) return Status::errorf("invalid window count {}", o->max_windows);
  if (o->logits_batch < 1) o->logits_batch = 1;
  if (n_tokens < 2) return Status::errorf("the text has {} tokens; at least 2 are needed", n_tokens);
  return Status::ok();
}

Result<std::vector<PplWindow>> plan_perplexity_windows(int64_t n_tokens, const PerplexityOptions& opts) {
  PerplexityOptions o = opts;
  EMBER_RETURN_IF_ERROR(resolve_perplexity_options(n_tokens, &o));
  const int64_t w = window_tokens(o);
  std::vector<PplWindow> out;
  int64_t scored_end = 1;  // t[0] is never scored
  for (int64_t begin = 0; scored_end < n_tokens; begin += o.stride) {
    if (o.max_windows > 0 && static_cast<int64_t>(out.size()) >= o.max_windows) break;
    PplWindow win;
    win.begin = begin;
    win.end = std::min(begin + w, n_tokens);
    win.score_begin = scored_end;
    out.push_back(win);
    scored_end = win.end;
  }
  return out;
}

Result<PerplexityResult> compute_perplexity(const Model& model, ThreadPool& pool, const std::vector<int32_t>& tokens,
                                            const PerplexityOptions& opts, const ScoredRowFn& on_row,
                                            const PerplexityProgressFn& progress) {
  PerplexityOptions o = opts;
  const int64_t n = static_cast<int64_t>(tokens.size());
  EMBER_RETURN_IF_ERROR(resolve_perplexity_options(n, &o));
  const ModelConfig& cfg = model.config();
  const int64_t V = cfg.n_vocab;
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= V) return Status::errorf("token {} at {} is outside the vocabulary ({})", tokens[i], i, V);
  if (o.bos_id >= V) return Status::errorf("BOS id {} is outside the vocabulary ({})", o.bos_id, V);
  auto plan = plan_perplexity_windows(n, o);
  if (!plan) return plan.status();
  const std::vector<PplWindow>& windows = *plan;

  const int64_t off = o.bos_id >= 0 ? 1 : 0;  // window position of text token `begin`
  const int64_t batch = std::min<int64_t>(o.logits_batch, o.n_ctx);
  ForwardContext ctx(model, pool, static_cast<int>(std::min<int64_t>(o.n_ctx, 512)));
  ContiguousKvCache cache(cfg, o.n_ctx);
  std::vector<float> logits(static_cast<size_t>(batch * V));  // [batch, n_vocab]
  std::vector<int32_t> seq;
  std::vector<double> nll_rows(batch);

  PerplexityProgress prog;
  prog.windows_total = static_cast<int64_t>(windows.size());
  for (const PplWindow& w : windows) prog.scored_total += w.end - w.score_begin;
  double sum = 0, sum2 = 0;
  const double t0 = now_s();

  for (const PplWindow& w : windows) {
    seq.clear();
    if (off) seq.push_back(o.bos_id);
    seq.insert(seq.end(), tokens.begin() + w.begin, tokens.begin() + w.end);
    // Scored text index j is predicted by the logits of window position
    // p = j - begin + off - 1; positions [p_first, p_end) are needed.
    const int64_t p_first = w.score_begin - w.begin + off - 1;
    const int64_t p_end = w.end - w.begin + off - 1;
    if (p_first > 0) EMBER_RETURN_IF_ERROR(ctx.forward(seq.data(), p_first, 0, cache, nullptr, nullptr));
    for (int64_t p = p_first; p < p_end; p += batch) {
      const int64_t nb = std::min(batch, p_end - p);
      EMBER_RETURN_IF_ERROR(ctx.forward(seq.data() + p, nb, p, cache, nullptr, logits.data()));
      pool.parallel_for(nb, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
          float* row = logits.data() + r * V;
          log_softmax_row(row, V);
          nll_rows[r] = -static_cast<double>(row[seq[p + r + 1]]);
        }
      });
      for (int64_t r = 0; r < nb; ++r) {
        const double x = nll_rows[r];
        if (!std::isfinite(x)) return Status::errorf("non-finite log-probability at token {}", w.begin + p + r + 1 - off);
        sum += x;
        sum2 += x * x;
        if (on_row) EMBER_RETURN_IF_ERROR(on_row(w.begin + p + r + 1 - off, seq[p + r + 1], logits.data() + r * V));
      }
      prog.scored += nb;
    }
    prog.evaluated += p_end;
    prog.windows_done++;
    prog.nll_sum = sum;
    prog.elapsed_s = now_s() - t0;
    if (progress) progress(prog);
  }

  PerplexityResult res;
  res.n_scored = prog.scored;
  res.n_windows = prog.windows_done;
  res.n_evaluated = prog.evaluated;
  res.seconds = now_s() - t0;
  const double cnt = static_cast<double>(res.n_scored);
  res.nll_mean = sum / cnt;
  const double var = cnt > 1 ? std::max(0.0, (sum2 / cnt - res.nll_mean * res.nll_mean) * cnt / (cnt - 1)) : 0.0;
  res.nll_stderr = std::sqrt(var / cnt);
  res.ppl = std::exp(res.nll_mean);
  res.ppl_err = res.ppl * res.nll_stderr;
  return res;
}

uint64_t hash_tokens(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) {
    uint32_t u = static_cast<uint32_t>(t);
    for (int k = 0; k < 4; ++k) {
      h ^= (u >> (8 * k)) & 0xFF;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// ---- LogitsWriter ----

Result<std::unique_ptr<LogitsWriter>> LogitsWriter::create(const std::string& path, const LogitsFileHeader& h) {
  if (h.n_vocab == 0) return Status::error("logits file: empty vocabulary");
  std::unique_ptr<LogitsWriter> w(new LogitsWriter());
  w->path_ = path;
  w->h_ = h;
  w->h_.n_rows = 0;
  w->f_ = std::fopen(path.c_str(), "wb");
  if (!w->f_) return Status::errorf("{}: cannot create: {}", path, std::strerror(errno));
  uint8_t b[kLogitsHeaderBytes];
  encode_header(w->h_, b);
  if (std::fwrite(b, 1, sizeof(b), w->f_) != sizeof(b)) return Status::errorf("{}: write failed", path);
  w->buf_.resize(h.n_vocab);
  return w;
}

LogitsWriter::~LogitsWriter() {
  if (f_) {  // never finished: do not leave a file with a wrong row count
    std::fclose(f_);
    std::remove(path_.c_str());
  }
}

Status LogitsWriter::add(int64_t index, int32_t target, const float* logprobs) {
  if (!f_) return Status::errorf("{}: already finished", path_);
  if (index < 0 || index > std::numeric_limits<uint32_t>::max())
    return Status::errorf("{}: token index {} does not fit the format", path_, index);
  uint8_t rec[8];
  put_u32(rec, static_cast<uint32_t>(index));
  put_u32(rec + 4, static_cast<uint32_t>(target));
  for (uint32_t i = 0; i < h_.n_vocab; ++i) buf_[i] = f32_to_f16(logprobs[i]);
  if (std::fwrite(rec, 1, 8, f_) != 8 || std::fwrite(buf_.data(), 2, buf_.size(), f_) != buf_.size())
    return Status::errorf("{}: write failed (disk full?)", path_);
  ++rows_;
  return Status::ok();
}

Status LogitsWriter::finish() {
  if (!f_) return Status::errorf("{}: already finished", path_);
  h_.n_rows = rows_;
  uint8_t b[kLogitsHeaderBytes];
  encode_header(h_, b);
  const bool ok = std::fseek(f_, 0, SEEK_SET) == 0 && std::fwrite(b, 1, sizeof(b), f_) == sizeof(b);
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) {
    std::remove(path_.c_str());
    return Status::errorf("{}: write failed", path_);
  }
  return Status::ok();
}

// ---- LogitsReader ----

Result<std::unique_ptr<LogitsReader>> LogitsReader::open(const std::string& path) {
  std::unique_ptr<LogitsReader> r(new LogitsReader());
  r->path_ = path;
  r->f_ = std::fopen(path.c_str(), "rb");
  if (!r->f_) return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  uint8_t b[kLogitsHeaderBytes];
  if (std::fread(b, 1, sizeof(b), r->f_) != sizeof(b)) return Status::errorf("{}: too short for a logits file", path);
  if (std::memcmp(b, kMagic, 8) != 0) return Status::errorf("{}: not an ember logits file (bad magic)", path);
  if (get_u32(b + 8) != kVersion) return Status::errorf("{}: unsupported version {}", path, get_u32(b + 8));
  LogitsFileHeader& h = r->h_;
  h.n_vocab = get_u32(b + 12);
  h.n_ctx = static_cast<int64_t>(get_u64(b + 16));
  h.stride = static_cast<int64_t>(get_u64(b + 24));
  h.bos_id = static_cast<int32_t>(get_u32(b + 32));
  h.n_tokens = get_u64(b + 40);
  h.tokens_hash = get_u64(b + 48);
  h.n_rows = get_u64(b + 56);
  if (h.n_vocab == 0 || h.n_vocab > (1u << 24)) return Status::errorf("{}: invalid vocabulary size {}", path, h.n_vocab);
  if (h.n_ctx < 2 || h.stride < 1 || h.stride > h.n_ctx) return Status::errorf("{}: invalid window settings", path);
  // The rows must all be there.
  if (std::fseek(r->f_, 0, SEEK_END) != 0) return Status::errorf("{}: cannot seek", path);
  const long size = std::ftell(r->f_);
  const uint64_t rec = 8 + 2ull * h.n_vocab;
  if (size < 0 || h.n_rows > (static_cast<uint64_t>(size) - kLogitsHeaderBytes) / rec ||
      kLogitsHeaderBytes + h.n_rows * rec != static_cast<uint64_t>(size))
    return Status::errorf("{}: size {} does not match {} rows of {} bytes (truncated or unfinished file)", path, size,
                          h.n_rows, rec);
  if (std::fseek(r->f_, kLogitsHeaderBytes, SEEK_SET) != 0) return Status::errorf("{}: cannot seek", path);
  r->buf_.resize(h.n_vocab);
  return r;
}

LogitsReader::~LogitsReader() {
  if (f_) std::fclose(f_);
}

Status LogitsReader::next(int64_t* index, int32_t* target, float* logprobs) {
  if (read_ >= h_.n_rows) return Status::errorf("{}: no more rows (it holds {})", path_, h_.n_rows);
  uint8_t rec[8];
  if (std::fread(rec, 1, 8, f_) != 8 || std::fread(buf_.data(), 2, buf_.size(), f_) != buf_.size())
    return Status::errorf("{}: read failed at row {}", path_, read_);
  *index = get_u32(rec);
  *target = static_cast<int32_t>(get_u32(rec + 4));
  for (uint32_t i = 0; i < h_.n_vocab; ++i) logprobs[i] = f16_to_f32(buf_[i]);
  ++read_;
  return Status::ok();
}

// ---- KL ----

void KlAccumulator::add(const float* base, const float* ours) {
  const int64_t n = n_vocab_;
  to_f16_logprobs(base, p_.data(), n);
  to_f16_logprobs(ours, q_.data(), n);
  double kl = 0;
  int64_t ap = 0, aq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = p_[i], lq = q_[i];
    if (lp > -700) kl += std::exp(lp) * (lp - lq);
    if (lp > p_[ap]) ap = i;
    if (lq > q_[aq]) aq = i;
  }
  kl_.push_back(std::max(0.0, kl));
  agree_ += ap == aq;
}

KlAccumulator::Summary KlAccumulator::summary() const {
  Summary s;
  s.n = static_cast<int64_t>(kl_.size());
  if (s.n == 0) return s;
  double sum = 0, sum2 = 0;
  for (double x : kl_) {
    sum += x;
    sum2 += x * x;
  }
  const double cnt = static_cast<double>(s.n);
  s.mean = sum / cnt;
  const double var = s.n > 1 ? std::max(0.0, (sum2 / cnt - s.mean * s.mean) * cnt / (cnt - 1)) : 0.0;
  s.stderr_ = std::sqrt(var / cnt);
  std::vector<double> v = kl_;
  std::sort(v.begin(), v.end());
  auto quantile = [&](double q) {
    const double pos = q * (cnt - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - lo) * (v[hi] - v[lo]);
  };
  s.median = quantile(0.5);
  s.p99 = quantile(0.99);
  s.max = v.back();
  s.top1_agree = agree_ / cnt;
  return s;
}

}  // namespace ember
