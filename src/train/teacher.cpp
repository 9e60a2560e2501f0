// LiveTeacher and TeacherCache; see teacher.h.
#include "train/teacher.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "train/atomic_file.h"
#include "train/rng.h"
#include "train/train_model.h"

namespace ember {

class LiveTeacher::Observer : public ForwardObserver {
 public:
  Observer(std::vector<int> layers, int64_t max_rows, int64_t E) : layers_(std::move(layers)) {
    for (size_t i = 0; i < layers_.size(); ++i) bufs_.emplace_back(static_cast<size_t>(max_rows * E));
  }
  void on_block_output(int layer, const float* x, int64_t n_rows, int64_t n_embd) override {
    for (size_t i = 0; i < layers_.size(); ++i)
      if (layers_[i] == layer) std::copy(x, x + n_rows * n_embd, bufs_[i].data());
  }
  const float* get(int layer) const {
    for (size_t i = 0; i < layers_.size(); ++i)
      if (layers_[i] == layer) return bufs_[i].data();
    return nullptr;
  }

 private:
  std::vector<int> layers_;
  std::vector<std::vector<float>> bufs_;
};

LiveTeacher::LiveTeacher(const Model& teacher, ThreadPool& pool, int64_t max_rows, std::vector<int> hidden_layers)
    : model_(teacher), ctx_(teacher, pool, static_cast<int>(max_rows)) {
  if (!hidden_layers.empty()) {
    observer_ = std::make_unique<Observer>(std::move(hidden_layers), max_rows, teacher.config().n_embd);
    ctx_.set_observer(observer_.get());
  }
}

LiveTeacher::~LiveTeacher() = default;

Status LiveTeacher::run(const TrainBatch& b) {
  if (b.seq_len != seq_len_ || static_cast<int64_t>(caches_.size()) < b.n_seq) {
    if (b.seq_len != seq_len_) caches_.clear();
    while (static_cast<int64_t>(caches_.size()) < b.n_seq)
      caches_.push_back(std::make_unique<ContiguousKvCache>(model_.config(), b.seq_len));
    seq_len_ = b.seq_len;
  }
  std::vector<SeqBatch> seqs(static_cast<size_t>(b.n_seq));
  for (int64_t s = 0; s < b.n_seq; ++s) {
    seqs[s].tokens = b.tokens + s * b.seq_len;
    seqs[s].n = b.seq_len;
    seqs[s].pos0 = 0;
    seqs[s].cache = caches_[s].get();
  }
  EMBER_RETURN_IF_ERROR(ctx_.prepare(seqs.data(), static_cast<int>(b.n_seq)));
  ctx_.embed();
  ctx_.run_layers(0, model_.config().n_layer);
  return Status::ok();
}

void LiveTeacher::logits(int64_t r0, int64_t n, float* out) {
  rows_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows_[i] = r0 + i;
  ctx_.head(rows_.data(), n, out);
}

const float* LiveTeacher::hidden(int layer) const { return observer_ ? observer_->get(layer) : nullptr; }

uint64_t LiveTeacher::digest() const {
  const ModelConfig& c = model_.config();
  uint64_t h = fnv1a64(c.arch.data(), c.arch.size());
  for (int v : {c.n_layer, c.n_embd, c.n_vocab, c.head_dim}) h = fnv1a64(&v, sizeof(v), h);
  for (const auto& [name, t] : model_.file().tensors) {
    h = fnv1a64(name.data(), name.size(), h);
    h = fnv1a64(&t.type, sizeof(t.type), h);
    h = fnv1a64(t.ne, sizeof(t.ne), h);
    // A sample of the values: the first and last KiB.
    const size_t k = std::min<size_t>(1024, t.nbytes);
    h = fnv1a64(t.data, k, h);
    h = fnv1a64(static_cast<const uint8_t*>(t.data) + t.nbytes - k, k, h);
  }
  return h;
}

namespace {

constexpr char kCacheMagic[8] = {'E', 'M', 'B', 'E', 'R', 'K', 'D', 'C'};
constexpr uint32_t kCacheVersion = 1;

struct CacheHeader {
  char magic[8];
  uint32_t version;
  int32_t k;
  int64_t seq_len, windows;
  float tau, beta;
  uint64_t seed, data_digest, teacher_digest;
};

// K samples of row z (logits [V]) at temperature tau from q ~ p^beta.
void sample_row(const float* z, int64_t V, const TeacherCacheOptions& o, Rng& rng, std::vector<double>& cdf,
                int32_t* ids, float* w, float* logp) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(z[i]) / o.tau);
  double sp = 0;
  for (int64_t i = 0; i < V; ++i) sp += std::exp(static_cast<double>(z[i]) / o.tau - mx);
  const double lse = mx + std::log(sp);
  cdf.resize(static_cast<size_t>(V));
  double acc = 0;
  for (int64_t i = 0; i < V; ++i) {
    acc += std::exp(o.beta * (static_cast<double>(z[i]) / o.tau - mx));
    cdf[i] = acc;
  }
  const double log_zq = std::log(acc) + o.beta * mx;  // q_i = exp(beta a_i - log_zq)
  for (int k = 0; k < o.samples; ++k) {
    const double u = rng.uniform() * acc;
    int64_t i = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
    i = std::min<int64_t>(i, V - 1);
    const double a = static_cast<double>(z[i]) / o.tau, lp = a - lse, lq = o.beta * a - log_zq;
    ids[k] = static_cast<int32_t>(i);
    w[k] = static_cast<float>(std::exp(lp - lq) / o.samples);
    logp[k] = static_cast<float>(lp);
  }
}

}  // namespace

