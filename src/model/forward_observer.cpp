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
    case LinearRole::kRouter: return "ffn_gate_inp";
    case LinearRole::kGateExps: return "ffn_gate_exps";
    case LinearRole::kUpExps: return "ffn_up_exps";
    case LinearRole::kDownExps: return "ffn_down_exps";
    case LinearRole::kGateShexp: return "ffn_gate_shexp";
    case LinearRole::kUpShexp: return "ffn_up_shexp";
    case LinearRole::kDownShexp: return "ffn_down_shexp";
    case LinearRole::kShexpGate: return "ffn_gate_inp_shexp";
  }
  return "?";
}

}  // namespace ember
