// gpt-oss: OpenAI's gpt-oss-20b / -120b (llama.cpp's "gpt-oss", transformers'
// GptOssForCausalLM). Pre-norm blocks with biases on Q/K/V/O, learned
// attention sinks (one logit per head in the softmax denominator:
// AttentionShape::sinks), a sliding window (128) on every other layer
// (the even ones, llama.cpp's default pattern 2), NeoX RoPE with YaRN
// scaling, and a Mixture-of-Experts FFN in every layer: the router (with a
// bias) picks the top k logits and takes the softmax over them
// (MoeGating::kSoftmaxTopK; llama.cpp hard-codes it for this architecture),
// the experts have biases and the clamped SwiGLU
// (kernels/ops.h swiglu_oai_row). The experts ship in MXFP4. The FFN's
// pre-norm is "post_attention_norm" in llama.cpp's files.
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"
#include "model/io/model_file.h"
#include "model/io/safetensors.h"
#include "quant/blocks.h"

namespace ember {
namespace {

using namespace archs;

constexpr const char* kHfClasses[] = {"GptOssForCausalLM"};
constexpr const char* kHfModelTypes[] = {"gpt_oss"};

constexpr std::array<TensorSpec, 19> kBlockTensors = {{
    {R::kAttnNorm, P::kRequired, G::kAlways},
    {R::kAttnQ, P::kRequired, G::kAlways},
    {R::kAttnK, P::kRequired, G::kAlways},
    {R::kAttnV, P::kRequired, G::kAlways},
    {R::kAttnQBias, P::kRequired, G::kAlways},
    {R::kAttnKBias, P::kRequired, G::kAlways},
    {R::kAttnVBias, P::kRequired, G::kAlways},
    {R::kAttnOutput, P::kRequired, G::kAlways},
    {R::kAttnOutputBias, P::kRequired, G::kAlways},
    {R::kAttnSinks, P::kRequired, G::kAlways},
    {R::kFfnNorm, P::kRequired, G::kAlways, nullptr, nullptr, {}, "post_attention_norm.weight"},
    {R::kFfnGateInp, P::kRequired, G::kExperts, "mlp.router.weight"},
    {R::kFfnGateInpBias, P::kRequired, G::kExperts, "mlp.router.bias"},
    // Hugging Face: the fused, transposed tensors load under the gate and
    // down names and are rearranged (rearrange_hf below).
    {R::kFfnGateExps, P::kRequired, G::kExperts, "mlp.experts.gate_up_proj"},
    {R::kFfnUpExps, P::kRequired, G::kExperts},
    {R::kFfnDownExps, P::kRequired, G::kExperts, "mlp.experts.down_proj"},
    {R::kFfnGateExpsBias, P::kRequired, G::kExperts, "mlp.experts.gate_up_proj_bias"},
    {R::kFfnUpExpsBias, P::kRequired, G::kExperts},
    {R::kFfnDownExpsBias, P::kRequired, G::kExperts, "mlp.experts.down_proj_bias"},
}};

Status fill_gptoss(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNeox));
  cfg->activation = Activation::kSwiGluOai;
  EMBER_RETURN_IF_ERROR(fill_sliding_windows(meta, cfg, 2));
  return fill_moe_layers(meta, cfg, {.required = true, .norm_topk = false, .gating = MoeGating::kSoftmaxTopK});
}

// GptOssConfig (transformers 5.x): experts intermediate_size wide, the
// sliding window on the layers layer_types names (default: the even ones),
// the clamped SwiGLU's constants as ember runs them.
Status hf_gptoss(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  EMBER_RETURN_IF_ERROR(hf_moe_config(cv, ctx, meta,
                                      {.n_expert = 128, .n_expert_used = 4, .ff_exp_key = "intermediate_size",
                                       .ff_exp_default = 2880, .norm_topk_key = false}));
  for (auto [key, want] : {std::pair{"swiglu_alpha", double{kSwiGluOaiAlpha}}, {"swiglu_limit", double{kSwiGluOaiLimit}}}) {
    double v = want;
    if (const HfConfigView::json* j = cv.get(key)) EMBER_RETURN_IF_ERROR(cv.number_of(j, key, &v, want));
    if (static_cast<float>(v) != static_cast<float>(want))
      return Status::errorf("{}: {} = {} is not supported (gpt-oss's is {})", cv.name(), key, v, want);
  }
  int64_t window = 128;
  EMBER_RETURN_IF_ERROR(cv.get_count("sliding_window", &window, 128));
  std::vector<int32_t> sliding(static_cast<size_t>(ctx.n_layer));
  for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (i + 1) % 2;
  return hf_set_sliding_windows(cv, "gpt-oss", window, std::move(sliding), meta);
}

