// Structured pruning (FFN channels, heads, KV groups, layers, output
// vocabulary) into a smaller dense model; see prune_structured.h.
#include "transform/prune_structured.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "eval/model_compare.h"
#include "model/act_sparsity.h"
#include "model/config.h"
#include "model/model.h"
#include "transform/imatrix.h"
#include "transform/quant_plan.h"

namespace ember {

std::vector<int> keep_highest(const std::vector<double>& score, int keep) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  keep = std::clamp(keep, 0, static_cast<int>(score.size()));
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
  idx.resize(static_cast<size_t>(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

namespace {

// Statistics of the unpruned model over the calibration windows.
struct Stats {
  Imatrix columns;                 // sum x^2 per input column of every matrix
  std::vector<double> influence;   // per block: 1 - mean cos(in, out)
  std::vector<double> kl;          // per block: mean KL with only it skipped
};

Status collect_stats(const Model& m, const std::vector<int32_t>& tokens, const StructuredPruneOptions& o,
                     ThreadPool& pool, Stats* st) {
  const ModelConfig& cfg = m.config();
  const int64_t W = o.window, E = cfg.n_embd, L = cfg.n_layer;
  if (W < 2 || W > 512) return Status::errorf("structured pruning window {} is not in [2, 512]", W);
  const int64_t n_win = static_cast<int64_t>(tokens.size()) / W;
  if (n_win < 1) return Status::errorf("structured pruning needs at least {} calibration tokens, got {}", W, tokens.size());
  for (int64_t i = 0; i < n_win * W; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg.n_vocab) return Status::errorf("token id {} outside the vocabulary", tokens[i]);
  const int kl_win = o.drop_layers > 0 && o.layer_metric == LayerMetric::kKl
                         ? static_cast<int>(std::min<int64_t>(std::max(o.kl_windows, 1), n_win))
                         : 0;
  const int total = static_cast<int>(n_win) + kl_win * static_cast<int>(L);
  ImportanceCollector ic(false, false);
  ForwardContext ctx(m, pool, static_cast<int>(W));
  ContiguousKvCache cache(cfg, W);
  std::vector<double> cos_sum(static_cast<size_t>(L), 0.0);
  std::vector<float> x_in(static_cast<size_t>(W * E));
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(n_win));
  std::vector<std::vector<float>> final_hidden(static_cast<size_t>(kl_win));
  auto prepare = [&](int64_t c) {
    SeqBatch sb;
    sb.tokens = seqs[c].data();
    sb.n = W;
    sb.cache = &cache;
    return ctx.prepare(&sb, 1);
  };
  int done = 0;
  for (int64_t c = 0; c < n_win; ++c) {
    seqs[c].assign(tokens.begin() + c * W, tokens.begin() + (c + 1) * W);
    if (o.bos_id >= 0) seqs[c][0] = o.bos_id;
    EMBER_RETURN_IF_ERROR(prepare(c));
    ctx.embed();
    ctx.set_observer(&ic);
    for (int l = 0; l < L; ++l) {
      std::memcpy(x_in.data(), ctx.hidden(), x_in.size() * sizeof(float));
      ctx.run_layers(l, l + 1);
      const float* y = ctx.hidden();
      for (int64_t t = 0; t < W; ++t) {
        double xy = 0, xx = 0, yy = 0;
        for (int64_t i = 0; i < E; ++i) {
          const double a = x_in[t * E + i], b = y[t * E + i];
          xy += a * b, xx += a * a, yy += b * b;
        }
        cos_sum[l] += xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : 1.0;
      }
    }
    ctx.set_observer(nullptr);
    if (c < kl_win) final_hidden[c].assign(ctx.hidden(), ctx.hidden() + W * E);
    if (o.progress) o.progress(++done, total);
  }
  st->columns = std::move(ic.result());
  st->influence.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) st->influence[l] = 1.0 - cos_sum[l] / static_cast<double>(n_win * W);
  if (kl_win == 0) return Status::ok();
  // KL of the model with only block l skipped against the whole model, over
  // the first kl_win windows, the head run on chunks of rows.
  constexpr int64_t kRows = 32;
  const int V = cfg.n_vocab;
  std::vector<float> ref(static_cast<size_t>(kRows * V)), mod(static_cast<size_t>(kRows * V)), skipped(W * E);
  std::vector<int64_t> rows(kRows);
  std::vector<int32_t> next(kRows + 1, 0);
  st->kl.assign(static_cast<size_t>(L), 0.0);
  for (int l = 0; l < L; ++l) {
    double kl = 0;
    int64_t n = 0;
    for (int c = 0; c < kl_win; ++c) {
      EMBER_RETURN_IF_ERROR(prepare(c));
      ctx.embed();
      ctx.run_layers(0, l);
      ctx.run_layers(l + 1, static_cast<int>(L));
      std::memcpy(skipped.data(), ctx.hidden(), skipped.size() * sizeof(float));
      for (int64_t r0 = 0; r0 < W; r0 += kRows) {
        const int64_t nr = std::min(kRows, W - r0);
        for (int64_t r = 0; r < nr; ++r) rows[r] = r0 + r, next[r + 1] = seqs[c][std::min(W - 1, r0 + r + 1)];
        std::memcpy(ctx.hidden(), final_hidden[c].data(), W * E * sizeof(float));
        ctx.head(rows.data(), nr, ref.data());
        std::memcpy(ctx.hidden(), skipped.data(), W * E * sizeof(float));
        ctx.head(rows.data(), nr, mod.data());
        const ModelComparison cmp = compare_logits(ref.data(), mod.data(), next.data(), nr + 1, V);
        kl += cmp.kl_mean * static_cast<double>(nr), n += nr;
      }
      if (o.progress) o.progress(++done, total);
    }
    st->kl[l] = kl / static_cast<double>(n);
  }
  return Status::ok();
}

// A new tensor owned by *f.
void add_tensor(ModelFile* f, const std::string& name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  TensorView t;
  t.name = name;
  t.type = type;
  t.n_dims = static_cast<int>(ne.size());
  for (size_t i = 0; i < ne.size(); ++i) t.ne[i] = ne[i];
  t.data = buf->data();
  t.nbytes = buf->size();
  f->tensors[name] = t;
  f->owners.push_back(std::move(buf));
}

// Rows `rows` of a 2-D tensor in its own type (the bytes as they are).
void copy_rows(ModelFile* f, const std::string& name, const TensorView& t, const std::vector<int64_t>& rows) {
  const size_t rb = t.row_bytes();
  std::vector<uint8_t> out(rb * rows.size());
  for (size_t i = 0; i < rows.size(); ++i) std::memcpy(out.data() + i * rb, t.row(rows[i]), rb);
  add_tensor(f, name, t.type, {t.ne[0], static_cast<int64_t>(rows.size())}, std::move(out));
}

// Elements `idx` of a 1-D tensor (a bias), as f32.
void copy_elements(ModelFile* f, const std::string& name, const TensorView& t, const std::vector<int64_t>& idx) {
  const std::vector<float> v = read_f32_rows(t);
  std::vector<uint8_t> out(idx.size() * sizeof(float));
  for (size_t i = 0; i < idx.size(); ++i) std::memcpy(out.data() + i * 4, &v[idx[i]], 4);
  add_tensor(f, name, DType::kF32, {static_cast<int64_t>(idx.size())}, std::move(out));
}

// Columns `cols` of a 2-D tensor, as f32 (the plan rounds them again).
void copy_columns(ModelFile* f, const std::string& name, const TensorView& t, const std::vector<int64_t>& cols) {
  const std::vector<float> v = read_f32_rows(t);
  const int64_t n_in = t.ne[0], n_out = t.nrows(), nc = static_cast<int64_t>(cols.size());
  std::vector<uint8_t> out(static_cast<size_t>(n_out * nc) * sizeof(float));
  float* o = reinterpret_cast<float*>(out.data());
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t j = 0; j < nc; ++j) o[r * nc + j] = v[r * n_in + cols[j]];
  add_tensor(f, name, DType::kF32, {nc, n_out}, std::move(out));
}

// Unit u of `width` rows each -> their row indices, for the kept units.
std::vector<int64_t> expand(const std::vector<int>& units, int64_t width) {
  std::vector<int64_t> r;
  for (int u : units)
    for (int64_t i = 0; i < width; ++i) r.push_back(u * width + i);
  return r;
}

// Per column j of W [n_out, n_in]: sum_r W_rj^2 * col_sq_j.
std::vector<double> column_energy(const TensorView& t, const std::vector<double>& col_sq) {
  const std::vector<float> w = read_f32_rows(t);
  const int64_t n_in = t.ne[0];
  std::vector<double> e(static_cast<size_t>(n_in), 0.0);
  for (int64_t r = 0; r < t.nrows(); ++r)
    for (int64_t j = 0; j < n_in; ++j) e[j] += static_cast<double>(w[r * n_in + j]) * w[r * n_in + j];
  for (int64_t j = 0; j < n_in; ++j) e[j] *= col_sq[j];
  return e;
}

// What one remaining block keeps, in source indices.
struct Keep {
  int src = 0;
  std::vector<int> heads, groups, channels;  // query heads (global index), KV groups, FFN channels
};

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += fmt::format("{}{}", s.empty() ? "" : ",", x);
  return s;
}

