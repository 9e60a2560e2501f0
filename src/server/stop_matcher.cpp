// Stop-string matching with hold-back; see stop_matcher.h.
#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace ember {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

std::string StopMatcher::push(const std::string& piece) {
  if (stopped_) return {};
  held_ += piece;
  if (stops_.empty()) return std::exchange(held_, {});
  // Earliest full match (ties: the longest stop string at that position).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    if (at < best || (at == best && s.size() > matched_.size())) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  const size_t lim = std::min(held_.size(), max_len_ - 1);
  for (size_t k = lim; k > 0; --k) {
    bool prefix = false;
    for (const auto& s : stops_)
      if (s.size() > k && held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        prefix = true;
        break;
      }
    if (prefix) {
      keep = k;
      break;
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

}  // namespace ember
