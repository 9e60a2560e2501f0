// open_model_file tests: GGUF pass-through and the Hugging Face translation
// (config.json -> GGUF keys, tensor names, Gemma norm +1, llama3 rope_freqs)
// against expected.json written by tools/gen_format_fixtures.py from
// transformers' config objects and gguf-py's tensor name map.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/fp16.h"
#include "format_test_util.h"
#include "model/io/gguf.h"
#include "model/io/model_file.h"
#include "model/io/safetensors.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model";
const char* kDefaultModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";

json load_expected(const std::string& folder) {
  return json::parse(test::read_file(kData + "/" + folder + "/expected.json"));
}

double value_at(const TensorView& v, int64_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(v.data);
  if (v.type == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return v.type == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
}

void check_metadata(const Metadata& m, const json& exp) {
  for (auto it = exp.begin(); it != exp.end(); ++it) {
    const std::string& key = it.key();
    SCOPED_TRACE(key);
    ASSERT_NE(m.find(key), nullptr) << "missing key " << key;
    if (it->is_string()) {
      ASSERT_NE(m.get_string(key), nullptr);
      EXPECT_EQ(*m.get_string(key), it->get<std::string>());
    } else if (it->is_number_integer()) {
      EXPECT_EQ(m.get_int(key), it->get<int64_t>());
    } else {
      ASSERT_TRUE(m.get_float(key).has_value());
      const double want = it->get<double>();
      EXPECT_NEAR(*m.get_float(key), want, std::fabs(want) * 1e-6);
    }
  }
}

void check_tensors(const ModelFile& mf, const json& exp, std::vector<std::string> extra = {}) {
  size_t n_expected = exp.size() + extra.size();
  EXPECT_EQ(mf.tensors.size(), n_expected);
  for (const std::string& e : extra) EXPECT_NE(mf.tensor(e), nullptr) << e;
  for (auto it = exp.begin(); it != exp.end(); ++it) {
    SCOPED_TRACE(it.key());
    const TensorView* v = mf.tensor(it.key());
    ASSERT_NE(v, nullptr) << "missing tensor " << it.key();
    EXPECT_EQ(v->name, it.key());
    EXPECT_EQ(dtype_name(v->type), (*it)["dtype"].get<std::string>());
    const auto ne = (*it)["ne"].get<std::vector<int64_t>>();
    ASSERT_EQ(v->n_dims, static_cast<int>(ne.size()));
    for (size_t d = 0; d < ne.size(); ++d) EXPECT_EQ(v->ne[d], ne[d]);
    ASSERT_EQ(v->nbytes, dtype_row_size(v->type, v->ne[0]) * static_cast<size_t>(v->nrows()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % dtype_type_size(v->type), 0u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(value_at(*v, i), (*it)["first"][i].get<double>()) << i;
    double sum = 0, abs_sum = 0;
    for (int64_t i = 0; i < v->nelements(); ++i) {
      sum += value_at(*v, i);
      abs_sum += std::fabs(value_at(*v, i));
    }
    EXPECT_NEAR(sum, (*it)["sum"].get<double>(), 1e-9 * (1 + abs_sum));
    EXPECT_NEAR(abs_sum, (*it)["abs_sum"].get<double>(), 1e-9 * (1 + abs_sum));
  }
}

std::unique_ptr<ModelFile> open_ok(const std::string& path) {
  auto r = open_model_file(path);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r.value()) : nullptr;
}

std::string open_error(const std::string& path) {
  auto r = open_model_file(path);
  return r.is_ok() ? std::string("(no error)") : r.status().message();
}

// --------------------------------------------------------------------------
// Hugging Face fixtures

TEST(ModelFileHf, LlamaSharded) {
  auto mf = open_ok(kData + "/hf_llama_sharded");
  ASSERT_TRUE(mf);
  const json exp = load_expected("hf_llama_sharded");
  EXPECT_EQ(mf->format, "safetensors");
  EXPECT_EQ(*mf->architecture(), "llama");
  check_metadata(mf->metadata, exp["metadata"]);
  check_tensors(*mf, exp["tensors"], {"rope_freqs.weight"});
  EXPECT_EQ(*mf->metadata.get_string("ember.hf.dir"), fs::absolute(kData + "/hf_llama_sharded").lexically_normal().string());
  EXPECT_EQ(*mf->metadata.get_string("general.name"), "hf_llama_sharded");
  // Llama 3.1 frequency divisors, as llama.cpp's converter computes them.
  const TensorView* rf = mf->tensor("rope_freqs.weight");
  ASSERT_TRUE(rf);
  const auto want = exp["rope_freqs"].get<std::vector<double>>();
  ASSERT_EQ(rf->ne[0], static_cast<int64_t>(want.size()));
  EXPECT_EQ(rf->type, DType::kF32);
  bool some_scaled = false, some_kept = false;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(value_at(*rf, static_cast<int64_t>(i)), want[i], 1e-5 * want[i]) << i;
    some_scaled |= want[i] == 8.0;
    some_kept |= want[i] == 1.0;
  }
  EXPECT_TRUE(some_scaled && some_kept);  // the fixture exercises every branch
}

TEST(ModelFileHf, Qwen2TiedBf16WithBiases) {
  auto mf = open_ok(kData + "/hf_qwen2");
  ASSERT_TRUE(mf);
  const json exp = load_expected("hf_qwen2");
  EXPECT_EQ(*mf->architecture(), "qwen2");
  check_metadata(mf->metadata, exp["metadata"]);
  check_tensors(*mf, exp["tensors"]);
  EXPECT_EQ(mf->tensor("output.weight"), nullptr);  // tied
  ASSERT_NE(mf->tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(mf->tensor("blk.0.attn_q.bias")->type, DType::kF32);
  EXPECT_EQ(mf->tensor("blk.0.attn_q.weight")->type, DType::kBF16);
  EXPECT_EQ(mf->metadata.find("qwen2.rope.scaling.type"), nullptr);
}

TEST(ModelFileHf, Qwen3QkNormHeadDim) {
  auto mf = open_ok(kData + "/hf_qwen3");
  ASSERT_TRUE(mf);
  const json exp = load_expected("hf_qwen3");
  EXPECT_EQ(*mf->architecture(), "qwen3");
  check_metadata(mf->metadata, exp["metadata"]);
  check_tensors(*mf, exp["tensors"]);
  EXPECT_NE(mf->tensor("output.weight"), nullptr);  // untied
  EXPECT_EQ(mf->tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(*mf->metadata.get_int("qwen3.attention.key_length"), 16);  // not hidden_size / heads = 8
  // QK-norm weights are used as stored (no Gemma-style +1).
  auto st = SafetensorsFile::open(kData + "/hf_qwen3/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  const SafetensorsTensor* raw = st.value()->find("model.layers.1.self_attn.k_norm.weight");
  ASSERT_TRUE(raw);
  const TensorView* v = mf->tensor("blk.1.attn_k_norm.weight");
  ASSERT_TRUE(v);
  for (int i = 0; i < 16; ++i) {
    uint16_t h;
    std::memcpy(&h, raw->data + 2 * i, 2);
    EXPECT_EQ(value_at(*v, i), bf16_to_f32(h));
  }
}

TEST(ModelFileHf, Gemma3NormsPlusOne) {
  auto mf = open_ok(kData + "/hf_gemma3");
  ASSERT_TRUE(mf);
  const json exp = load_expected("hf_gemma3");
  EXPECT_EQ(*mf->architecture(), "gemma3");
  check_metadata(mf->metadata, exp["metadata"]);
  check_tensors(*mf, exp["tensors"]);
  // The +1 is really applied: compare with the raw file.
  auto st = SafetensorsFile::open(kData + "/hf_gemma3/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  const SafetensorsTensor* raw = st.value()->find("model.layers.0.self_attn.q_norm.weight");
  ASSERT_TRUE(raw);
  const TensorView* v = mf->tensor("blk.0.attn_q_norm.weight");
  ASSERT_TRUE(v);
  for (int i = 0; i < 16; ++i) {
    uint16_t h;
    std::memcpy(&h, raw->data + 2 * i, 2);
    EXPECT_EQ(value_at(*v, i), bf16_to_f32(h) + 1.0f);
  }
  EXPECT_NE(mf->tensor("blk.2.post_attention_norm.weight"), nullptr);
  EXPECT_NE(mf->tensor("blk.2.post_ffw_norm.weight"), nullptr);
  EXPECT_EQ(mf->tensor("blk.2.ffn_norm.weight")->type, DType::kF32);
}

TEST(ModelFileHf, OtherEntryPaths) {
  auto a = open_ok(kData + "/hf_qwen2/config.json");
  auto b = open_ok(kData + "/hf_qwen2/model.safetensors");
  auto c = open_ok(kData + "/hf_llama_sharded/model.safetensors.index.json");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->tensors.size(), load_expected("hf_qwen2")["tensors"].size());
  EXPECT_EQ(b->tensors.size(), a->tensors.size());
  EXPECT_EQ(b->path, kData + "/hf_qwen2/model.safetensors");
  // One shard alone lacks lm_head (in the other shard).
  EXPECT_NE(open_error(kData + "/hf_llama_sharded/model-00001-of-00002.safetensors")
                .find("lm_head.weight is missing and tie_word_embeddings is false"),
            std::string::npos);
}

// A folder with the gemma3 fixture's weights and a given config.
std::string copy_gemma_with_config(const test::TempDir& dir, const std::string& config) {
  fs::copy_file(kData + "/hf_gemma3/model.safetensors", dir.path() / "model.safetensors");
  test::write_file(dir.path() / "config.json", config);
  return dir.str();
}

TEST(ModelFileHf, Gemma3LegacyConfigLayout) {
  // The layout of released Gemma 3 checkpoints (rope_theta, rope_scaling,
  // rope_local_base_freq, sliding_window_pattern; no layer_types).
  test::TempDir dir("mf");
  const std::string cfg = R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 16, "sliding_window_pattern": 2, "query_pre_attn_scalar": 16,
    "vocab_size": 64, "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
    "final_logit_softcapping": null, "attn_logit_softcapping": null})";
  auto mf = open_ok(copy_gemma_with_config(dir, cfg));
  ASSERT_TRUE(mf);
  const json exp = load_expected("hf_gemma3");
  check_metadata(mf->metadata, exp["metadata"]);
  check_tensors(*mf, exp["tensors"]);
  EXPECT_EQ(mf->metadata.find("gemma3.final_logit_softcapping"), nullptr);
}

TEST(ModelFileHf, Gemma3MultimodalCheckpoint) {
  // Gemma3ForConditionalGeneration: text_config nests the text model's
  // settings (others default), weights carry a language_model prefix, and
  // vision tensors are skipped.
  test::TempDir dir("mf");
  auto st = SafetensorsFile::open(kData + "/hf_gemma3/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  std::vector<test::StTensor> tensors;
  for (const SafetensorsTensor& t : st.value()->tensors()) {
    ASSERT_EQ(t.name.rfind("model.", 0), 0u);
    const std::string rest = t.name.substr(6);  // both layouts seen in released checkpoints
    const std::string name = (tensors.size() % 2 ? "language_model.model." : "model.language_model.") + rest;
    tensors.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  tensors.push_back({"vision_tower.vision_model.embeddings.patch_embedding.weight", "F32", {2, 3, 1, 1},
                     std::vector<uint8_t>(24)});
  tensors.push_back({"multi_modal_projector.mm_input_projection_weight", "BF16", {2, 2}, std::vector<uint8_t>(8)});
  test::write_file(dir.path() / "model.safetensors", test::make_safetensors(tensors));
  test::write_file(dir.path() / "config.json", std::string(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"model_type": "gemma3_text", "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
      "max_position_embeddings": 512, "sliding_window": 16, "query_pre_attn_scalar": 16, "vocab_size": 64,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 2},
    "vision_config": {"hidden_size": 1152}, "eos_token_id": [1, 106], "bos_token_id": 2, "pad_token_id": 0})"));
  auto mf = open_ok(dir.str());
  ASSERT_TRUE(mf);
  const json exp = load_expected("hf_gemma3");
  check_metadata(mf->metadata, exp["metadata"]);
  check_tensors(*mf, exp["tensors"]);
}

TEST(ModelFileHf, MistralIsLlama) {
  test::TempDir dir("mf");
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json"})
    fs::copy_file(kData + "/hf_llama_sharded/" + f, dir.path() / f);
  test::write_file(dir.path() / "config.json", std::string(R"({
    "architectures": ["MistralForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
    "tie_word_embeddings": false})"));
  auto mf = open_ok(dir.str());
  ASSERT_TRUE(mf);
  EXPECT_EQ(*mf->architecture(), "llama");
  EXPECT_EQ(mf->metadata.get_float("llama.rope.freq_base"), 1e6);
  EXPECT_EQ(mf->metadata.get_int("llama.attention.key_length"), 8);
  EXPECT_EQ(*mf->metadata.get_string("llama.rope.type"), "neox");
  EXPECT_EQ(mf->tensor("rope_freqs.weight"), nullptr);
  EXPECT_NE(mf->tensor("output.weight"), nullptr);
  EXPECT_EQ(mf->tensors.size(), load_expected("hf_llama_sharded")["tensors"].size());
}

TEST(ModelFileHf, ConfigErrors) {
  test::TempDir dir("mf");
  const std::string base = R"("hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64, "max_position_embeddings": 512)";
  auto err = [&](const std::string& cfg) {
    test::TempDir d("mf_err");
    return open_error(copy_gemma_with_config(d, cfg));
  };
  auto has = [](const std::string& msg, const std::string& want) {
    return msg.find(want) != std::string::npos ? ::testing::AssertionSuccess()
                                               : ::testing::AssertionFailure() << "message: " << msg;
  };
  EXPECT_TRUE(has(err(R"({"architectures": ["GPT2LMHeadModel"]})"), "unsupported architecture 'GPT2LMHeadModel'"));
  EXPECT_TRUE(has(err(R"({"model_type": "bert"})"), "unsupported architecture 'bert'"));
  EXPECT_TRUE(has(err("{nope"), "config.json: invalid JSON"));
  EXPECT_TRUE(has(err("[]"), "config.json: not a JSON object"));
  EXPECT_TRUE(has(err(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32})"), "missing 'num_hidden_layers'"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": "3", )" + base + "}"),
                  "'num_hidden_layers' must be an integer"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": -3, )" + base + "}"),
                  "'num_hidden_layers' = -3 is out of range"));
  // Weights for layer 2 but a 2-layer config.
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 2, "sliding_window_pattern": 2, )" +
                      base + "}"),
                  "belongs to layer 2 but the config has 2 layers"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "tie_word_embeddings": false, )" +
                      base + "}"),
                  "lm_head.weight is missing and tie_word_embeddings is false"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, )" +
                      base + "}"),
                  "unsupported rope scaling type 'dynamic'"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "rope_scaling": {"rope_type": "linear"}, )" +
                      base + "}"),
                  "missing 'rope scaling factor'"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "layer_types": ["full_attention", "sliding_attention", "full_attention"], )" +
                      base + "}"),
                  "layer_types does not follow a fixed sliding-window pattern"));
  EXPECT_TRUE(has(err(R"({"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 64,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64})"),
                  "but hidden_size is 48"));
  EXPECT_TRUE(has(err(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 3, "hidden_size": 30, "intermediate_size": 64,
                     "num_attention_heads": 4, "vocab_size": 64})"),
                  "hidden_size 30 is not a multiple of num_attention_heads 4"));
  EXPECT_TRUE(has(err(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 3, "hidden_size": 32, "intermediate_size": 64,
                     "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 64})"),
                  "num_attention_heads 4 is not a multiple of num_key_value_heads 3"));

  // No config.json / nothing at all / not a model file.
  EXPECT_TRUE(has(open_error(dir.str()), "config.json not found"));
  EXPECT_TRUE(has(open_error(dir.str() + "/missing"), "no such file or directory"));
  test::write_file(dir.path() / "notes.txt", std::string("hello"));
  EXPECT_TRUE(has(open_error((dir.path() / "notes.txt").string()), "not a GGUF file, a .safetensors file or a model folder"));
  test::write_file(dir.path() / "bad.gguf", std::string("GGUF\x01\0\0\0", 8));
  EXPECT_TRUE(has(open_error((dir.path() / "bad.gguf").string()), "GGUF version 1 is not supported"));
}

