// Test helpers for the architectures of issue 41 (arch_<name>_test.cpp):
// their fixtures come from tools/gen_hf_arch_fixtures.py:
//   tests/data/model/hf_<name>/            tiny random-weight HF folder saved by
//                                          transformers (BF16) + tokenizer.model
//   hf_<name>/reference.{json,bin}         transformers' float32 logits rows and
//                                          greedy continuations
//   gguf_<name>.gguf                       llama.cpp's convert_hf_to_gguf.py (F32)
//   gguf_<name>.reference.{json,bin}       llama.cpp's logits and greedy at its
//                                          context sizes
// A reference case: tokens, n_ctx (the context the model runs with; Phi-3's
// LongRoPE factors follow it), greedy, offset (its first logits row in the
// .bin, rows of vocab floats) and rows (the positions recorded; absent: all).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_free_greedy.h"
#include "format_test_util.h"
#include "model/model.h"
#include "transform/convert.h"
#include "transform/gen_model.h"

namespace ember::archtest {

inline const std::string kData = EMBER_SOURCE_DIR "/tests/data/model/";

struct Reference {
  nlohmann::json cases;
  std::vector<float> rows;  // [row][vocab]
  int vocab = 0;
};

// stem.json + stem.bin; empty when absent.
inline Reference load_reference(const std::string& stem) {
  Reference r;
  std::ifstream j(stem + ".json");
  if (!j.good()) return r;
  const nlohmann::json all = nlohmann::json::parse(j);
  r.cases = all["cases"];
  r.vocab = all["vocab"].get<int>();
  std::ifstream b(stem + ".bin", std::ios::binary | std::ios::ate);
  r.rows.resize(static_cast<size_t>(b.tellg()) / 4);
  b.seekg(0);
  b.read(reinterpret_cast<char*>(r.rows.data()), static_cast<std::streamsize>(r.rows.size() * 4));
  return r;
}

inline std::unique_ptr<Model> load(const std::string& path) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.is_ok()) << path << ": " << m.status().message();
  return m.is_ok() ? std::move(m.value()) : nullptr;
}

// Every case of `ref` through `m` at the case's context length, prefilled in
// batches of 16 (chunked): the recorded rows within `tol` relative L2 (the
// measured value is printed), the same top-1 at each, the same greedy
// continuation.
inline void check_cases(Model& m, const Reference& ref, const std::string& what, double tol) {
  ASSERT_GT(ref.cases.size(), 0u) << what << ": no reference";
  const int V = m.config().n_vocab;
  ASSERT_EQ(V, ref.vocab);
  ThreadPool pool(2);
  for (const auto& c : ref.cases) {
    const std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(toks.size());
    std::vector<int64_t> rows;
    if (c.contains("rows")) {
      rows = c["rows"].get<std::vector<int64_t>>();
    } else {
      for (int64_t t = 0; t < n; ++t) rows.push_back(t);
    }
    const int64_t n_ctx = c["n_ctx"].get<int64_t>();
    m.set_context_length(n_ctx);
    ForwardContext ctx(m, pool, 16);
    ContiguousKvCache cache(m.config(), n + 16);
    std::vector<float> all(n * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());
    const float* want = ref.rows.data() + c["offset"].get<size_t>() * V;
    double err2 = 0, ref2 = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* got = all.data() + rows[r] * V;
      const float* w = want + r * V;
      int best = 0, want_best = 0;
      for (int j = 0; j < V; ++j) {
        err2 += (got[j] - static_cast<double>(w[j])) * (got[j] - static_cast<double>(w[j]));
        ref2 += static_cast<double>(w[j]) * w[j];
        if (got[j] > got[best]) best = j;
        if (w[j] > w[want_best]) want_best = j;
      }
      EXPECT_EQ(best, want_best) << what << ": top-1 at position " << rows[r] << " of " << n;
    }
    const double rel = std::sqrt(err2 / ref2);
    std::printf("%s: %lld tokens, context %lld: relative L2 %.2e\n", what.c_str(), static_cast<long long>(n),
                static_cast<long long>(n_ctx), rel);
    EXPECT_LT(rel, tol) << what << ": relative L2 error, " << n << " tokens, context " << n_ctx;
    const std::vector<int32_t> greedy = c["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy_continue(ctx, cache, all.data() + (n - 1) * V, V, n, static_cast<int>(greedy.size())), greedy)
        << what << ": greedy continuation of " << n << " tokens, context " << n_ctx;
  }
}

// The HF folder against transformers (rel. L2 < 1e-4, the criterion).
inline void check_hf(const std::string& name) {
  auto m = load(kData + "hf_" + name);
  ASSERT_TRUE(m);
  check_cases(*m, load_reference(kData + "hf_" + name + "/reference"), "hf_" + name, 1e-4);
}

// llama.cpp's conversion against llama.cpp (both F32: rel. L2 < 1e-4).
inline void check_gguf(const std::string& name) {
  auto m = load(kData + "gguf_" + name + ".gguf");
  ASSERT_TRUE(m);
  check_cases(*m, load_reference(kData + "gguf_" + name + ".reference"), "gguf_" + name, 1e-4);
}

