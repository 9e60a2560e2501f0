// Tiny random-weight models whose layers differ (head counts, KV heads, FFN
// width per layer), for the forward-pass tests, and a straightforward
// float64 reference forward pass to check them against.
//
// The GGUF file (F32 weights, written with GgufWriter) carries the
// model-wide sizes in its metadata, as files do today; the per-layer sizes
// are set in ModelConfig::layers after config_from_metadata and the weights
// are bound for them (bind_weights), then Model::from_parts assembles the
// model: the path a structured-pruning tool takes.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/io/gguf.h"
#include "model/model.h"

namespace ember::test {

struct TinyLayer {
  int n_head, n_head_kv, n_ff;
};

struct TinySpec {
  std::string arch = "qwen2";  // llama, qwen2, qwen3, gemma3
  int n_embd = 32;
  int n_vocab = 64;
  int head_dim = 8;
  // Metadata (model-wide) sizes: those of the first layer.
  std::vector<TinyLayer> layers = {{4, 2, 48}, {4, 4, 64}, {2, 1, 24}};
  bool qkv_bias = false;      // attn_{q,k,v}.bias and attn_output.bias
  bool tied_output = false;   // no output.weight
  int sliding_window = 0;     // gemma3: sliding layers (pattern 2: odd layers global)
  float final_softcap = 0.f;  // <arch>.final_logit_softcapping
  float attn_softcap = 0.f;   // <arch>.attn_logit_softcapping
  uint32_t seed = 7;
};

// The four architectures' wiring at tiny sizes, with layers that differ.
inline std::vector<TinySpec> tiny_specs() {
  std::vector<TinySpec> v;
  TinySpec llama;
  llama.arch = "llama";  // interleaved ("normal") RoPE, SwiGLU
  v.push_back(llama);
  TinySpec qwen2;
  qwen2.arch = "qwen2";  // NeoX RoPE, biases
  qwen2.qkv_bias = true;
  v.push_back(qwen2);
  TinySpec qwen3;
  qwen3.arch = "qwen3";  // QK-norm
  v.push_back(qwen3);
  TinySpec gemma3;
  gemma3.arch = "gemma3";  // QK-norm, post-norms, GeGLU, scaled embeddings, tied, windows, softcaps
  gemma3.tied_output = true;
  gemma3.sliding_window = 3;
  gemma3.final_softcap = 3.f;
  gemma3.attn_softcap = 5.f;
  v.push_back(gemma3);
  return v;
}

inline std::vector<float> random_values(std::mt19937& rng, size_t n, float mean, float std) {
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Writes the spec's GGUF to `path`.
inline void write_tiny_gguf(const TinySpec& s, const std::string& path) {
  GgufWriter w;
  const std::string& a = s.arch;
  const TinyLayer& l0 = s.layers[0];
  w.add_string("general.architecture", a);
  w.add_uint32(a + ".block_count", static_cast<uint32_t>(s.layers.size()));
  w.add_uint32(a + ".embedding_length", s.n_embd);
  w.add_uint32(a + ".feed_forward_length", l0.n_ff);
  w.add_uint32(a + ".attention.head_count", l0.n_head);
  w.add_uint32(a + ".attention.head_count_kv", l0.n_head_kv);
  w.add_uint32(a + ".attention.key_length", s.head_dim);
  w.add_uint32(a + ".attention.value_length", s.head_dim);
  w.add_float32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_uint32(a + ".context_length", 256);
  w.add_float32(a + ".rope.freq_base", 10000.f);
  if (s.final_softcap > 0) w.add_float32(a + ".final_logit_softcapping", s.final_softcap);
  if (s.attn_softcap > 0) w.add_float32(a + ".attn_logit_softcapping", s.attn_softcap);
  if (a == "gemma3") {
    w.add_uint32("gemma3.attention.sliding_window", s.sliding_window);
    w.add_uint32("gemma3.attention.sliding_window_pattern", 2);
    w.add_float32("gemma3.rope.local_freq_base", 100.f);
  }
  std::mt19937 rng(s.seed);
  const int64_t E = s.n_embd, V = s.n_vocab, hd = s.head_dim;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float mean, float std) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    const std::vector<float> v = random_values(rng, static_cast<size_t>(n), mean, std);
    ASSERT_TRUE(w.add_tensor(name, DType::kF32, ne, v.data(), v.size() * sizeof(float)).is_ok()) << name;
  };
  const float ws = 0.3f;  // matrix std: keeps activations O(1) at these widths
  add("token_embd.weight", {E, V}, 0.f, a == "gemma3" ? 0.2f : 1.f);
  add("output_norm.weight", {E}, 1.f, 0.1f);
  if (!s.tied_output) add("output.weight", {E, V}, 0.f, ws);
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const TinyLayer& l = s.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t Q = l.n_head * hd, K = l.n_head_kv * hd, F = l.n_ff;
    add(p + "attn_norm.weight", {E}, 1.f, 0.1f);
    add(p + "attn_q.weight", {E, Q}, 0.f, ws);
    add(p + "attn_k.weight", {E, K}, 0.f, ws);
    add(p + "attn_v.weight", {E, K}, 0.f, ws);
    add(p + "attn_output.weight", {Q, E}, 0.f, ws);
    if (s.qkv_bias) {
      add(p + "attn_q.bias", {Q}, 0.f, 0.2f);
      add(p + "attn_k.bias", {K}, 0.f, 0.2f);
      add(p + "attn_v.bias", {K}, 0.f, 0.2f);
      add(p + "attn_output.bias", {E}, 0.f, 0.2f);
    }
    if (a == "qwen3" || a == "gemma3") {
      add(p + "attn_q_norm.weight", {hd}, 1.f, 0.1f);
      add(p + "attn_k_norm.weight", {hd}, 1.f, 0.1f);
    }
    if (a == "gemma3") add(p + "post_attention_norm.weight", {E}, 1.f, 0.1f);
    add(p + "ffn_norm.weight", {E}, 1.f, 0.1f);
    add(p + "ffn_gate.weight", {E, F}, 0.f, ws);
    add(p + "ffn_up.weight", {E, F}, 0.f, ws);
    add(p + "ffn_down.weight", {F, E}, 0.f, ws);
    if (a == "gemma3") add(p + "post_ffw_norm.weight", {E}, 1.f, 0.1f);
  }
  ASSERT_TRUE(w.write(path).is_ok()) << path;
}

