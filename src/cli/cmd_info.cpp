// `ember info MODEL`: architecture, parameter count, tensor types and sizes,
// context length, tokenizer.
#include <cstdio>
#include <map>

#include "cli/common.h"

namespace ember::cli {

namespace {

// Experts, active parameters and the weight bytes one decoded token reads
// (Model::decode_reads).
void print_experts(const ModelFile& f, const ModelConfig& c, int64_t n_params) {
  const LayerConfig* first = nullptr;
  int n_moe = 0;
  for (const LayerConfig& l : c.layers)
    if (l.ffn_kind == FfnKind::kMoe) {
      if (!first) first = &l;
      ++n_moe;
    }
  std::printf("experts:       %d MoE layers of %d experts (%d used per token, ffn %d", n_moe, first->n_expert,
              first->n_expert_used, first->n_ff_exp);
  if (first->n_ff_shexp) std::printf(", shared expert ffn %d", first->n_ff_shexp);
  std::printf("), routing %s%s\n", moe_gating_name(first->moe_gating),
              first->moe_norm_topk ? ", weights renormalised" : "");
  auto m = Model::from_file(std::make_unique<ModelFile>(f));
  if (!m) {
    std::printf("parameters:    active per token unknown: %s\n", m.status().message().c_str());
    return;
  }
  const Model::DecodeReads r = (*m)->decode_reads();
  std::printf("parameters:    %.1f M active per token (of %.1f M)\n", r.params / 1e6, n_params / 1e6);
  std::printf("bytes/token:   %.1f MiB of weights read per decoded token (the chosen experts' share, every other "
              "matrix, one embedding row)\n",
              r.bytes / 1048576.0);
}

}  // namespace

int cmd_info(int argc, char** argv, int first) {
  ArgParser p("info", "ember info [MODEL]");
  std::vector<std::string> pos;
  bool verbose = false;
  p.flag("-v,--verbose", &verbose, "list every tensor and metadata key");
  p.positionals(&pos, "MODEL");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() > 1) return usage_error(p, "expects one MODEL");
  std::string path = resolve_model_path(p, pos.empty() ? "" : pos[0]);
  if (path.empty()) return kExitUsage;
  auto file = open_model_file(path);
  if (!file) return usage_error(p, file.status().message());
  const ModelFile& f = **file;

  std::printf("file:          %s (%s)\n", path.c_str(), f.format.c_str());
  auto cfg = config_from_metadata(f.metadata);
  const std::string* arch = f.architecture();
  std::printf("architecture:  %s\n", arch ? arch->c_str() : "(none)");
  if (const std::string* n = f.metadata.get_string("general.name")) std::printf("name:          %s\n", n->c_str());
  if (const std::string* q = f.metadata.get_string("ember.hf.quantization"))
    std::printf("quantization:  %s (repacked exactly at load)\n", q->c_str());

  int64_t n_params = 0;
  size_t n_bytes = 0;
  std::map<std::string, std::pair<int, size_t>> by_type;
  for (const auto& [name, t] : f.tensors) {
    n_params += t.nelements();
    n_bytes += t.nbytes;
    auto& e = by_type[dtype_name(t.type)];
    e.first++;
    e.second += t.nbytes;
  }
  std::printf("parameters:    %lld (%.1f M)\n", static_cast<long long>(n_params), n_params / 1e6);
  std::printf("weights:       %.1f MiB in %zu tensors, %.2f bits/weight\n", n_bytes / 1048576.0, f.tensors.size(),
              n_params ? 8.0 * n_bytes / n_params : 0.0);
  std::printf("tensor types:\n");
  for (const auto& [type, e] : by_type)
    std::printf("  %-6s %4d tensors  %9.1f MiB\n", type.c_str(), e.first, e.second / 1048576.0);
  if (cfg) {
    const ModelConfig& c = *cfg;
    std::printf("context:       %d tokens (trained)\n", c.n_ctx_train);
    std::printf("layers:        %d, embedding %d, ffn %d, heads %d (kv %d), head dim %d\n", c.n_layer, c.n_embd,
                c.n_ff, c.n_head, c.n_head_kv, c.head_dim);
    int n_swa = 0;
    for (const LayerConfig& l : c.layers) n_swa += l.sliding_window > 0;
    if (n_swa)
      std::printf("attention:     %d sliding-window layers (window %d), %d global\n", n_swa,
                  c.layers[0].sliding_window ? c.layers[0].sliding_window : 0, c.n_layer - n_swa);
    std::printf("rope:          %s, base %.0f", c.rope_style == RopeStyle::kNeox ? "neox" : "normal",
                c.layers.empty() ? 0.0 : c.layers.back().rope_base);
    if (c.n_rot != c.head_dim) std::printf(", %d of %d dims", c.n_rot, c.head_dim);
    if (c.rope_longrope) std::printf(", LongRoPE over %d", c.rope_orig_ctx);
    if (!c.layers.empty() && c.layers.back().rope_ext_factor > 0)
      std::printf(", YaRN x%.0f over %d", 1.0 / c.layers.back().rope_freq_scale, c.rope_orig_ctx);
    int n_nope = 0;
    for (const LayerConfig& l : c.layers) n_nope += !l.use_rope;
    if (n_nope) std::printf(", none in %d layers", n_nope);
    std::printf("\n");
    if (c.attn_temp_scale > 0)
      std::printf("temperature:   Q x (1 + %.3g ln(1 + floor(pos / %d)))\n", c.attn_temp_scale, c.rope_orig_ctx);
    if (!c.attn_pre_norm || c.qk_norm_full)
      std::printf("norms:         %s%s\n", c.attn_pre_norm ? "pre" : "post only", c.qk_norm_full ? ", QK-norm over whole rows" : "");
    if (c.rotation.any())
      std::printf("rotation:      QuaRot Hadamard, online on the attention input %d, FFN input %d, ffn_down input %d, "
                  "attention output %d; V/O per head %d\n",
                  c.rotation.attn_in, c.rotation.ffn_in, c.rotation.ffn_down, c.rotation.attn_out, c.rotation.attn_v);
    if (c.act_bits != 8) std::printf("activations:   %d-bit (block linears)\n", c.act_bits);
    if (c.has_moe()) print_experts(f, c, n_params);
  } else {
    std::printf("config:        not loadable: %s\n", cfg.status().message().c_str());
  }
  const std::string* tok_model = f.metadata.get_string("tokenizer.ggml.model");
  const GgufValue* tokens = f.metadata.find("tokenizer.ggml.tokens");
  std::printf("tokenizer:     %s, %llu tokens%s\n", tok_model ? tok_model->c_str() : "(none)",
              static_cast<unsigned long long>(tokens ? tokens->count : 0),
              f.metadata.find("tokenizer.chat_template") ? ", chat template" : "");
  if (verbose) {
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : f.metadata.entries()) {
      if (v.type == GgufType::kArray)
        std::printf("  %-48s array[%llu]\n", k.c_str(), static_cast<unsigned long long>(v.count));
      else if (v.type == GgufType::kString)
        std::printf("  %-48s %s\n", k.c_str(), v.str.substr(0, 80).c_str());
      else if (v.is_float())
        std::printf("  %-48s %g\n", k.c_str(), v.f);
      else
        std::printf("  %-48s %lld\n", k.c_str(), static_cast<long long>(v.i));
    }
    std::printf("\ntensors:\n");
    for (const auto& [name, t] : f.tensors)
      std::printf("  %-40s %-6s %-20s %10zu bytes\n", name.c_str(), dtype_name(t.type), t.shape_string().c_str(),
                  t.nbytes);
  }
  return kExitOk;
}

}  // namespace ember::cli
