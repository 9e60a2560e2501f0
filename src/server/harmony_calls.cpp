// Forced tool calls in the harmony format; see harmony_calls.h.
#include "server/harmony_calls.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ember {

HarmonyCallLogits::HarmonyCallLogits(std::shared_ptr<const Spec> spec)
    : spec_(std::move(spec)), inner_(spec_->names ? spec_->names->clone() : nullptr) {}

void HarmonyCallLogits::process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits,
                                int n_vocab) {
  if (phase_ == Phase::kSeparator) {
    const int32_t want = spec_->separator[pos_];
    const float keep = want >= 0 && want < n_vocab ? logits[want] : 0.f;
    std::fill(logits, logits + n_vocab, -std::numeric_limits<float>::infinity());
    if (want >= 0 && want < n_vocab) logits[want] = std::isfinite(keep) ? keep : 0.f;
    return;
  }
  if (inner_) inner_->process(tokens, n_tokens, n_prompt, logits, n_vocab);
  for (int32_t t : spec_->banned)
    if (t >= 0 && t < n_vocab) logits[t] = -std::numeric_limits<float>::infinity();
}

void HarmonyCallLogits::accept(int32_t token) {
  switch (phase_) {
    case Phase::kName: {
      if (inner_) inner_->accept(token);
      const grammar::TokenVocab& v = *spec_->vocab;
      if (token >= 0 && token < v.n_vocab) name_ += v.bytes[token];
      // The names' grammar ends with the space after the name.
      if (name_.empty() || name_.back() != ' ') return;
      name_.pop_back();
      phase_ = Phase::kSeparator;
      pos_ = 0;
      inner_.reset();
      if (spec_->separator.empty()) accept(-1);
      return;
    }
    case Phase::kSeparator:
      if (token >= 0 && ++pos_ < spec_->separator.size()) return;
      phase_ = Phase::kArgs;
      for (const auto& [name, proto] : spec_->args)
        if (name == name_) inner_ = proto->clone();
      return;
    case Phase::kArgs:
      if (inner_) inner_->accept(token);
      return;
  }
}

void HarmonyCallLogits::forced_tokens(std::vector<int32_t>* out) {
  if (phase_ == Phase::kSeparator) {
    out->insert(out->end(), spec_->separator.begin() + static_cast<std::ptrdiff_t>(pos_), spec_->separator.end());
    return;
  }
  if (inner_) inner_->forced_tokens(out);
}

std::unique_ptr<LogitsProcessor> HarmonyCallLogits::clone() const {
  auto c = std::make_unique<HarmonyCallLogits>(spec_);
  c->phase_ = phase_;
  c->inner_ = inner_ ? inner_->clone() : nullptr;
  c->name_ = name_;
  c->pos_ = pos_;
  return c;
}

}  // namespace ember