inline std::string tiny_path(const TinySpec& s) {
  return (std::filesystem::temp_directory_path() /
          ("ember_tiny_layered_" + s.arch + "_" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

// Config from the file's metadata, then the per-layer sizes of the spec.
// `edit` may change the config or the weights further before from_parts.
template <class Edit>
Result<std::unique_ptr<Model>> load_tiny(const TinySpec& s, Edit&& edit) {
  const std::string path = tiny_path(s);
  write_tiny_gguf(s, path);
  auto file = open_model_file(path);
  std::filesystem::remove(path);  // the mapping stays valid
  if (!file) return file.status();
  auto cfg = config_from_metadata(file.value()->metadata);
  if (!cfg) return cfg.status();
  for (size_t il = 0; il < s.layers.size(); ++il) {
    LayerConfig& lc = cfg.value().layers[il];
    lc.n_head = s.layers[il].n_head;
    lc.n_head_kv = s.layers[il].n_head_kv;
    lc.n_ff = s.layers[il].n_ff;
  }
  auto w = bind_weights(*file.value(), &cfg.value());
  if (!w) return w.status();
  edit(cfg.value(), *w.value());
  return Model::from_parts(std::move(cfg.value()), std::move(w.value()), std::move(file.value()));
}

inline std::unique_ptr<Model> load_tiny(const TinySpec& s) {
  auto m = load_tiny(s, [](ModelConfig&, ModelWeights&) {});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m ? std::move(m.value()) : nullptr;
}

// --- float64 reference forward pass (one sequence from position 0) ---

using Vec = std::vector<double>;

inline Vec ref_rms_norm(const Vec& x, const float* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = x[i] * r * (w ? w[i] : 1.0);
  return o;
}

// y = W x (+ b) for a F32 weight [n_out, n_in].
inline Vec ref_linear(const Linear& l, const Vec& x) {
  const int64_t n_in = l.n_in(), n_out = l.n_out();
  const float* W = static_cast<const float*>(l.weight->data);
  Vec y(static_cast<size_t>(n_out));
  for (int64_t o = 0; o < n_out; ++o) {
    double s = l.bias ? l.bias[o] : 0.0;
    for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(W[o * n_in + i]) * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = s;
  }
  return y;
}

inline Vec ref_embed(const Model& m, int32_t tok) {
  const ModelConfig& c = m.config();
  const float* T = static_cast<const float*>(m.weights().tok_embd->data);
  Vec x(static_cast<size_t>(c.n_embd));
  const float* row = T + static_cast<int64_t>(tok) * c.n_embd;
  for (int i = 0; i < c.n_embd; ++i) x[i] = static_cast<double>(row[i]) * c.embd_scale;
  return x;
}

// RoPE of one head x[0..head_dim) at position pos, in place.
inline void ref_rope(const ModelConfig& c, const LayerConfig& lc, double* x, int pos) {
  const int half = c.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const double inv = std::pow(static_cast<double>(lc.rope_base), -2.0 * i / c.n_rot) * lc.rope_freq_scale;
    const double th = pos * inv, cs = std::cos(th), sn = std::sin(th);
    const int i0 = c.rope_style == RopeStyle::kNormal ? 2 * i : i;
    const int i1 = c.rope_style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
    const double x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * cs - x1 * sn;
    x[i1] = x0 * sn + x1 * cs;
  }
}

// Logits [n, n_vocab] of tokens at positions 0..n-1.
inline std::vector<Vec> reference_forward(const Model& m, const std::vector<int32_t>& toks) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  const size_t n = toks.size();
  const int hd = c.head_dim, hdv = c.head_dim_v;
  const double eps = c.norm_eps;
  std::vector<Vec> x(n);
  for (size_t t = 0; t < n; ++t) x[t] = ref_embed(m, toks[t]);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerConfig& lc = c.layers[il];
    const LayerWeights& l = w.layers[il];
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec xn = ref_rms_norm(x[t], l.attn_norm, eps);
      q[t] = ref_linear(l.q, xn);
      k[t] = ref_linear(l.k, xn);
      v[t] = ref_linear(l.v, xn);
      // QK-norm (if any), then RoPE, head by head.
      auto heads = [&](Vec& x, int n_heads, const float* norm) {
        for (int h = 0; h < n_heads; ++h) {
          double* xh = x.data() + h * hd;
          if (norm) {
            const Vec nh = ref_rms_norm(Vec(xh, xh + hd), norm, eps);
            std::copy(nh.begin(), nh.end(), xh);
          }
          ref_rope(c, lc, xh, static_cast<int>(t));
        }
      };
      heads(q[t], lc.n_head, l.q_norm);
      heads(k[t], lc.n_head_kv, l.k_norm);
    }
    const double scale = c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd));
    const int group = lc.n_head / lc.n_head_kv;
    for (size_t t = 0; t < n; ++t) {
      Vec att(static_cast<size_t>(lc.n_head) * hdv, 0.0);
      for (int h = 0; h < lc.n_head; ++h) {
        const int kvh = h / group;
        Vec s;
        std::vector<size_t> keys;
        for (size_t j = 0; j <= t; ++j) {
          if (lc.sliding_window > 0 && t - j >= static_cast<size_t>(lc.sliding_window)) continue;
          double d = 0;
          for (int i = 0; i < hd; ++i) d += q[t][h * hd + i] * k[j][kvh * hd + i];
          d *= scale;
          if (c.attn_logit_softcap > 0) d = c.attn_logit_softcap * std::tanh(d / c.attn_logit_softcap);
          s.push_back(d);
          keys.push_back(j);
        }
        double mx = s[0], sum = 0;
        for (double e : s) mx = std::max(mx, e);
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t a = 0; a < keys.size(); ++a)
          for (int i = 0; i < hdv; ++i) att[h * hdv + i] += s[a] / sum * v[keys[a]][kvh * hdv + i];
      }
      Vec o = ref_linear(l.o, att);
      if (l.post_attn_norm) o = ref_rms_norm(o, l.post_attn_norm, eps);
      for (int i = 0; i < c.n_embd; ++i) x[t][i] += o[i];
      const Vec xn = ref_rms_norm(x[t], l.ffn_norm, eps);
      Vec g = ref_linear(l.gate, xn);
      const Vec u = ref_linear(l.up, xn);
      for (size_t i = 0; i < g.size(); ++i) {
        const double a = g[i];
        const double act = c.activation == Activation::kGeluTanh
                               ? 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)))
                               : a / (1.0 + std::exp(-a));
        g[i] = act * u[i];
      }
      Vec d = ref_linear(l.down, g);
      if (l.post_ffn_norm) d = ref_rms_norm(d, l.post_ffn_norm, eps);
      for (int i = 0; i < c.n_embd; ++i) x[t][i] += d[i];
    }
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) {
    logits[t] = ref_linear(w.output, ref_rms_norm(x[t], w.output_norm, eps));
    if (c.final_logit_softcap > 0)
      for (double& z : logits[t]) z = c.final_logit_softcap * std::tanh(z / c.final_logit_softcap);
  }
  return logits;
}

// ||a - b|| / ||b||.
inline double rel_l2(const float* a, const Vec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace ember::test