// Logits [n, V] of `toks` from a fresh cache at context length n_ctx.
inline std::vector<float> logits_of(Model& m, const std::vector<int32_t>& toks, int64_t n_ctx) {
  ThreadPool pool(2);
  m.set_context_length(n_ctx);
  const int64_t n = static_cast<int64_t>(toks.size());
  std::vector<float> out(n * m.config().n_vocab);
  ForwardContext ctx(m, pool, 64);
  ContiguousKvCache cache(m.config(), n);
  EXPECT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, out.data()).is_ok());
  return out;
}

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) err2 += (a[i] - b[i]) * (a[i] - b[i]), ref2 += a[i] * a[i];
  return std::sqrt(err2 / ref2);
}

// The reference's second case's tokens (40 of them).
inline std::vector<int32_t> fixture_tokens(const std::string& name) {
  const Reference ref = load_reference(kData + "hf_" + name + "/reference");
  EXPECT_GT(ref.cases.size(), 1u);
  return ref.cases.size() > 1 ? ref.cases[1]["tokens"].get<std::vector<int32_t>>() : std::vector<int32_t>{1, 2, 3};
}

// The HF folder, llama.cpp's conversion of it (first `n_gguf` positions:
// all when 0) and `ember quantize`'s F32 conversion of it (Q/K rows permuted
// for the interleaved-RoPE files, factors and ember keys carried) compute the
// same function, at a short and a long context.
inline void check_formats(const std::string& name, int64_t n_gguf = 0) {
  std::vector<int32_t> toks = fixture_tokens(name);
  auto hf = load(kData + "hf_" + name);
  ASSERT_TRUE(hf);
  auto file = open_model_file(kData + "hf_" + name);
  ASSERT_TRUE(file.is_ok());
  ThreadPool pool(2);
  ConvertOptions o;
  o.type = DType::kF32;
  auto conv = convert_model(std::move(file.value()), o, pool);
  ASSERT_TRUE(conv.is_ok()) << name << ": " << conv.status().message();
  auto ours = Model::from_file(std::move(conv.value()));
  ASSERT_TRUE(ours.is_ok()) << name << ": " << ours.status().message();
  for (int64_t n_ctx : {64, 1024}) {
    const double d = rel_l2(logits_of(*hf, toks, n_ctx), logits_of(**ours, toks, n_ctx));
    std::printf("%s: HF folder vs ember's conversion, context %lld: relative L2 %.2e\n", name.c_str(),
                static_cast<long long>(n_ctx), d);
    EXPECT_LT(d, 1e-5) << name << " " << n_ctx;
  }
  if (!std::ifstream(kData + "gguf_" + name + ".gguf").good()) return;  // llama.cpp does not convert it
  auto theirs = load(kData + "gguf_" + name + ".gguf");
  ASSERT_TRUE(theirs);
  if (n_gguf > 0) toks.resize(static_cast<size_t>(n_gguf));
  const double d = rel_l2(logits_of(*hf, toks, 64), logits_of(*theirs, toks, 64));
  std::printf("%s: HF folder vs llama.cpp's conversion: relative L2 %.2e\n", name.c_str(), d);
  EXPECT_LT(d, 1e-5) << name;
}

// A tiny `ember gen-model` file of `arch` (after `adjust`) in F32 and Q8_0
// loads, passes `check` and gives finite, varied logits.
inline void check_gen_model(const std::string& arch, const std::function<void(GenModelShape&)>& adjust,
                            const std::function<void(const Model&)>& check) {
  test::TempDir dir("gen_" + arch);
  ThreadPool pool(2);
  auto d = gen_model_arch_defaults(arch);
  ASSERT_TRUE(d.is_ok()) << arch;
  GenModelShape s = *d;
  s.n_layer = 4, s.n_embd = 64, s.n_ff = 96, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 1024;
  adjust(s);
  for (DType t : {DType::kF32, DType::kQ8_0}) {
    const std::string path = (dir.path() / (std::string(dtype_name(t)) + ".gguf")).string();
    GenModelOptions o;
    o.type = t;
    o.weight_std = 0.1f;
    auto st = write_random_model(s, o, path, pool);
    ASSERT_TRUE(st.is_ok()) << arch << ": " << st.status().message();
    auto m = load(path);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->config().arch, arch);
    check(*m);
    const std::vector<float> l = logits_of(*m, {1, 5, 9, 200, 7, 3, 250, 11}, s.n_ctx);
    float lo = l[0], hi = l[0];
    for (float x : l) {
      ASSERT_TRUE(std::isfinite(x)) << arch;
      lo = std::min(lo, x), hi = std::max(hi, x);
    }
    EXPECT_GT(hi - lo, 1e-3) << arch;
  }
}

// The load error of the file at `path` after `edit`, or ok.
inline Status load_edited(const std::string& path, const std::function<void(ModelFile&)>& edit) {
  auto f = open_model_file(path);
  if (!f) return f.status();
  edit(**f);
  auto m = Model::from_file(std::move(f.value()));
  return m.is_ok() ? Status::ok() : m.status();
}

// The load error of the HF folder hf_<name> with its config.json edited.
inline Status load_with_config(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  test::TempDir dir("cfg_" + name);
  nlohmann::json j = nlohmann::json::parse(test::read_file(kData + "hf_" + name + "/config.json"));
  edit(j);
  test::write_file(dir.path() / "config.json", j.dump());
  std::filesystem::copy_file(kData + "hf_" + name + "/model.safetensors", dir.path() / "model.safetensors");
  auto m = Model::load(dir.str());
  return m.is_ok() ? Status::ok() : m.status();
}

inline void expect_error(const Status& st, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(st.is_ok());
  for (const char* p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
}

}  // namespace ember::archtest