Status TeacherCache::build(LiveTeacher& teacher, const TokenWindows& data, int64_t batch, const TeacherCacheOptions& o,
                           const std::string& path, ThreadPool& pool,
                           const std::function<void(int64_t, int64_t)>& progress, const std::atomic<bool>* stop) {
  if (o.samples < 1 || !(o.tau > 0) || !(o.beta > 0))
    return Status::error("teacher cache: samples >= 1, tau > 0 and beta > 0 are needed");
  const int64_t L = data.seq_len(), n = data.n_train(), V = teacher.model().config().n_vocab, K = o.samples;
  std::vector<int32_t> ids(static_cast<size_t>(n * L * K));
  std::vector<float> w(ids.size()), lp(ids.size());
  std::vector<int32_t> toks(static_cast<size_t>(batch * L)), tg(toks.size());
  const int64_t chunk = std::clamp<int64_t>((int64_t{16} << 20) / V, 1, 256);
  std::vector<float> logits(static_cast<size_t>(chunk * V));
  for (int64_t w0 = 0; w0 < n; w0 += batch) {
    if (stop && stop->load()) return Status::error("teacher cache: interrupted");
    const int64_t nb = std::min(batch, n - w0);
    for (int64_t i = 0; i < nb; ++i) data.train_tokens(w0 + i, toks.data() + i * L, tg.data() + i * L);
    TrainBatch b;
    b.tokens = toks.data();
    b.n_seq = nb;
    b.seq_len = L;
    EMBER_RETURN_IF_ERROR(teacher.run(b));
    for (int64_t r0 = 0; r0 < nb * L; r0 += chunk) {
      const int64_t rn = std::min(chunk, nb * L - r0);
      teacher.logits(r0, rn, logits.data());
      pool.parallel_for(rn, 1, [&](int64_t b0, int64_t b1, int) {
        std::vector<double> cdf;
        for (int64_t i = b0; i < b1; ++i) {
          const int64_t row = (w0 * L + r0 + i);  // window-major position of the whole run
          Rng rng(o.seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(row + 1)));
          sample_row(logits.data() + i * V, V, o, rng, cdf, ids.data() + row * K, w.data() + row * K,
                     lp.data() + row * K);
        }
      });
    }
    if (progress) progress(w0 + nb, n);
  }
  CacheHeader h{};
  std::memcpy(h.magic, kCacheMagic, 8);
  h.version = kCacheVersion;
  h.k = static_cast<int32_t>(K);
  h.seq_len = L;
  h.windows = n;
  h.tau = o.tau;
  h.beta = o.beta;
  h.seed = o.seed;
  h.data_digest = data.digest();
  h.teacher_digest = teacher.digest();
  uint64_t sum = fnv1a64(&h, sizeof(h));
  sum = fnv1a64(ids.data(), ids.size() * sizeof(int32_t), sum);
  sum = fnv1a64(w.data(), w.size() * sizeof(float), sum);
  sum = fnv1a64(lp.data(), lp.size() * sizeof(float), sum);
  return write_file_atomic(path, [&](std::FILE* f) {
    return std::fwrite(&h, sizeof(h), 1, f) == 1 && std::fwrite(ids.data(), sizeof(int32_t), ids.size(), f) == ids.size() &&
           std::fwrite(w.data(), sizeof(float), w.size(), f) == w.size() &&
           std::fwrite(lp.data(), sizeof(float), lp.size(), f) == lp.size() && std::fwrite(&sum, sizeof(sum), 1, f) == 1;
  });
}

