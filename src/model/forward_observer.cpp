// Names of the linear roles; see forward_observer.h.
#include "model/forward_observer.h"

namespace ember {

const char* linear_role_name(LinearRole r) {
  switch (r) {
    case LinearRole::kQ: return "attn_q";
    case LinearRole::kK: return "attn_k";
    case LinearRole::kV: return "attn_v";
    case LinearRole::kO: return "attn_output";
    case LinearRole::kGate: return "ffn_gate";
    case LinearRole::kUp: return "ffn_up";
    case LinearRole::kDown: return "ffn_down";
    case LinearRole::kOutput: return "output";
  }
  return "?";
}

}  // namespace ember
