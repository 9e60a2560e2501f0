// ArchSpec tables (model/archs): the registry and its errors for unknown
// architectures, the shape of every spec's tables, every spec's tensor list
// against its tiny fixtures (each Hugging Face folder in tests/data/model
// and a gen-model file bind, every listed tensor is checked for presence and
// shape, every file tensor is listed), the Hugging Face tensor names, the
// block wiring flags derived from the list and the GGUF default RoPE type.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "format_test_util.h"
#include "model/archs/archs.h"
#include "model/config.h"
#include "model/io/gguf.h"
#include "model/io/hf_config.h"
#include "model/io/model_file.h"
#include "model/weights.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model";

std::unique_ptr<ModelFile> open_ok(const std::string& path) {
  auto r = open_model_file(path);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r.value()) : nullptr;
}

// The error binding `f` gives ("" when it binds).
std::string bind_error(const ModelFile& f) {
  auto cfg = config_from_metadata(f.metadata);
  if (!cfg) return cfg.status().message();
  auto w = bind_weights(f, &*cfg);
  return w ? "" : w.status().message();
}

// Every Hugging Face fixture folder, by architecture.
std::map<std::string, std::vector<std::string>> hf_fixtures() {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& e : fs::directory_iterator(kData)) {
    if (!e.is_directory() || !fs::exists(e.path() / "config.json")) continue;
    auto mf = open_model_file(e.path().string());
    EXPECT_TRUE(mf.is_ok()) << e.path() << ": " << mf.status().message();
    if (mf.is_ok()) out[*(*mf)->architecture()].push_back(e.path().string());
  }
  return out;
}

// A tiny gen-model file of `arch` with every optional tensor gen-model can
// write (biases, untied output, RoPE factors).
std::string write_tiny(const std::string& arch, const test::TempDir& dir) {
  auto s = gen_model_arch_defaults(arch);
  EXPECT_TRUE(s.is_ok());
  GenModelShape t = *s;
  t.n_layer = 2, t.n_embd = 64, t.n_ff = 96, t.n_head = 4, t.n_head_kv = 2, t.head_dim = 32, t.n_vocab = 300;
  t.qkv_bias = true, t.tied_embeddings = false, t.rope_scale_factor = 8;
  if (find_arch(arch)->has_experts() && !find_arch(arch)->find(TensorRole::kFfnGate)) {  // MoE only
    t.n_expert = 4, t.n_expert_used = 2;
    if (find_arch(arch)->gen.expert_ff_key) t.n_ff_exp = 32;
  }
  if (find_arch(arch)->find(TensorRole::kRopeFactorsLong)) {  // LongRoPE instead (phi3)
    t.rope_scale_factor = 0, t.longrope = true, t.rope_original_ctx = 1024;
  }
  GenModelOptions o;
  o.type = DType::kF32;
  ThreadPool pool(2);
  const std::string path = (dir.path() / (arch + ".gguf")).string();
  auto st = write_random_model(t, o, path, pool);
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  return path;
}

