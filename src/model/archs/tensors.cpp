// The tensor role table; see tensors.h.
#include "model/archs/tensors.h"

#include <fmt/format.h>

#include "core/check.h"
#include "model/archs/arch_spec.h"

namespace ember {
namespace {

using R = TensorRole;
using S = TensorScope;
using K = TensorKind;
using D = Dim;

// In TensorRole order.
constexpr RoleInfo kRoles[] = {
    {R::kTokenEmbd, "token_embd", "token_embd.weight", S::kModel, K::kMatrix, 2, {D::kEmbd, D::kVocab}, "model.embed_tokens.weight"},
    {R::kRopeFreqs, "rope_freqs", "rope_freqs.weight", S::kModel, K::kRopeFreqs, 1, {D::kRopeHalf}, nullptr},
    {R::kRopeFactorsLong, "rope_factors_long", "rope_factors_long.weight", S::kModel, K::kRopeFreqs, 1, {D::kRopeHalf}, nullptr},
    {R::kRopeFactorsShort, "rope_factors_short", "rope_factors_short.weight", S::kModel, K::kRopeFreqs, 1, {D::kRopeHalf}, nullptr},
    {R::kOutputNorm, "output_norm", "output_norm.weight", S::kHead, K::kNorm, 1, {D::kEmbd}, "model.norm.weight"},
    {R::kOutput, "output", "output.weight", S::kHead, K::kMatrix, 2, {D::kEmbd, D::kVocab}, "lm_head.weight"},
    {R::kAttnNorm, "attn_norm", "attn_norm.weight", S::kBlock, K::kNorm, 1, {D::kEmbd}, "input_layernorm.weight"},
    {R::kAttnQ, "attn_q", "attn_q.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kQ}, "self_attn.q_proj.weight"},
    {R::kAttnK, "attn_k", "attn_k.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kKv}, "self_attn.k_proj.weight"},
    {R::kAttnV, "attn_v", "attn_v.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kV}, "self_attn.v_proj.weight"},
    {R::kAttnQkv, "attn_qkv", "attn_qkv.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kQkv}, "self_attn.qkv_proj.weight"},
    {R::kAttnQBias, "attn_q_bias", "attn_q.bias", S::kBlock, K::kBias, 1, {D::kQ}, "self_attn.q_proj.bias"},
    {R::kAttnKBias, "attn_k_bias", "attn_k.bias", S::kBlock, K::kBias, 1, {D::kKv}, "self_attn.k_proj.bias"},
    {R::kAttnVBias, "attn_v_bias", "attn_v.bias", S::kBlock, K::kBias, 1, {D::kV}, "self_attn.v_proj.bias"},
    {R::kAttnOutput, "attn_output", "attn_output.weight", S::kBlock, K::kMatrix, 2, {D::kO, D::kEmbd}, "self_attn.o_proj.weight"},
    {R::kAttnOutputBias, "attn_output_bias", "attn_output.bias", S::kBlock, K::kBias, 1, {D::kEmbd}, "self_attn.o_proj.bias"},
    {R::kAttnQNorm, "attn_q_norm", "attn_q_norm.weight", S::kBlock, K::kNorm, 1, {D::kQNorm}, "self_attn.q_norm.weight"},
    {R::kAttnKNorm, "attn_k_norm", "attn_k_norm.weight", S::kBlock, K::kNorm, 1, {D::kKNorm}, "self_attn.k_norm.weight"},
    {R::kPostAttnNorm, "post_attention_norm", "post_attention_norm.weight", S::kBlock, K::kNorm, 1, {D::kEmbd}, nullptr},
    {R::kFfnNorm, "ffn_norm", "ffn_norm.weight", S::kBlock, K::kNorm, 1, {D::kEmbd}, "post_attention_layernorm.weight"},
    {R::kFfnGateInp, "ffn_gate_inp", "ffn_gate_inp.weight", S::kBlock, K::kRouter, 2, {D::kEmbd, D::kExperts}, nullptr},
    {R::kFfnGateExps, "ffn_gate_exps", "ffn_gate_exps.weight", S::kBlock, K::kExperts, 3, {D::kEmbd, D::kFfExp, D::kExperts}, nullptr},
    {R::kFfnUpExps, "ffn_up_exps", "ffn_up_exps.weight", S::kBlock, K::kExperts, 3, {D::kEmbd, D::kFfExp, D::kExperts}, nullptr},
    {R::kFfnDownExps, "ffn_down_exps", "ffn_down_exps.weight", S::kBlock, K::kExperts, 3, {D::kFfExp, D::kEmbd, D::kExperts}, nullptr},
    {R::kFfnGateUpExps, "ffn_gate_up_exps", "ffn_gate_up_exps.weight", S::kBlock, K::kExperts, 3, {D::kEmbd, D::kFfExp2, D::kExperts}, nullptr},
    {R::kFfnGateInpShexp, "ffn_gate_inp_shexp", "ffn_gate_inp_shexp.weight", S::kBlock, K::kRouter, 1, {D::kEmbd}, nullptr},
    {R::kFfnGateShexp, "ffn_gate_shexp", "ffn_gate_shexp.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kFfShexp}, nullptr},
    {R::kFfnUpShexp, "ffn_up_shexp", "ffn_up_shexp.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kFfShexp}, nullptr},
    {R::kFfnDownShexp, "ffn_down_shexp", "ffn_down_shexp.weight", S::kBlock, K::kMatrix, 2, {D::kFfShexp, D::kEmbd}, nullptr},
    {R::kFfnGate, "ffn_gate", "ffn_gate.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kFf}, "mlp.gate_proj.weight"},
    {R::kFfnUp, "ffn_up", "ffn_up.weight", S::kBlock, K::kMatrix, 2, {D::kEmbd, D::kFf}, "mlp.up_proj.weight"},
    {R::kFfnDown, "ffn_down", "ffn_down.weight", S::kBlock, K::kMatrix, 2, {D::kFf, D::kEmbd}, "mlp.down_proj.weight"},
    {R::kPostFfnNorm, "post_ffw_norm", "post_ffw_norm.weight", S::kBlock, K::kNorm, 1, {D::kEmbd}, nullptr},
    {R::kAttnSinks, "attn_sinks", "attn_sinks.weight", S::kBlock, K::kBias, 1, {D::kHead}, "self_attn.sinks"},
    {R::kFfnGateInpBias, "ffn_gate_inp_bias", "ffn_gate_inp.bias", S::kBlock, K::kBias, 1, {D::kExperts}, nullptr},
    {R::kFfnGateExpsBias, "ffn_gate_exps_bias", "ffn_gate_exps.bias", S::kBlock, K::kBias, 2, {D::kFfExp, D::kExperts}, nullptr},
    {R::kFfnUpExpsBias, "ffn_up_exps_bias", "ffn_up_exps.bias", S::kBlock, K::kBias, 2, {D::kFfExp, D::kExperts}, nullptr},
    {R::kFfnDownExpsBias, "ffn_down_exps_bias", "ffn_down_exps.bias", S::kBlock, K::kBias, 2, {D::kEmbd, D::kExperts}, nullptr},
};
static_assert(sizeof(kRoles) / sizeof(kRoles[0]) == kNumTensorRoles);

constexpr bool roles_in_order() {
  for (int i = 0; i < kNumTensorRoles; ++i)
    if (static_cast<int>(kRoles[i].role) != i) return false;
  return true;
}
static_assert(roles_in_order(), "kRoles must follow the TensorRole order");

}  // namespace

const RoleInfo& role_info(TensorRole r) {
  EMBER_CHECK(r != TensorRole::kUnknown);
  return kRoles[static_cast<int>(r)];
}

int64_t TensorSizes::of(Dim d) const {
  switch (d) {
    case Dim::kEmbd: return embd;
    case Dim::kVocab: return vocab;
    case Dim::kQ: return q;
    case Dim::kKv: return kv;
    case Dim::kQkv: return q + kv + v;
    case Dim::kV: return v;
    case Dim::kO: return o;
    case Dim::kFf: return ff;
    case Dim::kHeadDim: return head_dim;
    case Dim::kRopeHalf: return rope_half;
    case Dim::kExperts: return experts;
    case Dim::kFfExp: return ff_exp;
    case Dim::kFfExp2: return 2 * ff_exp;
    case Dim::kFfShexp: return ff_shexp;
    case Dim::kQNorm: return q_norm;
    case Dim::kKNorm: return k_norm;
    case Dim::kHead: return head;
  }
  return 0;
}

TensorSizes tensor_sizes(const ModelConfig& cfg, int il) {
  const int n_head = il < 0 ? cfg.n_head : cfg.layers[il].n_head;
  const int n_head_kv = il < 0 ? cfg.n_head_kv : cfg.layers[il].n_head_kv;
  TensorSizes s;
  s.embd = cfg.n_embd;
  s.vocab = cfg.n_vocab;
  s.q = static_cast<int64_t>(n_head) * cfg.head_dim;
  s.kv = static_cast<int64_t>(n_head_kv) * cfg.head_dim;
  s.v = static_cast<int64_t>(n_head_kv) * cfg.head_dim_v;
  s.o = static_cast<int64_t>(n_head) * cfg.head_dim_v;
  s.ff = il < 0 ? cfg.n_ff : cfg.layers[il].n_ff;
  s.head_dim = cfg.head_dim;
  s.rope_half = cfg.n_rot / 2;
  s.q_norm = cfg.qk_norm_full ? s.q : s.head_dim;
  s.k_norm = cfg.qk_norm_full ? s.kv : s.head_dim;
  s.head = n_head;
  if (il >= 0) {
    const LayerConfig& l = cfg.layers[il];
    s.experts = l.n_expert;
    s.ff_exp = l.n_ff_exp;
    s.ff_shexp = l.n_ff_shexp;
  }
  return s;
}

std::vector<int64_t> tensor_shape(const TensorSpec& spec, const TensorSizes& sizes) {
  const RoleInfo& r = role_info(spec.role);
  std::vector<int64_t> ne;
  for (int d = 0; d < r.n_dims; ++d) ne.push_back(sizes.of(r.ne[d]));
  if (!spec.parts.empty()) {
    ne[1] = 0;
    for (TensorRole p : spec.parts) ne[1] += sizes.of(role_info(p).ne[1]);
  }
  return ne;
}

TensorRole role_from_gguf_name(std::string_view name, int* layer) {
  if (layer) *layer = -1;
  std::string_view rest = name;
  int il = -1;
  if (name.substr(0, 4) == "blk.") {
    size_t p = 4;
    int64_t v = 0;
    while (p < name.size() && p < 4 + 7 && name[p] >= '0' && name[p] <= '9') v = v * 10 + (name[p++] - '0');
    if (p == 4 || p >= name.size() || name[p] != '.') return TensorRole::kUnknown;
    il = static_cast<int>(v);
    rest = name.substr(p + 1);
  }
  for (const RoleInfo& r : kRoles) {
    if ((r.scope == TensorScope::kBlock) != (il >= 0) || rest != r.gguf) continue;
    if (layer) *layer = il;
    return r.role;
  }
  return TensorRole::kUnknown;
}

std::string gguf_tensor_name(TensorRole r, int il) {
  const RoleInfo& info = role_info(r);
  if (info.scope != TensorScope::kBlock) return info.gguf;
  return fmt::format("blk.{}.{}", il, info.gguf);
}

std::string gguf_tensor_name(const TensorSpec& spec, int il) {
  if (!spec.gguf) return gguf_tensor_name(spec.role, il);
  return role_info(spec.role).scope == TensorScope::kBlock ? fmt::format("blk.{}.{}", il, spec.gguf)
                                                           : std::string(spec.gguf);
}

namespace {

// The per-expert base name of a 3-D expert role (llama.cpp's
// LLM_TENSOR_FFN_*_EXP), or null.
const char* expert_base(TensorRole r) {
  switch (r) {
    case TensorRole::kFfnGateExps: return "ffn_gate";
    case TensorRole::kFfnUpExps: return "ffn_up";
    case TensorRole::kFfnDownExps: return "ffn_down";
    default: return nullptr;
  }
}

// Parses a decimal number of at most 7 digits at s[*p], advancing *p.
bool parse_index(std::string_view s, size_t* p, int* out) {
  const size_t b = *p;
  int64_t v = 0;
  while (*p < s.size() && *p < b + 7 && s[*p] >= '0' && s[*p] <= '9') v = v * 10 + (s[(*p)++] - '0');
  if (*p == b) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

std::string gguf_expert_tensor_name(TensorRole exps, int il, int expert) {
  const char* base = expert_base(exps);
  EMBER_CHECK(base != nullptr);
  return fmt::format("blk.{}.{}.{}.weight", il, base, expert);
}

TensorRole role_from_gguf_expert_name(std::string_view name, int* layer, int* expert) {
  size_t p = 4;
  int il = 0, e = 0;
  if (name.substr(0, 4) != "blk." || !parse_index(name, &p, &il) || p >= name.size() || name[p] != '.')
    return TensorRole::kUnknown;
  const std::string_view rest = name.substr(p + 1);
  for (TensorRole r : {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps, TensorRole::kFfnDownExps}) {
    const std::string_view base = expert_base(r);
    if (rest.substr(0, base.size()) != base || rest.size() <= base.size() || rest[base.size()] != '.') continue;
    size_t q = base.size() + 1;
    if (!parse_index(rest, &q, &e) || rest.substr(q) != ".weight") continue;
    if (layer) *layer = il;
    if (expert) *expert = e;
    return r;
  }
  return TensorRole::kUnknown;
}

bool is_moe_role(TensorRole r) {
  switch (r) {
    case TensorRole::kFfnGateInp:
    case TensorRole::kFfnGateExps:
    case TensorRole::kFfnUpExps:
    case TensorRole::kFfnDownExps:
    case TensorRole::kFfnGateUpExps:
    case TensorRole::kFfnGateInpShexp:
    case TensorRole::kFfnGateShexp:
    case TensorRole::kFfnUpShexp:
    case TensorRole::kFfnDownShexp:
    case TensorRole::kFfnGateInpBias:
    case TensorRole::kFfnGateExpsBias:
    case TensorRole::kFfnUpExpsBias:
    case TensorRole::kFfnDownExpsBias: return true;
    default: return false;
  }
}

bool is_dense_ffn_role(TensorRole r) {
  return r == TensorRole::kFfnGate || r == TensorRole::kFfnUp || r == TensorRole::kFfnDown;
}

}  // namespace ember
