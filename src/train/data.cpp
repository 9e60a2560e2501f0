// TokenWindows; see data.h.
#include "train/data.h"

#include <numeric>

#include "train/rng.h"
#include "train/train_model.h"

namespace ember {

Result<TokenWindows> TokenWindows::make(std::vector<int32_t> stream, int64_t seq_len, int32_t bos_id,
                                        int64_t eval_windows, std::vector<int32_t> eval_stream, uint64_t seed) {
  if (seq_len < 2) return Status::errorf("sequence length must be at least 2, not {}", seq_len);
  TokenWindows d;
  d.seq_len_ = seq_len;
  d.bos_ = bos_id;
  d.seed_ = seed;
  const int64_t stride = bos_id >= 0 ? seq_len - 1 : seq_len;
  d.stride_ = stride;
  const int64_t n = static_cast<int64_t>(stream.size()) / stride;
  int64_t n_eval = 0;
  if (eval_stream.empty()) {
    n_eval = std::min<int64_t>(std::max<int64_t>(0, eval_windows), n - 1);
  } else {
    for (int64_t s = 0; s + stride <= static_cast<int64_t>(eval_stream.size()) &&
                        (eval_windows <= 0 || static_cast<int64_t>(d.eval_.size()) < eval_windows);
         s += stride)
      d.eval_.push_back(s);
  }
  if (n - n_eval < 1)
    return Status::errorf("the training text has {} tokens: too few for one window of {}", stream.size(), seq_len);
  for (int64_t w = 0; w < n - n_eval; ++w) d.train_.push_back(w * stride);
  if (eval_stream.empty()) {
    // The held-out tail gets a stream of its own, so no training target
    // reads into it.
    const int64_t cut = (n - n_eval) * stride;
    for (int64_t w = n - n_eval; w < n; ++w) d.eval_.push_back(w * stride - cut);
    d.eval_stream_.assign(stream.begin() + cut, stream.end());
    stream.resize(static_cast<size_t>(cut));
  } else {
    d.eval_stream_ = std::move(eval_stream);
  }
  d.stream_ = std::move(stream);
  return d;
}

int64_t TokenWindows::train_window(int64_t pos) const {
  const int64_t n = n_train(), epoch = pos / n;
  if (epoch != perm_epoch_) {
    perm_.resize(static_cast<size_t>(n));
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    Rng rng(seed_ ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(epoch + 1)));
    for (int64_t i = n - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(static_cast<uint64_t>(i + 1))]);
    perm_epoch_ = epoch;
  }
  return perm_[static_cast<size_t>(pos % n)];
}

void TokenWindows::fill(const std::vector<int32_t>& s, int64_t start, int32_t* tokens, int32_t* targets) const {
  const int64_t lead = bos_ >= 0 ? 1 : 0;
  if (lead) tokens[0] = bos_;
  for (int64_t t = 0; t < stride_; ++t) tokens[lead + t] = s[static_cast<size_t>(start + t)];
  for (int64_t t = 0; t + 1 < seq_len_; ++t) targets[t] = tokens[t + 1];
  const int64_t nx = start + stride_;
  targets[seq_len_ - 1] = nx < static_cast<int64_t>(s.size()) ? s[static_cast<size_t>(nx)] : -1;
}

void TokenWindows::train_tokens(int64_t w, int32_t* tokens, int32_t* targets) const {
  fill(stream_, train_[static_cast<size_t>(w)], tokens, targets);
}

void TokenWindows::eval_tokens(int64_t w, int32_t* tokens, int32_t* targets) const {
  fill(eval_stream_, eval_[static_cast<size_t>(w)], tokens, targets);
}

uint64_t TokenWindows::digest() const {
  uint64_t h = fnv1a64(stream_.data(), stream_.size() * sizeof(int32_t));
  h = fnv1a64(eval_stream_.data(), eval_stream_.size() * sizeof(int32_t), h);
  h = fnv1a64(&seq_len_, sizeof(seq_len_), h);
  h = fnv1a64(&seed_, sizeof(seed_), h);
  h = fnv1a64(&bos_, sizeof(bos_), h);
  const int64_t ne = n_eval();
  return fnv1a64(&ne, sizeof(ne), h);
}

}  // namespace ember