// The listed tensors of a bound model `f`: each one, removed, is an error
// naming it if required and harmless if optional; each one with a shape one
// row / element short is an error naming it. Every tensor of the file is
// listed by the spec.
void check_tensor_list(const ArchSpec& spec, const std::string& path) {
  SCOPED_TRACE(path);
  auto f = open_ok(path);
  ASSERT_TRUE(f);
  ASSERT_EQ(bind_error(*f), "");
  for (const auto& [name, t] : f->tensors) {
    int layer = -1, expert = -1;
    TensorRole role = role_from_gguf_name(name, &layer);
    if (role == TensorRole::kUnknown) role = role_from_gguf_expert_name(name, &layer, &expert);  // one expert's matrix
    ASSERT_NE(role, TensorRole::kUnknown) << name;
    // Listed under its role, or under a spec's own GGUF name (TensorSpec::gguf).
    bool listed = spec.find(role) != nullptr && !spec.find(role)->gguf;
    for (const auto& list : {spec.model_tensors, spec.block_tensors})
      for (const TensorSpec& ts : list) listed |= ts.gguf && gguf_tensor_name(ts, layer) == name;
    EXPECT_TRUE(listed) << name << " is not in the " << spec.name << " tensor list";
  }
  // The FFN tensors of the other kind (dense / MoE) are not bound; the
  // expert tensors' layouts (3-D, fused, per expert) are checked by
  // moe_load_test.cpp.
  const bool moe = f->tensor(gguf_tensor_name(TensorRole::kFfnGateInp, 1)) != nullptr;
  int n_checked = 0;
  for (const auto& list : {spec.model_tensors, spec.block_tensors}) {
    for (const TensorSpec& ts : list) {
      if (ts.presence == Presence::kUnbound) continue;
      if ((is_moe_role(ts.role) && !moe) || (is_dense_ffn_role(ts.role) && moe) ||
          role_info(ts.role).kind == TensorKind::kExperts)
        continue;
      const std::string name = gguf_tensor_name(ts, 1);
      auto it = f->tensors.find(name);
      if (it == f->tensors.end()) {
        EXPECT_NE(ts.presence, Presence::kRequired) << name << " is required but the fixture lacks it";
        continue;
      }
      const TensorView saved = it->second;
      f->tensors.erase(it);
      const std::string missing = bind_error(*f);
      if (ts.presence == Presence::kRequired) {
        // A fused tensor's message adds its parts' rows.
        EXPECT_EQ(missing.substr(0, missing.find(" (rows: ")), "missing tensor '" + name + "'");
      } else if (ts.role == TensorRole::kRopeFactorsLong || ts.role == TensorRole::kRopeFactorsShort) {
        EXPECT_NE(missing.find("LongRoPE needs both"), std::string::npos) << missing;  // a pair
      } else {
        EXPECT_EQ(missing, "") << name;
      }
      // One row short (the embedding, whose rows give n_vocab: one column
      // short); vectors one element short.
      TensorView bad = saved;
      if (bad.n_dims == 2 && ts.role != TensorRole::kTokenEmbd) bad.ne[1] -= 1;
      else bad.ne[0] -= 1;
      bad.nbytes = dtype_row_size(bad.type, bad.ne[0]) * static_cast<size_t>(bad.nrows());
      f->tensors[name] = bad;
      const std::string wrong = bind_error(*f);
      EXPECT_NE(wrong.find("tensor '" + name + "' has"), std::string::npos) << wrong;
      f->tensors[name] = saved;
      ++n_checked;
    }
  }
  EXPECT_EQ(bind_error(*f), "");
  EXPECT_GE(n_checked, moe ? 8 : 10);
}

TEST(ArchRegistry, NamesAndLookups) {
  std::vector<std::string> names;
  for (const ArchSpec* s : arch_specs()) names.push_back(s->name);
  EXPECT_EQ(names, (std::vector<std::string>{"llama", "qwen2", "qwen3", "gemma3", "qwen2moe", "qwen3moe", "olmoe",
                                             "phi3", "mistral3", "smollm3", "olmo2", "gpt-oss"}));
  EXPECT_EQ(supported_architectures(), names);
  EXPECT_EQ(arch_names(), "llama, qwen2, qwen3, gemma3, qwen2moe, qwen3moe, olmoe, phi3, mistral3, smollm3, olmo2, gpt-oss");
  EXPECT_EQ(find_arch_by_hf_class("MixtralForCausalLM"), &kLlamaSpec);
  EXPECT_EQ(find_arch_by_hf_model_type("qwen3_moe"), &kQwen3MoeSpec);
  for (const ArchSpec* s : arch_specs()) {
    EXPECT_EQ(find_arch(s->name), s);
    for (const char* c : s->hf_classes) EXPECT_EQ(find_arch_by_hf_class(c), s) << c;
    for (const char* m : s->hf_model_types) EXPECT_EQ(find_arch_by_hf_model_type(m), s) << m;
  }
  EXPECT_EQ(find_arch("gemma2"), nullptr);
  EXPECT_EQ(find_arch_by_hf_class("MistralForCausalLM"), &kLlamaSpec);
  EXPECT_EQ(find_arch_by_hf_class("Gemma3ForConditionalGeneration"), &kGemma3Spec);
  EXPECT_EQ(find_arch_by_hf_model_type("gemma3_text"), &kGemma3Spec);
  EXPECT_EQ(find_arch_by_hf_class("GPT2LMHeadModel"), nullptr);
  EXPECT_EQ(find_arch_by_hf_class("Phi3ForCausalLM"), &kPhi3Spec);
  EXPECT_EQ(find_arch_by_hf_class("Mistral3ForConditionalGeneration"), &kMistral3Spec);
  EXPECT_EQ(find_arch_by_hf_model_type("olmo3"), &kOlmo2Spec);
}

