// N-gram lookup first, the model proposer otherwise; see ngram_first.h.
#include "engine/speculative/ngram_first.h"

#include <algorithm>

namespace ember {

Status NgramFirstProposer::propose(const std::vector<ProposeItem>& items) {
  deferred_.clear();
  for (const ProposeItem& it : items) {
    it.out->q.clear();
    const int n = NgramProposer::lookup(ngram_, it.req->tokens.data(), it.req->num_tokens(), it.max_k,
                                        &it.out->tokens);
    if (n >= min_match_ && !it.out->tokens.empty()) {
      ++n_lookup_;
      continue;
    }
    it.out->tokens.clear();
    deferred_.push_back({it.req, model_k_ > 0 ? std::min(it.max_k, model_k_) : it.max_k, it.out});
  }
  if (deferred_.empty()) return Status::ok();
  n_model_ += static_cast<int64_t>(deferred_.size());
  return model_->propose(deferred_);
}

}  // namespace ember
