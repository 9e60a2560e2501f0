// Prompt-lookup (n-gram) proposer; see ngram_proposer.h.
#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

namespace ember {

Result<SpecMethod> parse_spec_method(const std::string& s) {
  if (s == "none" || s.empty()) return SpecMethod::kNone;
  if (s == "ngram") return SpecMethod::kNgram;
  if (s == "draft") return SpecMethod::kDraft;
  if (s == "layerskip") return SpecMethod::kLayerSkip;
  return Status::errorf("unknown speculative method '{}' (expected ngram, draft, layerskip or none)", s);
}

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraft: return "draft";
    case SpecMethod::kLayerSkip: return "layerskip";
  }
  return "?";
}

Status NgramConfig::validate() const {
  if (min_n < 1) return Status::errorf("n-gram min size must be >= 1 (got {})", min_n);
  if (max_n < min_n || max_n > 64) return Status::errorf("n-gram max size must be in [{}, 64] (got {})", min_n, max_n);
  if (max_lookback < 0) return Status::errorf("n-gram lookback must be >= 0 (got {})", max_lookback);
  return Status::ok();
}

int NgramProposer::lookup(const NgramConfig& cfg, const int32_t* t, int64_t n, int max_k,
                          std::vector<int32_t>* out) {
  out->clear();
  if (max_k <= 0) return 0;
  const int64_t lo = cfg.max_lookback > 0 ? std::max<int64_t>(0, n - cfg.max_lookback) : 0;
  for (int64_t len = std::min<int64_t>(cfg.max_n, n - 1); len >= cfg.min_n; --len) {
    const int32_t* suffix = t + n - len;
    // Most recent earlier occurrence: start positions s with s + len < n
    // (the match must be followed by at least one token), latest first.
    for (int64_t s = n - len - 1; s >= lo; --s) {
      if (t[s] != suffix[0] || !std::equal(suffix, suffix + len, t + s)) continue;
      const int64_t from = s + len;
      int64_t take = std::min<int64_t>(max_k, n - from);
      if (cfg.k_by_match) take = std::min<int64_t>(take, int64_t{1} << std::min<int64_t>(len - 1, 30));
      out->assign(t + from, t + from + take);
      return static_cast<int>(len);
    }
  }
  return 0;
}

Status NgramProposer::propose(const std::vector<ProposeItem>& items) {
  for (const ProposeItem& it : items) {
    it.out->q.clear();
    lookup(cfg_, it.req->tokens.data(), it.req->num_tokens(), it.max_k, &it.out->tokens);
  }
  return Status::ok();
}

}  // namespace ember
