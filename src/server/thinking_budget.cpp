// Thinking budgets; see thinking_budget.h.
#include "server/thinking_budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/reasoning.h"
#include "server/text_scan.h"
#include "tokenizer/tokenizer.h"

namespace ember {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kMaxSpaceTokens = 2;     // whitespace tokens before the answer's grammar starts
constexpr size_t kMaxHeaderText = 1024;  // harmony: header text kept between messages

using text::is_space;
using text::lstrip;

bool all_space(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_space(c)) return false;
  return true;
}

}  // namespace

std::vector<int32_t> whitespace_tokens(const std::vector<std::string>& pieces) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (all_space(pieces[i])) out.push_back(static_cast<int32_t>(i));
  return out;
}

std::vector<int32_t> tag_start_tokens(const std::vector<std::string>& pieces, const std::string& tag) {
  std::vector<int32_t> out;
  if (tag.empty()) return out;
  const std::string_view t = tag;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string_view p = lstrip(pieces[i]);
    if (p.empty()) continue;
    if (t.substr(0, p.size()) == p || p.substr(0, t.size()) == t) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

const std::vector<int32_t>& ThinkingSpec::end_completing(size_t k) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (completing_.size() < end.size()) completing_.resize(end.size());
  std::optional<std::vector<int32_t>>& slot = completing_[k];
  if (!slot) {
    slot.emplace();
    const std::string_view head = std::string_view(end).substr(0, k);
    std::string s;
    for (size_t i = 0; i < pieces->size(); ++i) {
      const std::string& p = (*pieces)[i];
      if (p.empty()) continue;
      s.assign(head);
      s += p;
      if (s.find(end) != std::string::npos) slot->push_back(static_cast<int32_t>(i));
    }
  }
  return *slot;
}

ThinkingLogits::ThinkingLogits(std::shared_ptr<const ThinkingSpec> spec, std::unique_ptr<LogitsProcessor> inner)
    : spec_(std::move(spec)), inner_(std::move(inner)) {
  if (spec_->open)
    enter_thinking();
  else if (spec_->harmony && inner_)
    force(spec_->open_tokens, Phase::kThinking);
}

void ThinkingLogits::force(const std::vector<int32_t>& toks, Phase after) {
  if (toks.empty()) {
    if (after == Phase::kThinking) return enter_thinking();
    phase_ = after;
    return;
  }
  forced_ = toks;
  pos_ = 0;
  after_ = after;
  phase_ = Phase::kForcing;
}

void ThinkingLogits::enter_thinking() {
  phase_ = Phase::kThinking;
  text_.clear();
  if (spec_->budget >= 0 && count_ >= spec_->budget) force(spec_->close, inner_ && !spec_->harmony ? Phase::kSeparator : Phase::kAnswer);
}

void ThinkingLogits::end_thinking() {
  text_.clear();
  n_space_ = 0;
  if (!spec_->harmony) {
    phase_ = inner_ ? Phase::kSeparator : Phase::kAnswer;
  } else if (inner_) {
    force(spec_->answer_header, Phase::kAnswer);  // the final channel, under the constraint
  } else {
    phase_ = Phase::kBefore;  // the next message's header: more reasoning, the answer or a call
  }
}

void ThinkingLogits::inner_with(const std::vector<int32_t>* keep_a, const std::vector<int32_t>* keep_b,
                                const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits,
                                int n_vocab) {
  saved_.clear();
  for (const std::vector<int32_t>* keep : {keep_a, keep_b})
    if (keep)
      for (int32_t t : *keep)
        if (t >= 0 && t < n_vocab) saved_.emplace_back(t, logits[t]);
  inner_->process(tokens, n_tokens, n_prompt, logits, n_vocab);
  for (auto [t, v] : saved_) logits[t] = v;
}