TEST(ModelFileHf, UnsupportedDtypeInMappedTensor) {
  test::TempDir dir("mf");
  auto st = SafetensorsFile::open(kData + "/hf_gemma3/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  std::vector<test::StTensor> tensors;
  for (const SafetensorsTensor& t : st.value()->tensors()) {
    std::string dtype = t.name == "model.norm.weight" ? "I32" : t.dtype;  // same byte size as F32
    tensors.push_back({t.name, dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "I64", {1}, std::vector<uint8_t>(8)});
  test::write_file(dir.path() / "model.safetensors", test::make_safetensors(tensors));
  fs::copy_file(kData + "/hf_gemma3/config.json", dir.path() / "config.json");
  const std::string msg = open_error(dir.str());
  EXPECT_NE(msg.find("tensor 'model.norm.weight': dtype I32 is not supported (only F32, F16 and BF16)"),
            std::string::npos)
      << msg;
}

TEST(ModelFileHf, MisalignedMatrixIsCopied) {
  // A 1-element F16 tensor first pushes the next F32 matrix to an offset that
  // is not a multiple of 4.
  test::TempDir dir("mf");
  auto st = SafetensorsFile::open(kData + "/hf_gemma3/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  std::vector<test::StTensor> tensors;
  tensors.push_back({"aaa.odd", "F16", {1}, std::vector<uint8_t>(2)});
  for (const SafetensorsTensor& t : st.value()->tensors()) {
    tensors.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    if (t.name == "model.embed_tokens.weight") {  // as F32
      std::vector<uint8_t> f(t.nbytes * 2);
      for (size_t i = 0; i < t.nbytes / 2; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        const float x = bf16_to_f32(h);
        std::memcpy(&f[4 * i], &x, 4);
      }
      tensors.back() = {t.name, "F32", t.shape, f};
    }
  }
  test::write_file(dir.path() / "model.safetensors", test::make_safetensors(tensors));
  fs::copy_file(kData + "/hf_gemma3/config.json", dir.path() / "config.json");
  auto mf = open_ok(dir.str());
  ASSERT_TRUE(mf);
  const TensorView* e = mf->tensor("token_embd.weight");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, DType::kF32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e->data) % 4, 0u);
  const json exp = load_expected("hf_gemma3")["tensors"]["token_embd.weight"];
  for (int i = 0; i < 4; ++i) EXPECT_EQ(value_at(*e, i), exp["first"][i].get<double>());
}

// --------------------------------------------------------------------------
// GGUF

TEST(ModelFileGguf, RopeTypeDefaultsAndPassThrough) {
  test::TempDir dir("mf");
  std::vector<float> w(32, 0.5f);
  GgufWriter a;
  a.add_string("general.architecture", "llama");
  ASSERT_TRUE(a.add_tensor("token_embd.weight", DType::kF32, {8, 4}, w.data(), w.size() * 4).is_ok());
  ASSERT_TRUE(a.write((dir.path() / "a.gguf").string()).is_ok());
  auto mf = open_ok((dir.path() / "a.gguf").string());
  ASSERT_TRUE(mf);
  EXPECT_EQ(mf->format, "gguf");
  EXPECT_EQ(*mf->metadata.get_string("llama.rope.type"), "normal");
  ASSERT_NE(mf->tensor("token_embd.weight"), nullptr);
  EXPECT_EQ(static_cast<const float*>(mf->tensor("token_embd.weight")->data)[31], 0.5f);

  GgufWriter b;
  b.add_string("general.architecture", "llama");
  b.add_string("llama.rope.type", "neox");
  ASSERT_TRUE(b.write((dir.path() / "b.weird").string()).is_ok());  // detected by magic, not extension
  auto mb = open_ok((dir.path() / "b.weird").string());
  ASSERT_TRUE(mb);
  EXPECT_EQ(*mb->metadata.get_string("llama.rope.type"), "neox");
}

TEST(ModelFileGguf, DefaultModel) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "no " << kDefaultModel;
  auto mf = open_ok(kDefaultModel);
  ASSERT_TRUE(mf);
  EXPECT_EQ(mf->format, "gguf");
  EXPECT_EQ(*mf->architecture(), "gemma3");
  EXPECT_EQ(mf->tensors.size(), 236u);
  EXPECT_EQ(*mf->metadata.get_string("gemma3.rope.type"), "neox");
  EXPECT_EQ(mf->metadata.get_int("gemma3.block_count"), 18);
  const TensorView* t = mf->tensor("blk.17.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape_string(), "[2048, 640]");
}

}  // namespace
}  // namespace ember