TEST(ArchRegistry, UnknownArchitecturesListTheSupportedOnes) {
  const std::string want =
      "unsupported architecture 'mamba' (supported: llama, qwen2, qwen3, gemma3, qwen2moe, qwen3moe, olmoe, phi3, "
      "mistral3, smollm3, olmo2, gpt-oss)";
  Metadata m;
  m.set("general.architecture", Metadata::make_string("mamba"));
  auto cfg = config_from_metadata(m);
  ASSERT_FALSE(cfg.is_ok());
  EXPECT_EQ(cfg.status().message(), want);
  EXPECT_EQ(unsupported_arch_error("mamba").message(), want);
  auto shape = gen_model_arch_defaults("mamba");
  ASSERT_FALSE(shape.is_ok());
  EXPECT_EQ(shape.status().message(), want);
  Metadata vocab;
  EXPECT_EQ(synthetic_bpe_vocab("mamba", 1000, &vocab).message(), want);
  // A Hugging Face config names every class of every spec.
  Metadata hf;
  auto info = hf_config_to_metadata(R"({"architectures": ["MambaForCausalLM"]})", "config.json", &hf);
  ASSERT_FALSE(info.is_ok());
  const std::string msg = info.status().message();
  EXPECT_NE(msg.find("unsupported architecture 'MambaForCausalLM'"), std::string::npos) << msg;
  for (const ArchSpec* s : arch_specs())
    for (const char* c : s->hf_classes) EXPECT_NE(msg.find(c), std::string::npos) << c;
  // Experts only where a spec has the Mixtral layout.
  GenModelShape q = *gen_model_arch_defaults("qwen2");
  q.n_layer = 1, q.n_embd = 64, q.n_ff = 64, q.n_head = 2, q.n_head_kv = 2, q.n_expert = 4, q.n_expert_used = 2;
  EXPECT_EQ(validate_gen_model_shape(q).message(),
            "experts are supported for llama, qwen2moe, qwen3moe, olmoe, gpt-oss only, not qwen2");
  // A MoE-only architecture needs experts.
  GenModelShape d = *gen_model_arch_defaults("qwen3moe");
  d.n_layer = 1, d.n_embd = 64, d.n_ff = 64, d.n_head = 2, d.n_head_kv = 2;
  EXPECT_EQ(validate_gen_model_shape(d).message(), "qwen3moe is a Mixture-of-Experts architecture: give n_expert");
}

TEST(ArchSpecTables, WellFormed) {
  for (const ArchSpec* s : arch_specs()) {
    SCOPED_TRACE(s->name);
    EXPECT_NE(s->fill, nullptr);
    EXPECT_NE(s->gguf_rope_type, nullptr);
    EXPECT_NE(s->chat_template, nullptr);
    EXPECT_FALSE(s->hf_classes.empty());
    EXPECT_FALSE(s->hf_model_types.empty());
    EXPECT_TRUE(s->requires_tensor(TensorRole::kTokenEmbd));
    EXPECT_TRUE(s->requires_tensor(TensorRole::kOutputNorm));
    std::set<TensorRole> roles;
    std::set<std::string> hf_names;
    for (const auto& [list, block] : {std::pair{s->model_tensors, false}, std::pair{s->block_tensors, true}}) {
      for (const TensorSpec& t : list) {
        const RoleInfo& r = role_info(t.role);
        EXPECT_EQ(r.role, t.role);
        EXPECT_EQ(r.scope == TensorScope::kBlock, block) << r.name;
        EXPECT_TRUE(roles.insert(t.role).second) << r.name << " listed twice";
        const char* hf = t.hf ? t.hf : r.hf;
        if (hf) {
          EXPECT_TRUE(hf_names.insert(hf).second) << hf << " maps twice";
        }
        if (t.presence == Presence::kUnbound) {
          EXPECT_EQ(t.gen, GenWhen::kExperts) << r.name;
        }
      }
    }
  }
}

TEST(ArchSpecTables, EveryTensorListBindsItsFixtures) {
  const auto fixtures = hf_fixtures();
  test::TempDir dir("archs");
  for (const ArchSpec* s : arch_specs()) {
    SCOPED_TRACE(s->name);
    auto it = fixtures.find(s->name);
    ASSERT_NE(it, fixtures.end()) << "no Hugging Face fixture in tests/data/model for " << s->name;
    for (const std::string& folder : it->second) check_tensor_list(*s, folder);
    check_tensor_list(*s, write_tiny(s->name, dir));
  }
}