void ThinkingLogits::process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits,
                             int n_vocab) {
  if (phase_ == Phase::kForcing) {
    const int32_t want = forced_[pos_];
    const float keep = want >= 0 && want < n_vocab ? logits[want] : 0.f;
    std::fill(logits, logits + n_vocab, kNegInf);
    if (want >= 0 && want < n_vocab) logits[want] = std::isfinite(keep) ? keep : 0.f;
    return;
  }
  for (auto [id, b] : spec_->bias)
    if (id >= 0 && id < n_vocab) logits[id] += b;
  switch (phase_) {
    case Phase::kAnswer:
      if (inner_) inner_->process(tokens, n_tokens, n_prompt, logits, n_vocab);
      return;
    case Phase::kSeparator:
      inner_with(n_space_ < kMaxSpaceTokens ? spec_->space_tokens.get() : nullptr, nullptr, tokens, n_tokens, n_prompt,
                 logits, n_vocab);
      return;
    case Phase::kBefore:
      // The model may open a thinking section or answer under the constraint.
      if (inner_ && spec_->harmony)
        for (int32_t t : spec_->stop_ids)
          if (t >= 0 && t < n_vocab) logits[t] = kNegInf;
      if (inner_ && !spec_->harmony)
        inner_with(n_space_ < kMaxSpaceTokens ? spec_->space_tokens.get() : nullptr, &spec_->start_tokens, tokens,
                   n_tokens, n_prompt, logits, n_vocab);
      return;
    case Phase::kThinking:
      // With a constraint the answer must come: thinking does not end the output.
      if (inner_)
        for (int32_t t : spec_->stop_ids)
          if (t >= 0 && t < n_vocab) logits[t] = kNegInf;
      if (count_ < spec_->min_tokens) {
        // Tokens that would complete the end of thinking, and the end of generation.
        const std::string_view end = spec_->end;
        size_t k = 0;
        for (size_t n = std::min(text_.size(), end.size() - 1); n > 0; --n)
          if (std::string_view(text_).substr(text_.size() - n) == end.substr(0, n)) {
            k = n;
            break;
          }
        for (int32_t t : spec_->end_completing(k))
          if (t < n_vocab) logits[t] = kNegInf;
        for (int32_t t : spec_->stop_ids)
          if (t >= 0 && t < n_vocab) logits[t] = kNegInf;
      }
      return;
    default: return;
  }
}

void ThinkingLogits::accept(int32_t token) {
  const std::vector<std::string>& pieces = *spec_->pieces;
  static const std::string kEmpty;
  const std::string& p = token >= 0 && static_cast<size_t>(token) < pieces.size() ? pieces[token] : kEmpty;
  switch (phase_) {
    case Phase::kAnswer:
      if (inner_) inner_->accept(token);
      return;
    case Phase::kForcing:
      if (forced_[pos_] != token) {  // not the forced token (cannot happen through the mask)
        phase_ = after_;
        accept(token);
        return;
      }
      if (++pos_ == forced_.size()) {
        if (after_ == Phase::kThinking) {
          enter_thinking();
        } else {
          phase_ = after_;
          n_space_ = 0;
        }
      }
      return;
    case Phase::kSeparator:
      if (n_space_ < kMaxSpaceTokens && all_space(p)) {
        ++n_space_;
        return;
      }
      phase_ = Phase::kAnswer;
      if (inner_) inner_->accept(token);
      return;
    case Phase::kThinking: {
      ++count_;
      text_ += p;
      const std::string& end = spec_->end;
      if (text_.find(end) != std::string::npos) return end_thinking();
      if (text_.size() > end.size()) text_.erase(0, text_.size() - end.size());
      if (spec_->budget >= 0 && count_ >= spec_->budget)
        force(spec_->close, inner_ && !spec_->harmony ? Phase::kSeparator : Phase::kAnswer);
      return;
    }
    case Phase::kBefore: {
      text_ += p;
      if (spec_->harmony) {
        if (text_.find(spec_->start) != std::string::npos) return enter_thinking();
        if (text_.find(kHarmonyFinal) != std::string::npos) {
          phase_ = Phase::kAnswer;
          text_.clear();
          return;
        }
        if (text_.size() > kMaxHeaderText) text_.erase(0, text_.size() - kMaxHeaderText);
        return;
      }
      const std::string_view t = lstrip(text_);
      const std::string_view start = spec_->start;
      if (t.empty()) {
        ++n_space_;
        return;
      }
      if (t.substr(0, start.size()) == start) return enter_thinking();
      if (start.substr(0, t.size()) == t && inner_ && spec_->tok) {
        // The model began the start tag: the rest of it is forced.
        EncodeOptions eo;
        eo.add_bos = false;
        eo.parse_special = true;
        force(spec_->tok->encode(start.substr(t.size()), eo), Phase::kThinking);
        text_.clear();
        return;
      }
      if (start.substr(0, t.size()) == t) return;  // may still become the tag
      phase_ = Phase::kAnswer;
      text_.clear();
      if (inner_) inner_->accept(token);
      return;
    }
  }
}

void ThinkingLogits::forced_tokens(std::vector<int32_t>* out) {
  if (phase_ == Phase::kForcing) {
    out->insert(out->end(), forced_.begin() + static_cast<std::ptrdiff_t>(pos_), forced_.end());
    return;
  }
  if (phase_ == Phase::kAnswer && inner_) inner_->forced_tokens(out);
}

std::unique_ptr<LogitsProcessor> ThinkingLogits::clone() const {
  auto c = std::make_unique<ThinkingLogits>(spec_, inner_ ? inner_->clone() : nullptr);
  c->phase_ = phase_;
  c->count_ = count_;
  c->text_ = text_;
  c->forced_ = forced_;
  c->pos_ = pos_;
  c->after_ = after_;
  c->n_space_ = n_space_;
  return c;
}

}  // namespace ember