// A size key: one value when every layer agrees, else llama.cpp's array.
GgufValue size_value(const std::vector<int>& v) {
  if (std::all_of(v.begin(), v.end(), [&](int x) { return x == v[0]; }))
    return Metadata::make_int(v[0], GgufType::kUint32);
  return Metadata::make_int_array(std::vector<int32_t>(v.begin(), v.end()), GgufType::kUint32);
}

}  // namespace

Result<std::unique_ptr<ModelFile>> prune_structured(std::unique_ptr<ModelFile> src, const std::vector<int32_t>& tokens,
                                                    const StructuredPruneOptions& o, ThreadPool& pool,
                                                    StructuredPruneReport* report) {
  for (double f : {o.ffn, o.heads, o.kv_groups})
    if (!(f >= 0 && f < 1)) return Status::errorf("a structured pruning fraction is {}, not in [0, 1)", f);
  if (o.ffn_multiple < 0) return Status::error("the FFN width multiple must be >= 0");
  auto model = Model::from_file(std::make_unique<ModelFile>(*src));
  if (!model) return model.status();
  const ModelConfig cfg = (*model)->config();
  const int L = cfg.n_layer;
  if (o.drop_layers < 0 || o.drop_layers >= L)
    return Status::errorf("cannot remove {} of {} layers (at least one stays)", o.drop_layers, L);
  for (size_t i = 0; i < o.vocab.size(); ++i)
    if (o.vocab[i] < 0 || o.vocab[i] >= cfg.n_vocab || (i > 0 && o.vocab[i] <= o.vocab[i - 1]))
      return Status::errorf("kept output token {} is out of range [0, {}) or out of order", o.vocab[i], cfg.n_vocab);
  if (!cfg.output_tokens.empty() && !o.vocab.empty()) return Status::error("the output vocabulary is trimmed already");
  StructuredPruneReport rep;
  Stats st;
  if (o.needs_calibration()) EMBER_RETURN_IF_ERROR(collect_stats(**model, tokens, o, pool, &st));
  model.value().reset();
  auto tensor = [&](const std::string& n) -> const TensorView* { return src->tensor(n); };
  auto name = [](int l, const char* role, const char* suffix = "weight") {
    return fmt::format("blk.{}.{}.{}", l, role, suffix);
  };
  auto col_sq = [&](int l, const char* role) -> Result<std::vector<double>> {
    auto it = st.columns.entries.find(name(l, role));
    if (it == st.columns.entries.end()) return Status::errorf("tensor '{}': no calibration input reached it", name(l, role));
    return it->second.sums;
  };

  // Layers.
  std::vector<int> kept_layers(static_cast<size_t>(L));
  std::iota(kept_layers.begin(), kept_layers.end(), 0);
  if (o.drop_layers > 0) {
    rep.layer_scores = o.layer_metric == LayerMetric::kKl ? st.kl : st.influence;
    kept_layers = keep_highest(rep.layer_scores, L - o.drop_layers);
    for (int l = 0; l < L; ++l)
      if (!std::binary_search(kept_layers.begin(), kept_layers.end(), l)) rep.dropped.push_back(l);
  }
  // Heads, groups and channels of every remaining block.
  std::vector<Keep> keep;
  std::vector<std::vector<double>> ffn_score;
  for (int l : kept_layers) {
    const LayerConfig& lc = cfg.layers[l];
    Keep k;
    k.src = l;
    const int g = lc.n_head / lc.n_head_kv;
    std::vector<int> all_groups(static_cast<size_t>(lc.n_head_kv));
    std::iota(all_groups.begin(), all_groups.end(), 0);
    k.groups = all_groups;
    std::vector<std::vector<int>> per_group(static_cast<size_t>(lc.n_head_kv));
    for (int h = 0; h < lc.n_head; ++h) per_group[h / g].push_back(h);
    if (o.heads > 0 || o.kv_groups > 0) {
      auto cs = col_sq(l, "attn_output");
      if (!cs) return cs.status();
      const std::vector<double> e = column_energy(*tensor(name(l, "attn_output")), *cs);
      std::vector<double> hs(static_cast<size_t>(lc.n_head), 0.0), gs(static_cast<size_t>(lc.n_head_kv), 0.0);
      for (int h = 0; h < lc.n_head; ++h) {
        for (int64_t d = 0; d < cfg.head_dim_v; ++d) hs[h] += e[h * cfg.head_dim_v + d];
        gs[h / g] += hs[h];
      }
      if (o.kv_groups > 0)
        k.groups = keep_highest(gs, std::max(1, lc.n_head_kv - static_cast<int>(std::lround(o.kv_groups * lc.n_head_kv))));
      const int keep_per_group = std::max(1, g - static_cast<int>(std::lround(o.heads * g)));
      for (int grp : k.groups) {
        std::vector<double> s;
        for (int h : per_group[grp]) s.push_back(hs[h]);
        for (int i : keep_highest(s, keep_per_group)) k.heads.push_back(per_group[grp][i]);
      }
    } else {
      for (int h = 0; h < lc.n_head; ++h) k.heads.push_back(h);
    }
    ffn_score.emplace_back();
    if (o.ffn > 0) {
      auto cs = col_sq(l, "ffn_down");
      if (!cs) return cs.status();
      ffn_score.back() = column_energy(*tensor(name(l, "ffn_down")), *cs);
    }
    keep.push_back(std::move(k));
  }
  // FFN widths: the same fraction everywhere, or by a global ranking of each
  // channel's share of its layer's total score; multiples of `mult`.
  std::vector<int> width(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) width[i] = cfg.layers[keep[i].src].n_ff;
  if (o.ffn > 0) {
    const int n_ff0 = cfg.layers[keep[0].src].n_ff;
    const int mult = o.ffn_multiple > 0 ? o.ffn_multiple : n_ff0 % 256 == 0 ? 256 : 32;
    auto round_to = [&](double n, int full) {
      const int r = static_cast<int>(std::lround(n / mult)) * mult;
      return std::clamp(r, std::min(mult, full), full);
    };
    if (!o.global) {
      for (size_t i = 0; i < keep.size(); ++i) width[i] = round_to(width[i] * (1.0 - o.ffn), width[i]);
    } else {
      std::vector<std::pair<double, int>> all;  // (share, layer)
      int64_t total = 0;
      for (size_t i = 0; i < keep.size(); ++i) {
        const double sum = std::accumulate(ffn_score[i].begin(), ffn_score[i].end(), 0.0);
        for (double s : ffn_score[i]) all.emplace_back(sum > 0 ? s / sum : 0.0, static_cast<int>(i));
        total += width[i];
      }
      std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<int> removed(keep.size(), 0);
      for (int64_t j = 0; j < static_cast<int64_t>(std::lround(o.ffn * total)); ++j) ++removed[all[j].second];
      for (size_t i = 0; i < keep.size(); ++i) width[i] = round_to(width[i] - removed[i], width[i]);
    }
    for (size_t i = 0; i < keep.size(); ++i) keep[i].channels = keep_highest(ffn_score[i], width[i]);
  } else {
    for (size_t i = 0; i < keep.size(); ++i) {
      keep[i].channels.resize(static_cast<size_t>(width[i]));
      std::iota(keep[i].channels.begin(), keep[i].channels.end(), 0);
    }
  }

  // The new file: metadata, then the tensors of each remaining block.
  auto out = std::make_unique<ModelFile>();
  out->path = src->path;
  out->format = src->format;
  out->metadata = src->metadata;
  const std::string a = cfg.arch + ".";
  const int nL = static_cast<int>(keep.size());
  for (const auto& [key, v] : src->metadata.entries())  // per-layer arrays follow the remaining blocks
    if (key.rfind(a, 0) == 0 && v.type == GgufType::kArray && v.count == static_cast<uint64_t>(L) && v.items.empty() &&
        v.strings.empty()) {
      GgufValue nv = v;
      nv.ints.clear(), nv.nums.clear();
      for (const Keep& k : keep) {
        if (!v.ints.empty()) nv.ints.push_back(v.ints[k.src]);
        if (!v.nums.empty()) nv.nums.push_back(v.nums[k.src]);
      }
      nv.count = static_cast<uint64_t>(nL);
      out->metadata.set(key, nv);
    }
  // Activation-sparsity thresholds (model/act_sparsity.h: 4 per block)
  // follow the remaining blocks too (they describe the unpruned widths'
  // inputs; recalibrate with --activations for the pruned model).
  if (const GgufValue* t = src->metadata.find(kActSparsityThresholdsKey);
      t && t->type == GgufType::kArray && t->nums.size() == static_cast<size_t>(L) * kActInputs) {
    GgufValue nv = *t;
    nv.nums.clear();
    for (const Keep& k : keep)
      for (int i = 0; i < kActInputs; ++i) nv.nums.push_back(t->nums[static_cast<size_t>(k.src) * kActInputs + i]);
    nv.count = nv.nums.size();
    out->metadata.set(kActSparsityThresholdsKey, nv);
  }
  for (const Keep& k : keep) {
    rep.n_head.push_back(static_cast<int>(k.heads.size()));
    rep.n_head_kv.push_back(static_cast<int>(k.groups.size()));
    rep.n_ff.push_back(static_cast<int>(k.channels.size()));
    rep.kept_heads.push_back(k.heads);
    rep.kept_groups.push_back(k.groups);
    rep.kept_channels.push_back(k.channels);
  }
  out->metadata.set(a + "block_count", Metadata::make_int(nL, GgufType::kUint32));
  out->metadata.set(a + "attention.head_count", size_value(rep.n_head));
  out->metadata.set(a + "attention.head_count_kv", size_value(rep.n_head_kv));
  out->metadata.set(a + "feed_forward_length", size_value(rep.n_ff));
  out->metadata.set(a + "attention.key_length", Metadata::make_int(cfg.head_dim, GgufType::kUint32));
  out->metadata.set(a + "attention.value_length", Metadata::make_int(cfg.head_dim_v, GgufType::kUint32));
  if (!rep.dropped.empty()) {
    if (cfg.arch == "gemma3") {  // one sliding-window flag per remaining layer
      std::vector<int32_t> swa;
      for (const Keep& k : keep) swa.push_back(cfg.layers[k.src].sliding_window > 0);
      out->metadata.set(a + "attention.sliding_window_pattern", Metadata::make_int_array(swa, GgufType::kBool));
    }
    out->metadata.set("ember.prune.removed_layers",
                      Metadata::make_int_array(std::vector<int32_t>(rep.dropped.begin(), rep.dropped.end())));
  }
  const int64_t hd = cfg.head_dim, hdv = cfg.head_dim_v;
  for (const auto& [tn, t] : src->tensors) {
    int layer = -1;
    if (tn.rfind("blk.", 0) != 0) {
      out->tensors[tn] = t;
      rep.origin_type[tn] = t.type;
      continue;
    }
    layer = std::atoi(tn.c_str() + 4);
    auto it = std::find_if(keep.begin(), keep.end(), [&](const Keep& k) { return k.src == layer; });
    if (it == keep.end()) continue;
    const int nl = static_cast<int>(it - keep.begin());
    const std::string rest = tn.substr(tn.find('.', 4) + 1);  // "attn_q.weight"
    const std::string nn = fmt::format("blk.{}.{}", nl, rest);
    rep.origin_type[nn] = t.type;
    const LayerConfig& lc = cfg.layers[layer];
    const bool heads_cut = static_cast<int>(it->heads.size()) != lc.n_head;
    const bool groups_cut = static_cast<int>(it->groups.size()) != lc.n_head_kv;
    const bool ffn_cut = static_cast<int>(it->channels.size()) != lc.n_ff;
    const std::vector<int64_t> ch(it->channels.begin(), it->channels.end());
    const std::string role = rest.substr(0, rest.find('.'));
    const bool weight = t.n_dims == 2;
    auto rows_or_elements = [&](const std::vector<int64_t>& idx) {
      if (weight) copy_rows(out.get(), nn, t, idx);
      else copy_elements(out.get(), nn, t, idx);
    };
    if (heads_cut && role == "attn_q") rows_or_elements(expand(it->heads, hd));
    else if (groups_cut && (role == "attn_k")) rows_or_elements(expand(it->groups, hd));
    else if (groups_cut && (role == "attn_v")) rows_or_elements(expand(it->groups, hdv));
    else if (heads_cut && role == "attn_output" && weight) copy_columns(out.get(), nn, t, expand(it->heads, hdv));
    else if (ffn_cut && (role == "ffn_gate" || role == "ffn_up")) rows_or_elements(ch);
    else if (ffn_cut && role == "ffn_down" && weight) copy_columns(out.get(), nn, t, ch);
    else {
      TensorView v = t;
      v.name = nn;
      out->tensors[nn] = v;
    }
  }
  if (!o.vocab.empty()) {  // the head keeps the chosen tokens' rows
    const TensorView* head = src->tensor("output.weight");
    if (!head) head = src->tensor("token_embd.weight");
    if (!head || head->n_dims != 2) return Status::error("no output head to trim");
    copy_rows(out.get(), "output.weight", *head, std::vector<int64_t>(o.vocab.begin(), o.vocab.end()));
    rep.origin_type["output.weight"] = head->type;
    out->metadata.set(kOutputTokensKey, Metadata::make_int_array(o.vocab));
  }
  for (const auto& [n, t] : src->tensors) rep.params_before += t.nelements();
  for (const auto& [n, t] : out->tensors) rep.params_after += t.nelements();
  out->owners.push_back(std::shared_ptr<ModelFile>(std::move(src)));
  // The result must load.
  auto check = Model::from_file(std::make_unique<ModelFile>(*out));
  if (!check) return check.status().with_context("the pruned model");

  // The summary.
  if (!rep.dropped.empty()) {
    std::string scores;
    for (size_t l = 0; l < rep.layer_scores.size(); ++l) scores += fmt::format(" {:.4f}", rep.layer_scores[l]);
    rep.lines.push_back(fmt::format("layers: removed {} of {} ({}) by {}; scores per layer:{}", rep.dropped.size(), L,
                                    list(rep.dropped),
                                    o.layer_metric == LayerMetric::kKl ? "KL when skipped" : "block influence",
                                    scores));
  }
  auto per_layer = [&](const char* what, const std::vector<int>& v, int before) {
    const bool same = std::all_of(v.begin(), v.end(), [&](int x) { return x == v[0]; });
    rep.lines.push_back(fmt::format("{}: {} -> {}", what, before, same ? std::to_string(v[0]) : "[" + list(v) + "]"));
  };
  if (o.heads > 0 || o.kv_groups > 0) {
    per_layer("query heads per layer", rep.n_head, cfg.layers[0].n_head);
    per_layer("KV heads per layer", rep.n_head_kv, cfg.layers[0].n_head_kv);
  }
  if (o.ffn > 0) per_layer("FFN width per layer", rep.n_ff, cfg.layers[0].n_ff);
  if (!o.vocab.empty())
    rep.lines.push_back(fmt::format("output vocabulary: {} of {} tokens kept (ember.output_tokens); the tokenizer and "
                                    "input embedding stay whole",
                                    o.vocab.size(), cfg.n_vocab));
  rep.lines.push_back(fmt::format("parameters: {:.2f} M -> {:.2f} M ({:+.1f}%)", rep.params_before / 1e6,
                                  rep.params_after / 1e6,
                                  100.0 * (static_cast<double>(rep.params_after) / rep.params_before - 1)));
  auto uniform = [](const std::vector<int>& v) { return std::all_of(v.begin(), v.end(), [&](int x) { return x == v[0]; }); };
  rep.llama_cpp = o.vocab.empty() && uniform(rep.n_head) && uniform(rep.n_head_kv) && uniform(rep.n_ff);
  if (!rep.llama_cpp)
    rep.lines.push_back(o.vocab.empty()
                            ? "llama.cpp: per-layer widths are written as its per-layer arrays, but its llama / gemma3 / "
                              "qwen loaders size every layer as layer 0, so this file runs in ember only"
                            : "llama.cpp: a trimmed output vocabulary cannot run there (its head needs a row per "
                              "token); this file runs in ember only");
  if (report) *report = std::move(rep);
  return out;
}

}  // namespace ember