TEST(ArchSpecTables, WiringFlagsFollowTheTensorList) {
  test::TempDir dir("archs");
  for (const ArchSpec* s : arch_specs()) {
    SCOPED_TRACE(s->name);
    auto f = open_ok(write_tiny(s->name, dir));
    ASSERT_TRUE(f);
    auto cfg = config_from_metadata(f->metadata);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    const std::string a = s->name;
    const bool gemma = a == "gemma3", olmo = a == "olmo2";
    EXPECT_EQ(cfg->qk_norm, gemma || a == "qwen3" || a == "qwen3moe" || a == "olmoe" || olmo);
    EXPECT_EQ(cfg->qk_norm_full, a == "olmoe" || olmo);
    EXPECT_EQ(cfg->has_moe(), a == "qwen2moe" || a == "qwen3moe" || a == "olmoe" || a == "gpt-oss");
    EXPECT_EQ(cfg->post_attn_norm, gemma || olmo);
    EXPECT_EQ(cfg->post_ffn_norm, gemma || olmo);
    EXPECT_EQ(cfg->attn_pre_norm, !olmo);
    EXPECT_EQ(cfg->ffn_pre_norm, !olmo);
    EXPECT_EQ(cfg->qk_norm, s->requires_tensor(TensorRole::kAttnQNorm));
    auto w = bind_weights(*f, &*cfg);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_EQ((*w)->layers[1].q_norm != nullptr, cfg->qk_norm);
    EXPECT_EQ((*w)->layers[1].post_ffn_norm != nullptr, cfg->post_ffn_norm);
    EXPECT_EQ((*w)->layers[1].attn_norm != nullptr, cfg->attn_pre_norm);
    if (s->find(TensorRole::kAttnQBias)) {
      EXPECT_NE((*w)->layers[1].q.bias, nullptr);  // optional, bound when present
    }
    if (s->find(TensorRole::kRopeFreqs)) {
      EXPECT_NE((*w)->rope_freqs, nullptr);
    }
    if (s->find(TensorRole::kRopeFactorsLong)) {
      EXPECT_NE((*w)->rope_factors_long, nullptr);
    }
    EXPECT_NE((*w)->output.weight, (*w)->tok_embd);  // untied
    // A fused matrix's parts are bound as views of its rows.
    EXPECT_NE((*w)->layers[1].q.weight, nullptr);
    if (!cfg->has_moe()) {
      EXPECT_NE((*w)->layers[1].gate.weight, nullptr);
      // Views: the fused matrices' row ranges (a MoE layer's experts are views too).
      EXPECT_EQ((*w)->views.empty(), !s->find(TensorRole::kAttnQkv));
    }
  }
}

