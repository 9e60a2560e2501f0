// NgramFirstProposer: prompt lookup first, a model draft otherwise. For each
// request the n-gram lookup (ngram_proposer.h) runs first; when it finds a
// match of at least min_match tokens its continuation is the proposal
// (point masses: no draft forward, no cost), and only the other requests go
// to the model proposer (a DraftProposer: draft model or layer-skip draft),
// in one batched call, their drafts capped at model_k.
//
// Why: lookup is free and, where the output copies the context (rewriting,
// code edits, quoting), right for long runs; a model draft is right more
// often where the output is new text but costs a fraction of a target step
// per token. Together each step takes the free proposal where the context
// vouches for it and pays for the model only where it does not. The draft
// model's KV catches up on the tokens it did not see (DraftProposer::sync
// runs them as a prompt chunk at its next proposal).
//
// Exactness: unchanged, each proposal is verified by its own rule (point
// masses: the target's token; model drafts of sampled requests: the
// rejection rule with their q).
//
// Ownership: owns the model proposer. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/proposer.h"

namespace ember {

class NgramFirstProposer final : public Proposer {
 public:
  // min_match >= 1; model_k: the model's drafts per request at most (0: the
  // engine's k).
  NgramFirstProposer(const NgramConfig& ngram, int min_match, int model_k, std::unique_ptr<Proposer> model)
      : ngram_(ngram), min_match_(min_match), model_k_(model_k), model_(std::move(model)) {}

  SpecMethod method() const override { return model_->method(); }
  Status propose(const std::vector<ProposeItem>& items) override;
  void release(const Request& r) override { model_->release(r); }
  void before_verify(std::vector<ScheduledRequest>& slices) override { model_->before_verify(slices); }

  int64_t n_lookup_proposals() const { return n_lookup_; }  // proposals made by the lookup so far
  int64_t n_model_proposals() const { return n_model_; }    // requests handed to the model so far
  Proposer& model() { return *model_; }

 private:
  NgramConfig ngram_;
  int min_match_, model_k_;
  std::unique_ptr<Proposer> model_;
  std::vector<ProposeItem> deferred_;
  int64_t n_lookup_ = 0, n_model_ = 0;
};

}  // namespace ember
