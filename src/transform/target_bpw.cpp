// --target-bpw: per-tensor error estimates, the sensitivity probe and the
// budget allocation; see target_bpw.h.
#include "transform/target_bpw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "eval/model_compare.h"
#include "kernels/registry.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "quant/quantize_imatrix.h"
#include "transform/quantizer.h"

namespace ember {

namespace {

double type_bits(DType t) {
  return 8.0 * static_cast<double>(dtype_type_size(t)) / static_cast<double>(dtype_block_size(t));
}

int64_t elements(const std::vector<int64_t>& ne) {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

bool is_free_matrix(const QuantPlanEntry& e) {
  const std::string& n = e.name;
  return e.ne.size() == 2 && n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 && !e.pinned &&
         dtype_block_size(e.target) > 1;
}

// Reads row r of t as f32.
void read_row(const TensorView& t, int64_t r, float* out) {
  if (t.type == DType::kF32) std::memcpy(out, t.row(r), t.ne[0] * sizeof(float));
  else kernels(t.type).dequantize_row(t.row(r), out, t.ne[0]);
}

// The quantizer the plan runs for a type (importance-weighted when the plan
// rounds with statistics, the tensor has them and the type supports it).
Quantizer* quantizer_for_type(DType c, bool weighted, RtnQuantizer& rtn, ImatrixQuantizer& imq) {
  return weighted && can_quantize_imatrix(c) ? static_cast<Quantizer*>(&imq) : &rtn;
}

// E_t(c) for every candidate c of one tensor (target_bpw.h).
Result<std::vector<double>> weighted_errors(const TensorView& t, const QuantPlanEntry& e,
                                            const std::vector<DType>& cands, const float* importance, bool weighted,
                                            int64_t sample_rows, ThreadPool& pool) {
  const int64_t n = t.ne[0], rows = t.nrows();
  const int64_t S = std::min(rows, std::max<int64_t>(1, sample_rows));
  RtnQuantizer rtn;
  ImatrixQuantizer imq;
  const int nt = pool.size();
  std::vector<std::vector<double>> acc(nt, std::vector<double>(cands.size(), 0.0));
  std::vector<Status> errors(nt);
  pool.parallel_for(S, 1, [&](int64_t b, int64_t end, int ith) {
    std::vector<float> w(n), d(n);
    std::vector<uint8_t> q;
    for (int64_t k = b; k < end && errors[ith]; ++k) {
      const int64_t r = k * rows / S;
      read_row(t, r, w.data());
      for (size_t ci = 0; ci < cands.size(); ++ci) {
        const DType c = cands[ci];
        q.resize(dtype_row_size(c, n));
        QuantPlanEntry ec = e;
        ec.target = c;
        QuantTensorContext ctx;
        ctx.entry = &ec;
        ctx.row0 = r;
        Quantizer* qz = quantizer_for_type(c, weighted && importance, rtn, imq);
        ctx.importance = qz == &imq ? importance : nullptr;
        errors[ith] = qz->quantize_rows(w.data(), 1, n, c, ctx, q.data());
        if (!errors[ith]) return;
        kernels(c).dequantize_row(q.data(), d.data(), n);
        double s = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double diff = static_cast<double>(w[j]) - d[j];
          s += (importance ? importance[j] : 1.0) * diff * diff;
        }
        acc[ith][ci] += s;
      }
    }
  });
  for (const Status& st : errors)
    if (!st) return st.with_context(e.name);
  std::vector<double> out(cands.size(), 0.0);
  for (const auto& a : acc)
    for (size_t ci = 0; ci < cands.size(); ++ci) out[ci] += a[ci];
  for (double& v : out) v *= static_cast<double>(rows) / static_cast<double>(S);
  return out;
}

// Logits [W * n_vocab] of every probe window.
Result<std::vector<std::vector<float>>> window_logits(const Model& m, const std::vector<std::vector<int32_t>>& wins,
                                                      ThreadPool& pool) {
  const int64_t W = static_cast<int64_t>(wins[0].size());
  const int V = m.config().n_vocab;
  ForwardContext ctx(m, pool, 64);
  ContiguousKvCache cache(m.config(), W);
  std::vector<std::vector<float>> out;
  for (const auto& seq : wins) {
    std::vector<float> l(static_cast<size_t>(W) * V);
    EMBER_RETURN_IF_ERROR(ctx.forward(seq.data(), W, 0, cache, nullptr, l.data()));
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace

Result<std::vector<int>> allocate_bpw(const std::vector<BpwItem>& items, double budget_bits) {
  const size_t T = items.size();
  std::vector<int> pick(T, 0);
  double min_total = 0;
  std::vector<double> base(T);
  for (size_t i = 0; i < T; ++i) {
    if (items[i].choices.empty()) return Status::errorf("item {} has no choice", i);
    double lo = std::numeric_limits<double>::infinity();
    for (const BpwChoice& c : items[i].choices) lo = std::min(lo, c.bits * static_cast<double>(items[i].n_elements));
    base[i] = lo;
    min_total += lo;
  }
  if (budget_bits < min_total)
    return Status::errorf("budget of {:.0f} bits is below the cheapest choices' {:.0f} bits", budget_bits, min_total);
  const double slack = budget_bits - min_total;
  auto extra = [&](size_t i, size_t c) {
    return items[i].choices[c].bits * static_cast<double>(items[i].n_elements) - base[i];
  };
  const int G = kBudgetUnits;
  const double unit = slack / G;
  // cur[g]: least damage of items 0..i within g units; choice[i][g] the pick.
  std::vector<double> prev(G + 1, 0.0), cur(G + 1);
  std::vector<std::vector<uint8_t>> choice(T, std::vector<uint8_t>(G + 1, 0));
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < T; ++i) {
    std::fill(cur.begin(), cur.end(), inf);
    for (size_t c = 0; c < items[i].choices.size() && c < 255; ++c) {
      const double ex = extra(i, c);
      int64_t cost = 0;
      if (ex > 0) {
        if (unit <= 0) continue;
        const double u = std::ceil(ex / unit - 1e-9);
        if (u > G) continue;
        cost = static_cast<int64_t>(u);
      }
      const double dmg = items[i].choices[c].damage;
      for (int64_t g = cost; g <= G; ++g) {
        const double v = prev[g - cost] + dmg;
        if (v < cur[g]) cur[g] = v, choice[i][g] = static_cast<uint8_t>(c);
      }
    }
    prev.swap(cur);
  }
  // Walk back from the full budget.
  int64_t g = G;
  for (size_t i = T; i-- > 0;) {
    const int c = choice[i][g];
    pick[i] = c;
    const double ex = extra(i, c);
    if (ex > 0) g -= static_cast<int64_t>(std::ceil(ex / unit - 1e-9));
  }
  // Spend what the rounding left, best damage saved per bit first.
  double used = 0;
  for (size_t i = 0; i < T; ++i) used += base[i] + extra(i, pick[i]);
  for (;;) {
    double best = 0;
    size_t bi = 0, bc = 0;
    for (size_t i = 0; i < T; ++i)
      for (size_t c = 0; c < items[i].choices.size(); ++c) {
        const double dbits = extra(i, c) - extra(i, pick[i]);
        const double saved = items[i].choices[pick[i]].damage - items[i].choices[c].damage;
        if (saved <= 0 || used + dbits > budget_bits) continue;
        const double ratio = dbits <= 0 ? inf : saved / dbits;
        if (ratio > best) best = ratio, bi = i, bc = c;
      }
    if (best <= 0) break;
    used += extra(bi, bc) - extra(bi, pick[bi]);
    pick[bi] = static_cast<int>(bc);
  }
  return pick;
}

double plan_bits_per_weight(const QuantPlan& plan) {
  double bits = 0, n = 0;
  for (const QuantPlanEntry& e : plan.entries) {
    const double ne = static_cast<double>(elements(e.ne));
    bits += type_bits(e.target) * ne;
    n += ne;
  }
  return n > 0 ? bits / n : 0.0;
}

Result<TargetBpwReport> plan_target_bpw(const ModelFile& src, QuantPlan* plan, const ImportanceFor& importance,
                                        const TargetBpwOptions& opts, ThreadPool& pool) {
  if (!(opts.target_bpw > 0)) return Status::errorf("--target-bpw must be > 0, got {}", opts.target_bpw);
  std::vector<size_t> free_idx;
  for (size_t i = 0; i < plan->entries.size(); ++i)
    if (is_free_matrix(plan->entries[i])) free_idx.push_back(i);
  if (free_idx.empty()) return Status::error("--target-bpw: the plan has no quantized matrix to choose a type for");

  // The source in the layout the model runs (row transforms applied), free
  // matrices unquantized: what the errors and the probe measure against.
  QuantPlan base_plan = *plan;
  for (size_t i : free_idx) {
    QuantPlanEntry& e = base_plan.entries[i];
    if (e.transform == TensorTransform::kNone) e.target = e.source, e.method = QuantMethod::kCopy;
    else e.target = DType::kF32, e.method = QuantMethod::kConvert;
  }
  RtnQuantizer rtn;
  ImatrixQuantizer imq;
  const QuantizerFor qfor = [&](QuantMethod m) -> Quantizer* {
    return m == QuantMethod::kRtn ? static_cast<Quantizer*>(&rtn) : m == QuantMethod::kImatrix ? &imq : nullptr;
  };
  auto base = execute_quant_plan(std::make_unique<ModelFile>(src), base_plan, qfor, pool, importance);
  if (!base) return base.status().with_context("--target-bpw");

  TargetBpwReport rep;
  std::vector<std::vector<DType>> cands(free_idx.size());
  std::vector<std::vector<double>> errs(free_idx.size());
  for (size_t k = 0; k < free_idx.size(); ++k) {
    const QuantPlanEntry& e = plan->entries[free_idx[k]];
    for (DType c : opts.candidates)
      if (convertible_to(c) && dtype_block_size(c) > 1 && e.ne[0] % dtype_block_size(c) == 0 &&
          std::find(cands[k].begin(), cands[k].end(), c) == cands[k].end())
        cands[k].push_back(c);
    if (cands[k].empty())
      return Status::errorf("--target-bpw: no candidate type fits tensor '{}' (rows of {})", e.name, e.ne[0]);
    std::sort(cands[k].begin(), cands[k].end(), [](DType a, DType b) { return type_bits(a) < type_bits(b); });
    const float* imp = importance ? importance(e) : nullptr;
    auto er = weighted_errors(*(*base)->tensor(e.name), e, cands[k], imp, opts.imatrix_rounding, opts.sample_rows,
                              pool);
    if (!er) return er.status();
    errs[k] = std::move(*er);
    TargetBpwTensor t;
    t.name = e.name;
    // Probe type: the largest candidate at or below the target whose error is
    // not negligible (a source dequantized from that very type re-rounds to
    // itself with no error, which would make s_t 0 and every choice look
    // free), else the smallest candidate.
    size_t p = 0;
    for (size_t c = 0; c < cands[k].size(); ++c)
      if (type_bits(cands[k][c]) <= opts.target_bpw && errs[k][c] >= 0.05 * errs[k][0]) p = c;
    t.probe = cands[k][p];
    rep.tensors.push_back(t);
  }

  // The probe: KL of the model with one tensor at its probe type.
  const int64_t W = opts.probe_ctx;
  const int64_t n_win = W >= 2 ? static_cast<int64_t>(opts.probe_tokens.size()) / W : 0;
  if (!opts.probe_tokens.empty()) {
    if (W < 2 || W > 4096) return Status::errorf("--target-bpw probe window of {} positions: need 2 to 4096", W);
    if (n_win < 1)
      return Status::errorf("--target-bpw probe: {} tokens are fewer than one window of {}", opts.probe_tokens.size(),
                            W);
    std::vector<std::vector<int32_t>> wins;
    for (int64_t w = 0; w < n_win; ++w) {
      wins.emplace_back(opts.probe_tokens.begin() + w * W, opts.probe_tokens.begin() + (w + 1) * W);
      if (opts.bos_id >= 0) wins.back()[0] = opts.bos_id;
    }
    auto ref_model = Model::from_file(std::make_unique<ModelFile>(**base));
    if (!ref_model) return ref_model.status().with_context("--target-bpw probe");
    const int V = (*ref_model)->config().n_vocab;
    for (const auto& seq : wins)
      for (int32_t id : seq)
        if (id < 0 || id >= V) return Status::errorf("--target-bpw probe: token id {} outside the vocabulary", id);
    auto ref = window_logits(**ref_model, wins, pool);
    if (!ref) return ref.status();
    ref_model.value().reset();
    for (size_t k = 0; k < free_idx.size(); ++k) {
      const QuantPlanEntry& e = plan->entries[free_idx[k]];
      TargetBpwTensor& t = rep.tensors[k];
      QuantPlanEntry pe = e;
      pe.target = t.probe;
      pe.transform = TensorTransform::kNone;
      const float* imp = importance ? importance(e) : nullptr;
      Quantizer* qz = quantizer_for_type(t.probe, opts.imatrix_rounding && imp, rtn, imq);
      std::shared_ptr<void> owner;
      auto v = run_plan_entry(*(*base)->tensor(e.name), pe, qz, qz == &imq ? imp : nullptr, pool, &owner);
      if (!v) return v.status();
      auto mf = std::make_unique<ModelFile>(**base);
      mf->tensors[e.name] = *v;
      mf->owners.push_back(std::move(owner));
      auto m = Model::from_file(std::move(mf));
      if (!m) return m.status().with_context(e.name);
      auto lm = window_logits(**m, wins, pool);
      if (!lm) return lm.status();
      double kl = 0;
      for (int64_t w = 0; w < n_win; ++w)
        kl += compare_logits((*ref)[w].data(), (*lm)[w].data(), wins[w].data(), W, V).kl_mean;
      t.probe_kl = kl / static_cast<double>(n_win);
      const size_t p = std::find(cands[k].begin(), cands[k].end(), t.probe) - cands[k].begin();
      t.sensitivity = errs[k][p] > 0 ? t.probe_kl / errs[k][p] : 0.0;
      if (opts.progress) opts.progress(static_cast<int>(k + 1), static_cast<int>(free_idx.size()));
    }
    rep.probed = true;
  }

  // The allocation.
  std::vector<BpwItem> items(free_idx.size());
  double fixed_bits = 0, n_all = 0;
  for (size_t i = 0; i < plan->entries.size(); ++i) {
    const double ne = static_cast<double>(elements(plan->entries[i].ne));
    n_all += ne;
    if (!is_free_matrix(plan->entries[i])) fixed_bits += type_bits(plan->entries[i].target) * ne;
  }
  for (size_t k = 0; k < free_idx.size(); ++k) {
    items[k].n_elements = elements(plan->entries[free_idx[k]].ne);
    for (size_t c = 0; c < cands[k].size(); ++c)
      items[k].choices.push_back({cands[k][c], type_bits(cands[k][c]), rep.tensors[k].sensitivity * errs[k][c]});
  }
  double lo = fixed_bits;
  for (const BpwItem& it : items) lo += it.choices.front().bits * static_cast<double>(it.n_elements);
  if (opts.target_bpw * n_all < lo)
    return Status::errorf("--target-bpw {:.3f} is below the smallest this model reaches with the candidate types: "
                          "{:.3f} bpw",
                          opts.target_bpw, lo / n_all);
  auto pick = allocate_bpw(items, opts.target_bpw * n_all - fixed_bits);
  if (!pick) return pick.status();

  std::map<DType, double> by_type;
  for (size_t k = 0; k < free_idx.size(); ++k) {
    QuantPlanEntry& e = plan->entries[free_idx[k]];
    const BpwChoice& c = items[k].choices[(*pick)[k]];
    e.target = c.type;
    e.requested.reset();
    const float* imp = importance ? importance(e) : nullptr;
    if (e.target == e.source && e.transform == TensorTransform::kNone) e.method = QuantMethod::kCopy;
    else e.method = opts.imatrix_rounding && imp && can_quantize_imatrix(c.type) ? QuantMethod::kImatrix
                                                                                : QuantMethod::kRtn;
    rep.tensors[k].chosen = c.type;
    rep.tensors[k].damage = c.damage;
    rep.predicted_kl += c.damage;
    by_type[c.type] += static_cast<double>(items[k].n_elements);
  }
  // general.file_type: the type holding most of the chosen weights.
  DType main_type = by_type.begin()->first;
  for (const auto& [t, n] : by_type)
    if (n > by_type[main_type]) main_type = t;
  plan->file_type = main_type;
  for (auto& [key, value] : plan->metadata)
    if (key == "general.file_type") value = Metadata::make_int(llama_file_type(main_type), GgufType::kUint32);
  rep.bpw = plan_bits_per_weight(*plan);
  return rep;
}

}  // namespace ember