TEST(ArchSpecTables, HuggingFaceTensorNames) {
  for (const ArchSpec* s : arch_specs()) {
    SCOPED_TRACE(s->name);
    for (const TensorSpec& t : s->block_tensors) {
      if (t.hf_alt) {
        EXPECT_EQ(hf_tensor_name_to_gguf(s->name, std::string("model.layers.17.") + t.hf_alt),
                  gguf_tensor_name(t, 17));
      }
      const char* hf = t.hf ? t.hf : role_info(t.role).hf;
      if (!hf) continue;
      std::string h = hf;
      if (const size_t e = h.find("{e}"); e != std::string::npos) {  // one expert's matrix
        EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.layers.17." + h.replace(e, 3, "5")),
                  gguf_expert_tensor_name(t.role, 17, 5));
        EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.layers.17." + std::string(hf).replace(e, 3, "05")), "");
        continue;
      }
      EXPECT_EQ(hf_tensor_name_to_gguf(s->name, std::string("model.layers.17.") + hf), gguf_tensor_name(t, 17));
    }
    EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.embed_tokens.weight"), "token_embd.weight");
    EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.norm.weight"), "output_norm.weight");
    EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "lm_head.weight"), "output.weight");
    EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.layers.3.self_attn.rotary_emb.inv_freq"), "");
    EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.layers.03.mlp.up_proj.weight"), "");
    EXPECT_EQ(hf_tensor_name_to_gguf(s->name, "model.layers.3.mlp.up_proj"), "");
  }
  // Gemma 3's post_attention_layernorm follows attention; Llama's is the FFN pre-norm.
  EXPECT_EQ(hf_tensor_name_to_gguf("gemma3", "model.layers.2.post_attention_layernorm.weight"),
            "blk.2.post_attention_norm.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("gemma3", "model.layers.2.pre_feedforward_layernorm.weight"),
            "blk.2.ffn_norm.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("llama", "model.layers.2.post_attention_layernorm.weight"),
            "blk.2.ffn_norm.weight");
  // gpt-oss's FFN pre-norm is "post_attention_norm" in llama.cpp's files.
  EXPECT_EQ(hf_tensor_name_to_gguf("gpt-oss", "model.layers.2.post_attention_layernorm.weight"),
            "blk.2.post_attention_norm.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("qwen2", "model.layers.2.self_attn.q_proj.bias"), "blk.2.attn_q.bias");
  EXPECT_EQ(hf_tensor_name_to_gguf("qwen3", "model.layers.0.self_attn.k_norm.weight"), "blk.0.attn_k_norm.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("llama", "model.layers.0.self_attn.k_norm.weight"), "");  // not in its list
  // Multimodal checkpoints.
  EXPECT_EQ(hf_tensor_name_to_gguf("gemma3", "model.language_model.layers.4.mlp.down_proj.weight"),
            "blk.4.ffn_down.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("gemma3", "language_model.model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("gemma3", "language_model.lm_head.weight"), "output.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("gemma3", "vision_tower.vision_model.embeddings.patch_embedding.weight"), "");
  EXPECT_EQ(hf_tensor_name_to_gguf("mamba", "model.embed_tokens.weight"), "");
  // Fused and post-norm names.
  EXPECT_EQ(hf_tensor_name_to_gguf("phi3", "model.layers.1.self_attn.qkv_proj.weight"), "blk.1.attn_qkv.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("phi3", "model.layers.1.mlp.gate_up_proj.weight"), "blk.1.ffn_up.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("phi3", "model.layers.1.self_attn.q_proj.weight"), "");
  EXPECT_EQ(hf_tensor_name_to_gguf("olmo2", "model.layers.1.post_feedforward_layernorm.weight"),
            "blk.1.post_ffw_norm.weight");
  EXPECT_EQ(hf_tensor_name_to_gguf("olmo2", "model.layers.1.input_layernorm.weight"), "");
}

TEST(ArchSpecTables, GgufNamesRoundTrip) {
  for (int i = 0; i < kNumTensorRoles; ++i) {
    const TensorRole r = static_cast<TensorRole>(i);
    const int il = role_info(r).scope == TensorScope::kBlock ? 12 : -1;
    int layer = -2;
    EXPECT_EQ(role_from_gguf_name(gguf_tensor_name(r, il), &layer), r) << role_info(r).name;
    EXPECT_EQ(layer, il);
  }
  EXPECT_EQ(role_from_gguf_name("blk.x.attn_q.weight", nullptr), TensorRole::kUnknown);
  EXPECT_EQ(role_from_gguf_name("blk.1.attn_norm.weight.extra", nullptr), TensorRole::kUnknown);
  EXPECT_EQ(role_from_gguf_name("attn_q.weight", nullptr), TensorRole::kUnknown);  // a block tensor outside a block
  EXPECT_EQ(role_from_gguf_name("blk.1.token_embd.weight", nullptr), TensorRole::kUnknown);
  // One expert's matrix.
  int layer = -1, expert = -1;
  EXPECT_EQ(gguf_expert_tensor_name(TensorRole::kFfnDownExps, 3, 41), "blk.3.ffn_down.41.weight");
  EXPECT_EQ(role_from_gguf_expert_name("blk.3.ffn_down.41.weight", &layer, &expert), TensorRole::kFfnDownExps);
  EXPECT_EQ(layer, 3);
  EXPECT_EQ(expert, 41);
  EXPECT_EQ(role_from_gguf_expert_name("blk.3.ffn_down.weight", nullptr, nullptr), TensorRole::kUnknown);
  EXPECT_EQ(role_from_gguf_expert_name("blk.3.ffn_down.x.weight", nullptr, nullptr), TensorRole::kUnknown);
  EXPECT_EQ(role_from_gguf_expert_name("blk.3.ffn_norm.1.weight", nullptr, nullptr), TensorRole::kUnknown);
}

TEST(ArchSpecTables, GgufDefaultRopeType) {
  test::TempDir dir("archs");
  for (const ArchSpec* s : arch_specs()) {
    GgufWriter w;
    w.add_string("general.architecture", s->name);
    const std::string path = (dir.path() / (std::string(s->name) + ".gguf")).string();
    ASSERT_TRUE(w.write(path).is_ok());
    auto f = open_ok(path);
    ASSERT_TRUE(f);
    const std::string* rt = f->metadata.get_string(std::string(s->name) + ".rope.type");
    ASSERT_NE(rt, nullptr);
    // llama.cpp's converter permutes Q/K rows of the LlamaModel families.
    const std::string a = s->name;
    EXPECT_EQ(*rt, a == "llama" || a == "mistral3" || a == "smollm3" ? "normal" : "neox") << s->name;
  }
}

}  // namespace
}  // namespace ember