// Copies element (a, b, c) of a [A, B, C] row-major array of `es`-byte
// elements to (a, c', b') of a [A, C', B] one: dst[a][j][b] = src[a][b][pick(j)].
std::shared_ptr<std::vector<uint8_t>> transpose_pick(const uint8_t* src, size_t es, int64_t A, int64_t B, int64_t C,
                                                     int64_t n_out, int64_t stride, int64_t first) {
  auto out = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(A * n_out * B) * es);
  uint8_t* d = out->data();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t j = 0; j < n_out; ++j)
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(d + static_cast<size_t>((a * n_out + j) * B + b) * es,
                    src + static_cast<size_t>((a * B + b) * C + first + j * stride) * es, es);
  return out;
}

// One MXFP4 expert tensor of an OpenAI checkpoint (`<base>_blocks` [E, R,
// C/32, 16] and `<base>_scales` [E, R, C/32], u8: row r of expert e, each
// byte two consecutive E2M1 codes, low nibble first, and one E8M0 exponent
// per 32) as GGUF MXFP4 rows ([E][n_out, C]; rows first, first + stride,
// ...: gate / up are the even / odd rows of gate_up), the codes
// re-paired as ggml's block_mxfp4 holds them (element j and j + 16 in byte j).
Status mxfp4_experts(const SafetensorsSet& set, const std::string& base, int64_t stride, int64_t first,
                     const std::string& name, ModelFile* f) {
  auto bi = set.tensors.find(base + "_blocks"), si = set.tensors.find(base + "_scales");
  const SafetensorsTensor& b = *bi->second.tensor;
  const SafetensorsTensor& sc = *si->second.tensor;
  if (b.dtype != "U8" || sc.dtype != "U8" || b.shape.size() != 4 || sc.shape.size() != 3 || b.shape[3] != 16 ||
      b.shape[0] != sc.shape[0] || b.shape[1] != sc.shape[1] || b.shape[2] != sc.shape[2] ||
      b.shape[1] % stride != 0 || b.nbytes != static_cast<size_t>(b.shape[0] * b.shape[1] * b.shape[2] * 16) ||
      sc.nbytes != static_cast<size_t>(sc.shape[0] * sc.shape[1] * sc.shape[2]))
    return Status::errorf("{}: {}_blocks / _scales are not MXFP4 expert blocks [E, rows, cols/32, 16] and [E, rows, "
                          "cols/32] of u8", bi->second.file->path(), base);
  const int64_t E = b.shape[0], R = b.shape[1], nb = b.shape[2], n_out = R / stride;
  auto out = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(E * n_out * nb) * sizeof(BlockMXFP4));
  auto* dst = reinterpret_cast<BlockMXFP4*>(out->data());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < n_out; ++j) {
      const int64_t r = first + j * stride;
      for (int64_t k = 0; k < nb; ++k) {
        const uint8_t* q = b.data + ((e * R + r) * nb + k) * 16;
        BlockMXFP4& o = dst[(e * n_out + j) * nb + k];
        o.e = sc.data[(e * R + r) * nb + k];
        auto code = [&](int i) { return (q[i / 2] >> (4 * (i % 2))) & 0x0F; };
        for (int i = 0; i < 16; ++i) o.qs[i] = static_cast<uint8_t>(code(i) | (code(i + 16) << 4));
      }
    }
  TensorView v;
  v.name = name;
  v.type = DType::kMXFP4;
  v.n_dims = 3;
  v.ne[0] = nb * 32, v.ne[1] = n_out, v.ne[2] = E;
  v.data = out->data();
  v.nbytes = out->size();
  f->owners.push_back(std::move(out));
  f->tensors[name] = v;
  return Status::ok();
}

