// Test helper: logits [n][V] against reference rows (a JSON array of n
// arrays of V numbers): relative L2 error over all rows, and per row the
// argmax of both and the reference's top-1 / top-2 margin; and the logits
// of a prompt from a fresh context.
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model.h"

namespace ember {

// A llama.cpp reference written by a tools/ script: <stem>.json (cases,
// tokens) and <stem>.bin (the logits as f32, [case][token][vocab]) in dir.
// meta is null when the JSON is missing.
struct LlamaReference {
  nlohmann::json meta;
  std::vector<float> logits;
};

inline LlamaReference load_llama_reference(const std::string& dir, const std::string& stem) {
  LlamaReference r;
  std::ifstream f(dir + stem + ".json");
  if (!f.good()) return r;
  r.meta = nlohmann::json::parse(f);
  std::ifstream b(dir + stem + ".bin", std::ios::binary);
  b.seekg(0, std::ios::end);
  r.logits.resize(static_cast<size_t>(b.tellg()) / sizeof(float));
  b.seekg(0);
  b.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(r.logits.size() * sizeof(float)));
  return r;
}

struct LogitsComparison {
  double rel_l2 = 0;
  std::vector<int> top1, want_top1;
  std::vector<double> want_margin;
};

inline LogitsComparison compare_logits(const float* got, const nlohmann::json& want_rows, int V) {
  LogitsComparison r;
  double err2 = 0, ref2 = 0;
  for (size_t t = 0; t < want_rows.size(); ++t) {
    const std::vector<double> want = want_rows[t].get<std::vector<double>>();
    const float* g = got + t * V;
    int best = 0, want_best = 0;
    for (int j = 0; j < V; ++j) {
      const double d = g[j] - want[j];
      err2 += d * d;
      ref2 += want[j] * want[j];
      if (g[j] > g[best]) best = j;
      if (want[j] > want[want_best]) want_best = j;
    }
    double second = -INFINITY;
    for (int j = 0; j < V; ++j)
      if (j != want_best) second = std::max(second, want[j]);
    r.top1.push_back(best);
    r.want_top1.push_back(want_best);
    r.want_margin.push_back(want[want_best] - second);
  }
  r.rel_l2 = std::sqrt(err2 / ref2);
  return r;
}

// got against llama.cpp's logits want ([n][V] each) under the noise-aware
// criteria of docs/correctness.md: relative L2 < 3e-2 at every position and
// the same top-1 wherever llama.cpp's top-2 margin exceeds 0.05 (gtest
// expectations). Returns how many positions are within 1e-5.
inline int expect_close_to_llama_cpp(const float* got, const float* want, int64_t n, int V) {
  int exact = 0;
  for (int64_t t = 0; t < n; ++t) {
    double e2 = 0, r2 = 0;
    int best = 0, want_best = 0;
    for (int j = 0; j < V; ++j) {
      const double d = got[t * V + j] - want[t * V + j];
      e2 += d * d;
      r2 += static_cast<double>(want[t * V + j]) * want[t * V + j];
      if (got[t * V + j] > got[t * V + best]) best = j;
      if (want[t * V + j] > want[t * V + want_best]) want_best = j;
    }
    double second = -INFINITY;
    for (int j = 0; j < V; ++j)
      if (j != want_best) second = std::max(second, static_cast<double>(want[t * V + j]));
    const double rel = std::sqrt(e2 / r2);
    EXPECT_LT(rel, 3e-2) << "position " << t;
    if (want[t * V + want_best] - second > 0.05) {
      EXPECT_EQ(best, want_best) << "top-1 at position " << t;
    }
    exact += rel < 1e-5;
  }
  return exact;
}

// All logits [n][V] of `toks` from position 0 on a fresh cache, prefilled
// in batches of `batch`; empty on failure.
inline std::vector<float> prefill_logits(const Model& m, ThreadPool& pool, const std::vector<int32_t>& toks, int batch) {
  const int64_t n = static_cast<int64_t>(toks.size());
  ForwardContext ctx(m, pool, batch);
  ContiguousKvCache cache(m.config(), n);
  std::vector<float> all(static_cast<size_t>(n) * m.config().n_vocab);
  if (!ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok()) return {};
  return all;
}

}  // namespace ember