Result<std::unique_ptr<TeacherCache>> TeacherCache::open(const std::string& path, const TokenWindows& data,
                                                         uint64_t teacher_digest, const TeacherCacheOptions& o) {
  auto bytes = read_whole_file(path);
  if (!bytes) return bytes.status();
  const std::string& s = *bytes;
  CacheHeader h{};
  if (s.size() < sizeof(h) + sizeof(uint64_t) || std::memcmp(s.data(), kCacheMagic, 8) != 0)
    return Status::errorf("'{}' is not an ember teacher cache", path);
  std::memcpy(&h, s.data(), sizeof(h));
  if (h.version != kCacheVersion)
    return Status::errorf("'{}': teacher cache version {} (this ember reads {})", path, h.version, kCacheVersion);
  if (h.k < 1 || h.seq_len < 1 || h.windows < 1)
    return Status::errorf("'{}': corrupt teacher cache header", path);
  const size_t n = static_cast<size_t>(h.windows * h.seq_len * h.k);
  const size_t want = sizeof(h) + n * 12 + sizeof(uint64_t);
  if (s.size() != want)
    return Status::errorf("'{}': teacher cache is {} bytes, its header says {} (truncated or damaged)", path, s.size(),
                          want);
  uint64_t stored;
  std::memcpy(&stored, s.data() + s.size() - sizeof(stored), sizeof(stored));
  if (fnv1a64(s.data(), s.size() - sizeof(stored)) != stored)
    return Status::errorf("'{}': teacher cache checksum mismatch (damaged file)", path);
  if (h.data_digest != data.digest() || h.seq_len != data.seq_len() || h.windows != data.n_train())
    return Status::errorf("'{}': teacher cache was built for other training data or another --seq-len", path);
  if (h.teacher_digest != teacher_digest) return Status::errorf("'{}': teacher cache was built with another teacher", path);
  if (h.k != o.samples || h.tau != o.tau || h.beta != o.beta || h.seed != o.seed)
    return Status::errorf("'{}': teacher cache has samples {}, tau {}, beta {}, seed {}; this run asks {}, {}, {}, {}",
                          path, h.k, h.tau, h.beta, h.seed, o.samples, o.tau, o.beta, o.seed);
  auto c = std::unique_ptr<TeacherCache>(new TeacherCache());
  c->k_ = h.k;
  c->seq_len_ = h.seq_len;
  c->ids_.resize(n);
  c->weights_.resize(n);
  c->logp_.resize(n);
  const char* p = s.data() + sizeof(h);
  std::memcpy(c->ids_.data(), p, n * 4);
  std::memcpy(c->weights_.data(), p + n * 4, n * 4);
  std::memcpy(c->logp_.data(), p + n * 8, n * 4);
  return c;
}

KdRowTeacher TeacherCache::row(int64_t r) {
  const int64_t w = windows_[static_cast<size_t>(r / seq_len_)], t = r % seq_len_;
  const size_t off = static_cast<size_t>((w * seq_len_ + t) * k_);
  KdRowTeacher out;
  out.ids = ids_.data() + off;
  out.weights = weights_.data() + off;
  out.logp = logp_.data() + off;
  out.n_samples = k_;
  return out;
}

}  // namespace ember
