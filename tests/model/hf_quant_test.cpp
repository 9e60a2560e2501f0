// Hugging Face GPTQ / AWQ / compressed-tensors checkpoints (model/io/hf_quant.h):
//  - every unit case of tests/data/model/hf_quant (made by
//    tools/gen_hf_quant_fixtures.py, whose reference dequantization was checked
//    bit for bit against GPTQModel's, AutoAWQ's and compressed-tensors' own
//    dequantizers in float32) repacks into the expected block type, and
//    ember's scalar dequantization of the repacked rows equals the reference
//    bit for bit (FNV-1a of the f32 bits) and hf_quant_dequantize_ref;
//  - unsupported variants and inconsistent tensors are errors naming the field;
//  - tiny quantized Llama / Qwen2 folders load with the expected tensor types
//    and their logits match transformers (float32, same dequantized weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "logits_compare.h"
#include "model/io/hf_quant.h"
#include "model/io/model_file.h"
#include "model/model.h"
#include "quant/quantize.h"

namespace ember {
namespace {

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return f.good() ? nlohmann::json::parse(f) : nlohmann::json();
}

std::string fnv64(const float* x, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* b = reinterpret_cast<const uint8_t*>(x);
  for (size_t i = 0; i < 4 * n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  return fmt::format("{:016x}", h);
}

// The config.json text for one case's quantization_config.
std::string config_text(const nlohmann::json& qc) { return nlohmann::json{{"quantization_config", qc}}.dump(); }

Result<HfQuantConfig> parse(const nlohmann::json& qc) {
  Result<std::optional<HfQuantConfig>> r = parse_hf_quant_config(config_text(qc), "config.json");
  if (!r) return r.status();
  if (!r->has_value()) return Status::error("no quantization_config");
  return **r;
}

TEST(HfQuant, UnitCasesRepackExactly) {
  const nlohmann::json cases = read_json(kData + "hf_quant/cases.json");
  ASSERT_FALSE(cases.is_null());
  EXPECT_TRUE(cases["library_checked"].get<bool>()) << "fixtures were written without the library check";
  Result<SafetensorsSet> set = open_safetensors_files({kData + "hf_quant/cases.safetensors"});
  ASSERT_TRUE(set.is_ok()) << set.status().message();
  std::set<std::string> layouts;
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    Result<HfQuantConfig> cfg = parse(c["quantization_config"]);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    std::set<std::string> used;
    Result<HfQuantMatrix> m = unpack_hf_quant(*cfg, *set, c["prefix"], &used);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    ASSERT_EQ(m->n_out, c["n_out"].get<int64_t>());
    ASSERT_EQ(m->n_in, c["n_in"].get<int64_t>());
    DType want_layout;
    ASSERT_TRUE(dtype_from_name(c["layout"].get<std::string>(), &want_layout));
    EXPECT_EQ(hf_quant_layout(*m), want_layout) << dtype_name(hf_quant_layout(*m));
    std::vector<std::shared_ptr<void>> owners;
    const TensorView v = repack_hf_quant(*m, "w", &owners);
    ASSERT_EQ(v.ne[0], m->n_in);
    ASSERT_EQ(v.ne[1], m->n_out);
    ASSERT_EQ(v.nbytes, v.row_bytes() * static_cast<size_t>(m->n_out));
    const size_t n = static_cast<size_t>(m->n_out * m->n_in);
    std::vector<float> got(n), want(n);
    for (int64_t r = 0; r < m->n_out; ++r) dequantize_row_ref(v.type, v.row(r), got.data() + r * m->n_in, m->n_in);
    hf_quant_dequantize_ref(*m, want.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * n), 0) << "repacked != reference dequantization";
    EXPECT_EQ(fnv64(got.data(), n), c["ref_fnv64"].get<std::string>()) << "!= the libraries' dequantization";
    layouts.insert(c["layout"].get<std::string>());
  }
  // Every repack path is covered.
  EXPECT_EQ(layouts, (std::set<std::string>{"Q4_0", "Q4_1", "Q5_0", "Q8_0", "F32"}));
}

TEST(HfQuant, DenseFallbackIsF16WhenExact) {
  // Scattered groups with power-of-two scales: every w is an fp16 value.
  std::vector<uint8_t> q(128);
  std::vector<int32_t> g_idx(64);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i % 16);
  for (size_t i = 0; i < g_idx.size(); ++i) g_idx[i] = static_cast<int32_t>(i % 2);
  HfQuantMatrix m{.n_out = 2, .n_in = 64, .bits = 4, .n_groups = 2, .q = q, .zero = {8, 3, 8, 0},
                  .scale = {0.25f, 0.5f, 0.125f, 1.0f}, .g_idx = g_idx};
  EXPECT_EQ(hf_quant_layout(m), DType::kF16);
  std::vector<std::shared_ptr<void>> owners;
  const TensorView v = repack_hf_quant(m, "w", &owners);
  std::vector<float> got(128), want(128);
  for (int r = 0; r < 2; ++r) dequantize_row_ref(v.type, v.row(r), got.data() + r * 64, 64);
  hf_quant_dequantize_ref(m, want.data());
  EXPECT_EQ(got, want);
  m.scale[1] = 0.3f;  // 0.3 * 3 is no fp16 value: F32
  EXPECT_EQ(hf_quant_layout(m), DType::kF32);
}

