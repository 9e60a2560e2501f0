// TokenWindows: training text as windows of seq_len tokens cut from one
// token stream (documents joined by the caller, e.g. with EOS / BOS), the
// next token of each position as its target (the stream's last token has
// none), a held-out tail for evaluation, and the order in which training
// reads the windows: a fresh permutation per epoch drawn from the seed, so
// that the data position of a run is one number (windows read so far) and
// a resumed run reads exactly what an uninterrupted one would.
//
// A plain value object; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ember {

class TokenWindows {
 public:
  // Cuts `stream` into windows of seq_len tokens (with bos_id >= 0: that
  // token first, then seq_len - 1 of the stream; a partial last window is
  // dropped) and keeps the last eval_windows of them (0: none) apart for
  // evaluation, or cuts them from `eval_stream` when it is not empty.
  // Errors: seq_len < 2, or fewer than one training window.
  static Result<TokenWindows> make(std::vector<int32_t> stream, int64_t seq_len, int32_t bos_id, int64_t eval_windows,
                                   std::vector<int32_t> eval_stream, uint64_t seed);

  int64_t seq_len() const { return seq_len_; }
  int64_t n_train() const { return static_cast<int64_t>(train_.size()); }
  int64_t n_eval() const { return static_cast<int64_t>(eval_.size()); }

  // The window read at position `pos` of the run (pos = windows read
  // before it): epoch pos / n_train, that epoch's permutation.
  int64_t train_window(int64_t pos) const;
  // Tokens [seq_len] and targets [seq_len] (-1: none) of a training or an
  // evaluation window.
  void train_tokens(int64_t w, int32_t* tokens, int32_t* targets) const;
  void eval_tokens(int64_t w, int32_t* tokens, int32_t* targets) const;
  // Digest of the training and evaluation tokens and the seed (checkpoints).
  uint64_t digest() const;

 private:
  void fill(const std::vector<int32_t>& s, int64_t start, int32_t* tokens, int32_t* targets) const;
  std::vector<int32_t> stream_, eval_stream_;
  std::vector<int64_t> train_, eval_;  // window starts in stream_ / eval_stream_
  int64_t seq_len_ = 0, stride_ = 0;  // stride: stream tokens per window
  int32_t bos_ = -1;
  uint64_t seed_ = 0;
  mutable std::vector<int64_t> perm_;  // the permutation of perm_epoch_
  mutable int64_t perm_epoch_ = -1;
};

}  // namespace ember
