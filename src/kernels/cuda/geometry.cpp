// Host half of kernels/cuda/geometry.h: the attention work items.
#include "kernels/cuda/geometry.h"

#include <unordered_set>

namespace ember::cuda {

bool attention_items(const int32_t* seq_of_token, int64_t n_tokens, int group, int tokens_per_item,
                     std::vector<AttnItem>* items) {
  std::vector<AttnItem> out;
  std::unordered_set<int32_t> seen;
  const int tpi = tokens_per_item < 1 ? 1 : tokens_per_item;
  for (int64_t t = 0; t < n_tokens;) {
    int64_t end = t + 1;
    while (end < n_tokens && seq_of_token[end] == seq_of_token[t]) ++end;
    if (!seen.insert(seq_of_token[t]).second) return false;  // the sequence appeared before: not contiguous
    if (group >= kAttnMaxWarps) {
      for (int64_t u = t; u < end; ++u)
        for (int r0 = 0; r0 < group; r0 += kAttnMaxWarps)
          out.push_back({static_cast<int32_t>(u), r0, group - r0 < kAttnMaxWarps ? group - r0 : kAttnMaxWarps, 0});
    } else {
      const int64_t per = tpi * group <= kAttnMaxWarps ? tpi : kAttnMaxWarps / group;
      for (int64_t u = t; u < end; u += per) {
        const int64_t nt = end - u < per ? end - u : per;
        out.push_back({static_cast<int32_t>(u), 0, static_cast<int32_t>(nt * group), 0});
      }
    }
    t = end;
  }
  *items = std::move(out);
  return true;
}

}  // namespace ember::cuda