TEST(HfQuant, UnsupportedConfigsNameTheField) {
  using nlohmann::json;
  const json gptq = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  const json awq = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemm"}};
  const json ct_w = {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 128}};
  auto ct = [&](json weights, json act = nullptr, std::string format = "pack-quantized") {
    return json{{"quant_method", "compressed-tensors"},
                {"format", format},
                {"config_groups", {{"group_0", {{"weights", weights}, {"input_activations", act}}}}}};
  };
  auto with = [](json j, const std::string& k, json v) {
    j[k] = v;
    return j;
  };
  const json dyn_act = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}};
  const struct {
    json qc;
    const char* message;
  } cases[] = {
      {with(gptq, "bits", 3), "quantization_config.bits = 3 is not supported for gptq (supported: 4, 8)"},
      {with(with(gptq, "bits", 8), "sym", false), "quantization_config.sym = false with bits = 8"},
      {with(gptq, "checkpoint_format", "marlin"), "quantization_config.checkpoint_format = 'marlin' is not supported"},
      {with(gptq, "group_size", 0), "quantization_config.group_size = 0 is not supported"},
      {with(gptq, "dynamic", {{"-:.*down.*", json::object()}}), "quantization_config.dynamic"},
      {with(gptq, "desc_act", "yes"), "quantization_config.desc_act must be true or false"},
      {with(awq, "version", "gemv"), "quantization_config.version = 'gemv' is not supported (supported: gemm)"},
      {with(awq, "bits", 8), "quantization_config.bits = 8 is not supported for awq"},
      {with(awq, "zero_point", false), "quantization_config.zero_point = false is not supported"},
      {with(ct(ct_w), "format", "float-quantized"), "quantization_config.format = 'float-quantized' is not supported"},
      {ct(with(ct_w, "type", "float")), "config_groups.group_0.weights.type = 'float' is not supported"},
      {ct(with(ct_w, "num_bits", 3)), "config_groups.group_0.weights.num_bits = 3 is not supported"},
      {ct(with(with(with(ct_w, "num_bits", 8), "symmetric", false), "strategy", "channel"), dyn_act, "int-quantized"),
       "weights.symmetric = false with num_bits = 8 (asymmetric 8-bit)"},
      {ct(with(ct_w, "strategy", "block")), "weights.strategy = 'block' is not supported"},
      {ct(with(with(ct_w, "num_bits", 8), "strategy", "channel"), with(dyn_act, "dynamic", false), "int-quantized"),
       "input_activations.dynamic = false (static activation scales)"},
      {with(ct(ct_w), "kv_cache_scheme", {{"num_bits", 8}}), "quantization_config.kv_cache_scheme"},
      {with(ct(ct_w), "quantization_status", "frozen"), "quantization_config.quantization_status = 'frozen'"},
      {{{"quant_method", "bitsandbytes"}}, "quantization_config.quant_method = 'bitsandbytes' is not supported"},
      {{{"bits", 4}}, "quantization_config.quant_method is missing"},
  };
  for (const auto& c : cases) {
    Result<HfQuantConfig> r = parse(c.qc);
    ASSERT_FALSE(r.is_ok()) << c.qc.dump();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("config.json: ", 0), 0u) << r.status().message();
  }
  Result<std::optional<HfQuantConfig>> none = parse_hf_quant_config("{\"hidden_size\": 8}", "config.json");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
}