// Hugging Face's layout into GGUF's: experts.gate_up_proj [E, H, 2I] (gate
// and up interleaved along 2I) into ffn_gate_exps / ffn_up_exps [E][I, H];
// experts.down_proj [E, I, H] into ffn_down_exps [E][H, I];
// gate_up_proj_bias [E, 2I] into the gate and up biases [E, I] (as llama.cpp's
// converter splits them). Float tensors keep their type.
Status rearrange_hf(const SafetensorsSet& set, ModelFile* f) {
  const int64_t n_layer = f->metadata.get_int("gpt-oss.block_count").value_or(0);
  auto put = [&](const TensorView& like, const std::string& name, int n_dims, std::initializer_list<int64_t> ne,
                 std::shared_ptr<std::vector<uint8_t>> data) {
    TensorView v;
    v.name = name;
    v.type = like.type;
    v.n_dims = n_dims;
    int i = 0;
    for (int64_t x : ne) v.ne[i++] = x;
    v.data = data->data();
    v.nbytes = data->size();
    f->owners.push_back(std::move(data));
    f->tensors[name] = v;
  };
  auto float_type = [](const TensorView& t) {
    return t.type == DType::kF32 || t.type == DType::kF16 || t.type == DType::kBF16;
  };
  for (int64_t il = 0; il < n_layer; ++il) {
    const int l = static_cast<int>(il);
    const std::string gate = gguf_tensor_name(R::kFfnGateExps, l), up = gguf_tensor_name(R::kFfnUpExps, l);
    const std::string down = gguf_tensor_name(R::kFfnDownExps, l);
    const std::string gate_b = gguf_tensor_name(R::kFfnGateExpsBias, l), up_b = gguf_tensor_name(R::kFfnUpExpsBias, l);
    if (f->tensor(up) || f->tensor(up_b))
      return Status::errorf("{}: layer {} has separate up experts; gpt-oss checkpoints fuse gate_up_proj", f->path, il);
    // OpenAI's MXFP4 checkpoints (quantization_config mxfp4).
    const std::string hf = fmt::format("model.layers.{}.mlp.experts.", il);
    for (const char* base : {"gate_up_proj", "down_proj"}) {
      const bool blocks = set.tensors.count(hf + base + "_blocks") != 0, scales = set.tensors.count(hf + base + "_scales") != 0;
      if (blocks != scales)
        return Status::errorf("{}: {}{}_{} is missing", f->path, hf, base, blocks ? "scales" : "blocks");
      if (!blocks) continue;
      if (f->tensor(std::string(base) == "down_proj" ? down : gate))
        return Status::errorf("{}: layer {} has both {} and its MXFP4 blocks", f->path, il, base);
      if (std::string(base) == "down_proj") {
        EMBER_RETURN_IF_ERROR(mxfp4_experts(set, hf + base, 1, 0, down, f));
      } else {
        EMBER_RETURN_IF_ERROR(mxfp4_experts(set, hf + base, 2, 0, gate, f));
        EMBER_RETURN_IF_ERROR(mxfp4_experts(set, hf + base, 2, 1, up, f));
      }
    }
    const bool packed = set.tensors.count(hf + "gate_up_proj_blocks") != 0;
    if (const TensorView* t = packed ? nullptr : f->tensor(gate)) {  // ne = {2I, H, E}
      if (t->n_dims != 3 || t->ne[0] % 2 != 0 || !float_type(*t))
        return Status::errorf("{}: mlp.experts.gate_up_proj of layer {} has shape {} ({}): expected [E, H, 2I] floats",
                              f->path, il, t->shape_string(), dtype_name(t->type));
      const int64_t E = t->ne[2], H = t->ne[1], I = t->ne[0] / 2;
      const TensorView src = *t;
      const auto* p = static_cast<const uint8_t*>(src.data);
      const size_t es = dtype_type_size(src.type);
      put(src, gate, 3, {H, I, E}, transpose_pick(p, es, E, H, 2 * I, I, 2, 0));
      put(src, up, 3, {H, I, E}, transpose_pick(p, es, E, H, 2 * I, I, 2, 1));
    }
    if (const TensorView* t = set.tensors.count(hf + "down_proj_blocks") ? nullptr : f->tensor(down)) {  // {H, I, E}
      if (t->n_dims != 3 || !float_type(*t))
        return Status::errorf("{}: mlp.experts.down_proj of layer {} has shape {} ({}): expected [E, I, H] floats",
                              f->path, il, t->shape_string(), dtype_name(t->type));
      const int64_t E = t->ne[2], I = t->ne[1], H = t->ne[0];
      const TensorView src = *t;
      put(src, down, 3, {I, H, E},
          transpose_pick(static_cast<const uint8_t*>(src.data), dtype_type_size(src.type), E, I, H, H, 1, 0));
    }
    if (const TensorView* t = f->tensor(gate_b)) {  // ne = {2I, E}
      if (t->n_dims != 2 || t->ne[0] % 2 != 0 || !float_type(*t))
        return Status::errorf("{}: mlp.experts.gate_up_proj_bias of layer {} has shape {}: expected [E, 2I]", f->path,
                              il, t->shape_string());
      const int64_t E = t->ne[1], I = t->ne[0] / 2;
      const TensorView src = *t;
      const auto* p = static_cast<const uint8_t*>(src.data);
      const size_t es = dtype_type_size(src.type);
      put(src, gate_b, 2, {I, E}, transpose_pick(p, es, E, 1, 2 * I, I, 2, 0));
      put(src, up_b, 2, {I, E}, transpose_pick(p, es, E, 1, 2 * I, I, 2, 1));
    }
  }
  return Status::ok();
}

}  // namespace

constinit const ArchSpec kGptOssSpec = {
    .name = "gpt-oss",
    .fill = fill_gptoss,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    .hf_defaults = {.hidden_size = 2880, .num_hidden_layers = 36, .num_attention_heads = 64, .intermediate_size = 2880,
                    .vocab_size = 201088, .num_key_value_heads = 8, .max_position_embeddings = 131072, .head_dim = 64,
                    .rope_theta = 150000.0},  // GptOssConfig
    .hf_config = hf_gptoss,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "gpt-oss",  // the harmony format (template/builtin_template_gpt_oss.cpp)
    // gpt-oss-20b
    .gen = {.n_vocab = 201088, .n_ctx = 131072, .rope_base = 150000, .norm_eps = 1e-5, .tied_embeddings = false,
            .sliding_window = 128, .expert_ff_key = true},
    .hf_rearrange = rearrange_hf,
};

}  // namespace ember
