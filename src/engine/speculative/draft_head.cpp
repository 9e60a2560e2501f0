// Truncated draft head token selection; see draft_head.h.
#include "engine/speculative/draft_head.h"

#include <algorithm>
#include <numeric>

namespace ember {

Result<std::vector<int32_t>> rank_head_tokens(const Metadata& md, int n_vocab, const std::vector<int32_t>& text,
                                              int n) {
  if (n < 1 || n > n_vocab) return Status::errorf("draft head of {} tokens out of range [1, {}]", n, n_vocab);
  const size_t V = static_cast<size_t>(n_vocab);
  std::vector<int64_t> count(V, 0);
  for (int32_t t : text) {
    if (t < 0 || t >= n_vocab) return Status::errorf("draft head text: token id {} out of range [0, {})", t, n_vocab);
    ++count[static_cast<size_t>(t)];
  }
  std::vector<double> score(V, 0.0);
  if (const GgufValue* s = md.find("tokenizer.ggml.scores"); s && s->nums.size() == V) score = s->nums;
  std::vector<char> keep(V, 1);
  if (const GgufValue* ty = md.find("tokenizer.ggml.token_type"); ty && ty->ints.size() == V)
    for (size_t i = 0; i < V; ++i) keep[i] = ty->ints[i] != 3 && ty->ints[i] != 5;  // control, unused
  std::vector<int32_t> always;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const auto id = md.get_int(key); id && *id >= 0 && *id < n_vocab) always.push_back(static_cast<int32_t>(*id));
  for (int32_t id : always) keep[static_cast<size_t>(id)] = 1;

  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  auto rank = [&](int32_t a, int32_t b) {
    const size_t i = static_cast<size_t>(a), j = static_cast<size_t>(b);
    if (keep[i] != keep[j]) return keep[i] > keep[j];
    if (count[i] != count[j]) return count[i] > count[j];
    if (score[i] != score[j]) return score[i] > score[j];
    return a < b;
  };
  // The always-kept ids go first, then the ranking.
  std::vector<int32_t> out;
  for (int32_t id : always)
    if (std::find(out.begin(), out.end(), id) == out.end() && static_cast<int>(out.size()) < n) out.push_back(id);
  std::stable_sort(order.begin(), order.end(), rank);
  for (size_t i = 0; i < V && static_cast<int>(out.size()) < n; ++i)
    if (std::find(always.begin(), always.end(), order[i]) == always.end()) out.push_back(order[i]);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ember