TEST(HfQuant, InconsistentTensorsAreErrors) {
  const nlohmann::json cases = read_json(kData + "hf_quant/cases.json");
  Result<SafetensorsSet> set = open_safetensors_files({kData + "hf_quant/cases.safetensors"});
  ASSERT_TRUE(set.is_ok());
  std::set<std::string> used;
  // A 4-bit GPTQ linear read as 8-bit: the qzeros shape gives it away.
  nlohmann::json qc = cases["cases"][0]["quantization_config"];
  qc["bits"] = 8;
  Result<HfQuantMatrix> m = unpack_hf_quant(*parse(qc), *set, "gptq_v1_4b_g128_sym", &used);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("gptq_v1_4b_g128_sym.qzeros': shape [2, 4], expected [2, 8]"),
            std::string::npos)
      << m.status().message();
  // Group size that does not match the scales.
  qc["bits"] = 4;
  qc["group_size"] = 64;
  m = unpack_hf_quant(*parse(qc), *set, "gptq_v1_4b_perchannel_sym", &used);
  ASSERT_TRUE(m.is_ok());  // g_idx given: it decides
  m = unpack_hf_quant(*parse(qc), *set, "missing", &used);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("tensor 'missing.qweight' is missing"), std::string::npos);
  // An AWQ config on GPTQ tensors fails the AWQ layout checks.
  m = unpack_hf_quant(*parse({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}}), *set,
                      "gptq_v1_4b_g128_sym", &used);
  ASSERT_FALSE(m.is_ok());
}

// A copy of a fixture folder with another config.json.
std::string folder_with_config(const std::string& src, const nlohmann::json& config) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / ("hfq_" + std::to_string(std::hash<std::string>()(config.dump())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kData + src + "/model.safetensors", dir / "model.safetensors");
  std::ofstream(dir / "config.json") << config.dump();
  return dir.string();
}

TEST(HfQuant, LoaderErrors) {
  nlohmann::json cfg = read_json(kData + "hf_quant_gptq/config.json");
  cfg.erase("quantization_config");
  auto f = open_model_file(folder_with_config("hf_quant_gptq", cfg));
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("is a quantized qweight (GPTQ / AWQ) but config.json has no quantization_config"),
            std::string::npos)
      << f.status().message();
  cfg["quantization_config"] = read_json(kData + "hf_quant_ct_w4a16/config.json")["quantization_config"];
  f = open_model_file(folder_with_config("hf_quant_gptq", cfg));
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("does not match quantization_config (compressed-tensors"), std::string::npos)
      << f.status().message();
}

void check_model(const std::string& name, DType want_type) {
  SCOPED_TRACE(name);
  auto file = open_model_file(kData + name);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  for (const char* t : {"blk.0.attn_q.weight", "blk.1.attn_k.weight", "blk.0.ffn_down.weight", "blk.1.ffn_up.weight"})
    EXPECT_EQ((*file)->tensor(t)->type, want_type) << t;
  ASSERT_NE((*file)->metadata.get_string("ember.hf.quantization"), nullptr);
  auto model = Model::from_file(std::move(file.value()));
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const Model& m = **model;
  const nlohmann::json ref = read_json(kData + "hf_quant_reference.json")[name];
  ASSERT_FALSE(ref.is_null());
  ASSERT_EQ(m.config().n_vocab, ref["vocab"].get<int>());
  ThreadPool pool(2);
  for (const auto& c : ref["cases"]) {
    const std::vector<float> all = prefill_logits(m, pool, c["tokens"].get<std::vector<int32_t>>(), 8);
    ASSERT_FALSE(all.empty());
    const int64_t n = static_cast<int64_t>(c["tokens"].size());
    const int V = m.config().n_vocab;
    const bool dense = want_type == DType::kF32;
    const LogitsComparison cmp = compare_logits(all.data(), c["logits"], V);
    int checked = 0;
    for (int64_t t = 0; t < n; ++t) {
      // Block types: ember's int8 activation quantization moves logits by
      // ~1e-2, so near-ties of the random model (margin < 0.05) may flip.
      if (!dense && cmp.want_margin[t] < 0.05) continue;
      ++checked;
      EXPECT_EQ(cmp.top1[t], cmp.want_top1[t]) << "top-1 at position " << t;
    }
    EXPECT_GE(checked, n - 3);
    // Dense (F32) weights: float rounding only; block types: ember's int8
    // activation quantization (per 32-element block) on top.
    const double rel = cmp.rel_l2;
    EXPECT_LT(rel, dense ? 1e-5 : 1e-2) << n << " tokens";
    std::printf("%s, %lld tokens: relative L2 error of the logits %.2e\n", name.c_str(), static_cast<long long>(n), rel);
  }
}

TEST(HfQuant, GptqModelMatchesTransformers) { check_model("hf_quant_gptq", DType::kQ5_0); }
TEST(HfQuant, GptqActOrderModelMatchesTransformers) { check_model("hf_quant_gptq_actorder", DType::kF32); }
TEST(HfQuant, AwqModelMatchesTransformers) { check_model("hf_quant_awq", DType::kQ5_0); }
TEST(HfQuant, CompressedTensorsW4A16MatchesTransformers) { check_model("hf_quant_ct_w4a16", DType::kQ4_0); }
TEST(HfQuant, CompressedTensorsW8A8MatchesTransformers) { check_model("hf_quant_ct_w8a8", DType::kQ8_0); }

}  // namespace
}  // namespace ember
