// Building, summarising and executing per-tensor quantization plans; see
// quant_plan.h.
#include "transform/quant_plan.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "core/check.h"

#include "kernels/registry.h"
#include "model/archs/archs.h"
#include "model/config.h"
#include "quant/quantize.h"
#include "transform/quantizer.h"

namespace ember {

namespace {

bool is_weight_matrix(const TensorView& t) {
  if (t.name.size() <= 7 || t.name.compare(t.name.size() - 7, 7, ".weight") != 0) return false;
  const TensorRole role = role_from_gguf_name(t.name, nullptr);
  const TensorKind kind = role == TensorRole::kUnknown ? TensorKind::kMatrix : role_info(role).kind;
  if (kind == TensorKind::kRouter) return false;  // MoE routers stay f32 (llama.cpp: ffn_gate_inp)
  return t.n_dims == 2 || (t.n_dims == 3 && kind == TensorKind::kExperts);
}

// One tensor the plan covers: a source tensor, or a 3-D expert tensor
// assembled from several (QuantPlanEntry::sources).
struct PlanItem {
  TensorView t;  // name, type and shape (data unset when assembled)
  std::vector<QuantPlanEntry::RowSource> sources;
};

// The source's tensors with its experts as llama.cpp's files have them:
// per-expert matrices (gguf_expert_tensor_name) stacked into one 3-D
// tensor per role and layer, a fused gate_up tensor split into its gate and
// up halves; a 3-D tensor already there wins. Sorted by name.
Result<std::vector<PlanItem>> plan_items(const ModelFile& src) {
  std::map<std::string, PlanItem> items;
  std::map<std::pair<TensorRole, int>, std::map<int, const TensorView*>> per_expert;
  for (const auto& [name, t] : src.tensors) {
    int layer = -1, expert = -1;
    const TensorRole er = role_from_gguf_expert_name(name, &layer, &expert);
    if (er != TensorRole::kUnknown) {
      per_expert[{er, layer}][expert] = &t;
      continue;
    }
    if (role_from_gguf_name(name, &layer) == TensorRole::kFfnGateUpExps && t.n_dims == 3 && t.ne[1] % 2 == 0) {
      const int64_t F = t.ne[1] / 2;
      for (const auto& [role, half] : {std::pair{TensorRole::kFfnGateExps, 0}, std::pair{TensorRole::kFfnUpExps, 1}}) {
        PlanItem it;
        it.t = t;
        it.t.name = gguf_tensor_name(role, layer);
        it.t.ne[1] = F;
        it.t.data = nullptr;
        it.t.nbytes = t.nbytes / 2;
        for (int64_t e = 0; e < t.ne[2]; ++e) it.sources.push_back({name, e * 2 * F + half * F});
        items.emplace(it.t.name, std::move(it));  // a 3-D tensor of that name wins (below)
      }
      continue;
    }
    PlanItem it;
    it.t = t;
    items[name] = std::move(it);
  }
  for (const auto& [key, experts] : per_expert) {
    const std::string name = gguf_tensor_name(key.first, key.second);
    if (items.count(name) && items[name].sources.empty()) continue;  // the 3-D tensor is there
    const TensorView& t0 = *experts.begin()->second;
    for (int e = 0; e < static_cast<int>(experts.size()); ++e) {
      auto it = experts.find(e);
      if (it == experts.end())
        return Status::errorf("tensor '{}' is missing (the experts of '{}' are numbered 0 .. {})",
                              gguf_expert_tensor_name(key.first, key.second, e), name, experts.size() - 1);
      const TensorView& t = *it->second;
      if (t.n_dims != 2 || t.type != t0.type || t.ne[0] != t0.ne[0] || t.ne[1] != t0.ne[1])
        return Status::errorf("tensor '{}' is {} {}, expert 0 {} {}: the experts of a matrix share one shape and type",
                              t.name, dtype_name(t.type), t.shape_string(), dtype_name(t0.type), t0.shape_string());
    }
    PlanItem it;
    it.t = t0;
    it.t.name = name;
    it.t.n_dims = 3;
    it.t.ne[2] = static_cast<int64_t>(experts.size());
    it.t.data = nullptr;
    it.t.nbytes = t0.nbytes * experts.size();
    for (const auto& [e, t] : experts) it.sources.push_back({t->name, 0});
    items[name] = std::move(it);
  }
  std::vector<PlanItem> out;
  for (auto& [name, it] : items) out.push_back(std::move(it));
  return out;
}

bool is_float_type(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Source row of output row r under kPermuteQkRows.
int64_t permuted_source_row(int64_t r, int64_t head_dim) {
  const int64_t h = r / head_dim, j = r % head_dim;
  const int64_t src_j = (j % 2 == 0) ? j / 2 : j / 2 + head_dim / 2;
  return h * head_dim + src_j;
}

// Whether Q/K rows need the HF -> GGUF permutation, and the head size.
Status qk_permutation(const ModelFile& src, bool* permute, int64_t* head_dim) {
  *permute = false;
  const std::string* arch = src.architecture();
  const ArchSpec* spec = arch ? find_arch(*arch) : nullptr;
  if (!spec || !spec->hf_permute_qk || src.format != "safetensors") return Status::ok();
  const std::string* rt = src.metadata.get_string(*arch + ".rope.type");
  if (!rt || *rt != "neox") return Status::ok();
  const int64_t n_embd = src.metadata.get_int(*arch + ".embedding_length").value_or(0);
  const int64_t n_head = src.metadata.get_int(*arch + ".attention.head_count").value_or(1);
  *head_dim = src.metadata.get_int(*arch + ".attention.key_length").value_or(n_head ? n_embd / n_head : 0);
  if (*head_dim <= 0 || *head_dim % 2) return Status::error("cannot determine the head size to permute Q/K");
  *permute = true;
  return Status::ok();
}

}  // namespace

QuantMethod method_from_f32(DType target) {
  if (target == DType::kF32) return QuantMethod::kCopy;
  if (target == DType::kF16 || target == DType::kBF16) return QuantMethod::kConvert;
  return QuantMethod::kRtn;
}

void replace_with_f32(ModelFile* f, const std::string& name, std::vector<float> v) {
  TensorView t = *f->tensor(name);
  EMBER_CHECK(static_cast<int64_t>(v.size()) == t.nelements());
  auto buf = std::make_shared<std::vector<float>>(std::move(v));
  t.type = DType::kF32;
  t.data = buf->data();
  t.nbytes = buf->size() * sizeof(float);
  f->tensors[name] = t;
  f->owners.push_back(std::move(buf));
}

std::vector<float> read_f32_rows(const TensorView& t) {
  const int64_t n_in = t.ne[0], n_out = t.nrows();
  std::vector<float> w(static_cast<size_t>(n_in * n_out));
  if (t.type == DType::kF32) std::memcpy(w.data(), t.data, w.size() * sizeof(float));
  else
    for (int64_t r = 0; r < n_out; ++r) dequantize_row_ref(t.type, t.row(r), w.data() + r * n_in, n_in);
  return w;
}

void replace_tensor(ModelFile* f, const std::string& name, DType type, std::shared_ptr<uint8_t[]> data, size_t bytes) {
  TensorView v = *f->tensor(name);
  v.type = type;
  v.data = data.get();
  v.nbytes = bytes;
  f->tensors[name] = v;
  f->owners.push_back(std::static_pointer_cast<void>(std::shared_ptr<uint8_t>(data, data.get())));
}

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::kCopy: return "copy";
    case QuantMethod::kConvert: return "convert";
    case QuantMethod::kRtn: return "rtn";
    case QuantMethod::kImatrix: return "imatrix";
    case QuantMethod::kGptq: return "gptq";
    case QuantMethod::kAwq: return "awq";
  }
  return "?";
}

DType fallback_row_type(DType type, int64_t n_per_row) {
  if (n_per_row % dtype_block_size(type) == 0) return type;
  DType fb;
  switch (type) {
    case DType::kQ4_K: fb = DType::kQ5_0; break;
    case DType::kQ5_K: fb = DType::kQ5_1; break;
    case DType::kQ6_K: fb = DType::kQ8_0; break;
    case DType::kQ2_K:
    case DType::kQ3_K: fb = DType::kQ4_0; break;
    default: fb = DType::kF16; break;
  }
  return n_per_row % dtype_block_size(fb) == 0 ? fb : DType::kF16;
}

bool convertible_to(DType t) {
  if (t == DType::kQ8_1 || t == DType::kQ8_K) return false;
  if (t == DType::kF32) return true;
  return can_quantize(t);
}

// The 3-D expert tensors, or one expert's matrix under llama.cpp's
// per-expert names ("blk.3.ffn_gate.5.weight"); not the shared expert.
static bool is_expert_matrix(const std::string& name, TensorRole role) {
  if (role == TensorRole::kFfnGateExps || role == TensorRole::kFfnUpExps || role == TensorRole::kFfnDownExps ||
      role == TensorRole::kFfnGateUpExps)
    return true;
  int layer = -1, expert = -1;
  return role_from_gguf_expert_name(name, &layer, &expert) != TensorRole::kUnknown;
}

int llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 14;
    case DType::kQ5_K: return 16;
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    case DType::kMXFP4: return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    default: return 0;
  }
}

Result<QuantPlan> plan_quantization(const ModelFile& src, const ConvertOptions& opts) {
  const DType base = opts.recipe ? opts.recipe->base : opts.type;
  if (!convertible_to(base)) return Status::errorf("cannot convert to type {}", dtype_name(base));
  QuantPlan plan;
  plan.file_type = base;
  std::vector<std::pair<std::regex, DType>> overrides;
  for (const TensorTypeOverride& o : opts.tensor_types) {
    if (!convertible_to(o.type)) return Status::errorf("cannot convert to type {}", dtype_name(o.type));
    try {
      overrides.emplace_back(std::regex(o.pattern), o.type);
    } catch (const std::regex_error& err) {
      return Status::errorf("--tensor-type pattern '{}': {}", o.pattern, err.what());
    }
  }
  QuantRecipeModel rm;
  rm.tied = src.tensors.find("output.weight") == src.tensors.end();
  rm.has_imatrix = opts.has_imatrix;
  if (opts.recipe) {
    auto cfg = config_from_metadata(src.metadata);
    if (!cfg) return cfg.status().with_context("quantization recipe");
    rm.n_layer = cfg->n_layer;
    if (!cfg->layers.empty() && cfg->layers[0].n_head_kv > 0) rm.n_gqa = cfg->layers[0].n_head / cfg->layers[0].n_head_kv;
    rm.is_70b = cfg->arch == "llama" && cfg->n_layer == 80 && cfg->n_head != cfg->n_head_kv;
    rm.n_expert = cfg->max_n_expert();
  }
  // llama.cpp numbers the attn_v and ffn_down tensors its rules see (those
  // no --tensor-type names) in layer order; the rules use that number.
  std::map<std::string, int> rule_index;
  if (opts.recipe) {
    std::map<TensorRole, std::vector<std::pair<int, std::string>>> seq;
    for (const auto& [name, t] : src.tensors) {
      int layer = -1;
      const TensorRole role = role_from_gguf_name(name, &layer);
      if (!is_weight_matrix(t) || (role != TensorRole::kAttnV && role != TensorRole::kFfnDown)) continue;
      if (role == TensorRole::kFfnDown && rm.n_expert > 1) continue;  // llama.cpp: the layer index with experts
      bool manual = false;
      for (const auto& ov : overrides) manual |= !is_float_type(base) && std::regex_search(name, ov.first);
      if (!manual) seq[role].emplace_back(layer, name);
    }
    for (auto& [role, v] : seq) {
      std::sort(v.begin(), v.end());
      for (size_t i = 0; i < v.size(); ++i) rule_index[v[i].second] = static_cast<int>(i);
    }
  }
  bool permute_qk = false;
  int64_t head_dim = 0;
  EMBER_RETURN_IF_ERROR(qk_permutation(src, &permute_qk, &head_dim));
  if (permute_qk) plan.metadata.emplace_back(*src.architecture() + ".rope.type", Metadata::make_string("normal"));
  for (DType t : {opts.output_type.value_or(base), opts.token_embd_type.value_or(base)})
    if (!convertible_to(t)) return Status::errorf("cannot convert to type {}", dtype_name(t));

  const bool tied = src.tensors.find("output.weight") == src.tensors.end();
  Result<std::vector<PlanItem>> items = plan_items(src);
  if (!items) return items.status();
  for (PlanItem& item : *items) {
    const TensorView& t = item.t;
    const std::string& name = t.name;
    QuantPlanEntry e;
    e.name = name;
    e.sources = std::move(item.sources);
    e.role = role_from_gguf_name(name, &e.layer);
    e.ne.assign(t.ne, t.ne + t.n_dims);
    e.source = t.type;
    e.target = DType::kF32;
    if (is_weight_matrix(t)) {
      e.target = base;
      const bool head = e.role == TensorRole::kOutput || (tied && e.role == TensorRole::kTokenEmbd);
      bool fixed = true;
      if (opts.recipe) {  // llama-quantize's order
        if (e.role == TensorRole::kTokenEmbd && opts.token_embd_type) e.target = *opts.token_embd_type;
        else if (e.role == TensorRole::kOutput && opts.output_type) e.target = *opts.output_type;
        else fixed = false;
      } else if (head && opts.output_type) {
        e.target = *opts.output_type;
      } else if (e.role == TensorRole::kTokenEmbd && opts.token_embd_type) {
        e.target = *opts.token_embd_type;
      } else {
        fixed = false;
      }
      bool manual = false;
      if (!fixed && !is_float_type(base))
        for (const auto& [re, type] : overrides)
          if (std::regex_search(name, re)) {
            e.target = type, manual = true;
            break;
          }
      if (!fixed && !manual && opts.recipe)
        e.target = head && opts.output_type ? *opts.output_type
                                            : quant_recipe_type(*opts.recipe, rm, e.role,
                                                                                rule_index.count(name) ? rule_index[name] : e.layer,
                                                                                t.ne[0]);
      // MXFP4 is an expert type (llama-quantize's MXFP4_MOE): the experts
      // take it, the other matrices q8_0, unless named otherwise or --pure.
      if (!fixed && !manual && !opts.recipe && !opts.pure && e.target == DType::kMXFP4 &&
          !is_expert_matrix(name, e.role))
        e.target = DType::kQ8_0;
      e.pinned = fixed || manual;
      const DType fit = fallback_row_type(e.target, t.ne[0]);
      if (fit != e.target) {
        if (!opts.allow_fallback)
          return Status::errorf("tensor '{}': row length {} is not a multiple of {}'s block size {}", name, t.ne[0],
                                dtype_name(e.target), dtype_block_size(e.target));
        e.requested = e.target;
        e.target = fit;
      }
    }
    // The biases of Q and K follow their rows (an HF llama checkpoint with
    // attention_bias).
    if (permute_qk && (e.role == TensorRole::kAttnQ || e.role == TensorRole::kAttnK ||
                       e.role == TensorRole::kAttnQBias || e.role == TensorRole::kAttnKBias)) {
      e.transform = TensorTransform::kPermuteQkRows;
      e.head_dim = head_dim;
    }
    if (e.target == e.source && e.transform == TensorTransform::kNone) {
      e.method = QuantMethod::kCopy;
    } else {
      if (!kernels(t.type).dequantize_row && t.type != DType::kF32)
        return Status::errorf("tensor '{}': cannot read type {}", name, dtype_name(t.type));
      e.method = is_float_type(e.target) ? QuantMethod::kConvert : QuantMethod::kRtn;
    }
    plan.entries.push_back(std::move(e));
  }
  plan.metadata.emplace_back(
      "general.file_type",
      Metadata::make_int(opts.recipe ? opts.recipe->file_type : llama_file_type(base), GgufType::kUint32));
  plan.metadata.emplace_back("general.quantization_version", Metadata::make_int(2, GgufType::kUint32));
  return plan;
}

std::string quant_plan_summary(const QuantPlan& plan) {
  struct Count {
    int n = 0, fallback = 0;
    std::map<std::string, int> from;
  };
  std::map<std::string, Count> by_type;
  std::map<std::string, int> by_method;
  int permuted = 0;
  for (const QuantPlanEntry& e : plan.entries) {
    Count& c = by_type[dtype_name(e.target)];
    ++c.n;
    if (e.requested) ++c.from[dtype_name(*e.requested)];
    ++by_method[quant_method_name(e.method)];
    permuted += e.transform == TensorTransform::kPermuteQkRows;
  }
  std::string out = fmt::format("plan: {} tensors:", plan.entries.size());
  for (const auto& [type, c] : by_type) {
    out += fmt::format(" {} {}", c.n, type);
    for (const auto& [from, n] : c.from) out += fmt::format(" ({} by fallback from {})", n, from);
    out += ",";
  }
  out.back() = ';';
  for (const auto& [m, n] : by_method) out += fmt::format(" {} {},", m, n);
  out.pop_back();
  if (permuted) out += fmt::format("; Q/K rows permuted in {} tensors", permuted);
  return out;
}

namespace {

// An entry's rows in the source type (row(r): row r of the entry's rows).
using RowFn = std::function<const uint8_t*(int64_t r)>;

Result<TensorView> run_rows(const TensorView& t, const RowFn& row, const QuantPlanEntry& e, Quantizer* q,
                            const float* importance, ThreadPool& pool, std::shared_ptr<void>* owner) {
  const KernelSet& in_k = kernels(t.type);
  const int64_t n_per_row = t.ne[0], n_rows = t.nrows();
  // Rows of one stacked matrix: chunks never span two (each has its own
  // calibration statistics).
  const int64_t mat_rows = e.n_matrices() > 1 ? t.ne[1] : n_rows;
  const size_t out_row = dtype_row_size(e.target, n_per_row);
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[out_row * n_rows]);
  uint8_t* dst = buf.get();
  constexpr int64_t kChunk = 16;
  const int64_t chunks_per_mat = (mat_rows + kChunk - 1) / kChunk;
  const int64_t n_chunks = chunks_per_mat * (n_rows / mat_rows);
  std::vector<std::vector<float>> tmp(pool.size(), std::vector<float>(kChunk * n_per_row));
  std::vector<Status> errors(pool.size());
  pool.parallel_for(n_chunks, 1, [&](int64_t cb, int64_t ce, int ith) {
    for (int64_t c = cb; c < ce && errors[ith]; ++c) {
      const int64_t mat = c / chunks_per_mat;
      const int64_t r0 = mat * mat_rows + (c % chunks_per_mat) * kChunk;
      const int64_t nr = std::min(kChunk, (mat + 1) * mat_rows - r0);
      float* rows = tmp[ith].data();
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = r0 + i;
        const int64_t sr = e.transform == TensorTransform::kPermuteQkRows ? permuted_source_row(r, e.head_dim) : r;
        float* out = rows + i * n_per_row;
        if (t.type == DType::kF32) std::memcpy(out, row(sr), n_per_row * sizeof(float));
        else in_k.dequantize_row(row(sr), out, n_per_row);
      }
      uint8_t* d = dst + r0 * out_row;
      if (!q) {  // float conversion
        for (int64_t i = 0; i < nr; ++i) {
          if (e.target == DType::kF32) std::memcpy(d + i * out_row, rows + i * n_per_row, out_row);
          else quantize_row_ref(e.target, rows + i * n_per_row, d + i * out_row, n_per_row);
        }
        continue;
      }
      QuantTensorContext ctx;
      ctx.entry = &e;
      ctx.row0 = r0;
      ctx.importance = importance ? importance + mat * n_per_row : nullptr;
      errors[ith] = q->quantize_rows(rows, nr, n_per_row, e.target, ctx, d);
    }
  });
  for (const Status& st : errors)
    if (!st) return st.with_context(e.name);
  TensorView v = t;
  v.type = e.target;
  v.data = dst;
  v.nbytes = out_row * n_rows;
  *owner = std::static_pointer_cast<void>(std::shared_ptr<uint8_t>(buf, buf.get()));
  return v;
}

// The shape and type of an entry's source rows (the tensor, or the
// assembled one), named after the entry.
TensorView entry_view(const QuantPlanEntry& e) {
  TensorView t;
  t.name = e.name;
  t.type = e.source;
  t.n_dims = static_cast<int>(e.ne.size());
  for (size_t d = 0; d < e.ne.size() && d < 4; ++d) t.ne[d] = e.ne[d];
  t.nbytes = t.row_bytes() * static_cast<size_t>(t.nrows());
  return t;
}

}  // namespace

const uint8_t* plan_entry_row(const ModelFile& src, const QuantPlanEntry& e, int64_t r) {
  if (e.sources.empty()) {
    const TensorView* t = src.tensor(e.name);
    return t && r >= 0 && r < t->nrows() ? t->row(r) : nullptr;
  }
  const int64_t per = e.ne.size() >= 2 ? e.ne[1] : 1;
  const int64_t m = r / per;
  if (r < 0 || m >= static_cast<int64_t>(e.sources.size())) return nullptr;
  const TensorView* t = src.tensor(e.sources[m].tensor);
  const int64_t sr = e.sources[m].row0 + r % per;
  return t && sr < t->nrows() ? t->row(sr) : nullptr;
}

Result<TensorView> run_plan_entry(const TensorView& t, const QuantPlanEntry& e, Quantizer* q, const float* importance,
                                  ThreadPool& pool, std::shared_ptr<void>* owner) {
  return run_rows(t, [&](int64_t r) { return t.row(r); }, e, q, importance, pool, owner);
}

Result<TensorView> run_plan_entry(const ModelFile& src, const QuantPlanEntry& e, Quantizer* q,
                                  const float* importance, ThreadPool& pool, std::shared_ptr<void>* owner) {
  if (e.sources.empty()) {
    const TensorView* t = src.tensor(e.name);
    if (!t) return Status::errorf("tensor '{}' is missing", e.name);
    return run_plan_entry(*t, e, q, importance, pool, owner);
  }
  return run_rows(entry_view(e), [&](int64_t r) { return plan_entry_row(src, e, r); }, e, q, importance, pool,
                  owner);
}

Result<std::unique_ptr<ModelFile>> execute_quant_plan(std::unique_ptr<ModelFile> src, const QuantPlan& plan,
                                                      const QuantizerFor& quantizer_for, ThreadPool& pool,
                                                      const ImportanceFor& importance_for) {
  auto out = std::make_unique<ModelFile>();
  out->path = src->path;
  out->format = "gguf";
  out->metadata = src->metadata;
  for (const auto& [key, value] : plan.metadata) out->metadata.set(key, value);

  for (const QuantPlanEntry& e : plan.entries) {  // all checks before any work
    const TensorView* t = src->tensor(e.name);
    if (!e.sources.empty()) {
      // An assembled tensor: every source there, of the entry's type, with its rows.
      const int64_t per = e.ne.size() == 3 ? e.ne[1] : -1;
      bool ok = per > 0 && static_cast<int64_t>(e.sources.size()) == e.ne[2];
      for (const QuantPlanEntry::RowSource& rs : e.sources) {
        const TensorView* st = ok ? src->tensor(rs.tensor) : nullptr;
        ok = st && st->type == e.source && st->ne[0] == e.ne[0] && rs.row0 >= 0 && rs.row0 + per <= st->nrows();
      }
      if (!ok) return Status::errorf("tensor '{}': the plan does not match the model", e.name);
      continue;
    }
    if (!t || t->type != e.source || std::vector<int64_t>(t->ne, t->ne + t->n_dims) != e.ne)
      return Status::errorf("tensor '{}': the plan does not match the model", e.name);
    if (e.method == QuantMethod::kCopy && e.target != e.source)
      return Status::errorf("tensor '{}': a copy cannot change the type", e.name);
    if (e.method == QuantMethod::kConvert && !is_float_type(e.target))
      return Status::errorf("tensor '{}': {} is not a float type", e.name, dtype_name(e.target));
    if (e.method != QuantMethod::kCopy && t->type != DType::kF32 && !kernels(t->type).dequantize_row)
      return Status::errorf("tensor '{}': cannot read type {}", e.name, dtype_name(t->type));
  }
  for (const QuantPlanEntry& e : plan.entries) {
    if (!e.sources.empty()) {  // an assembled tensor: its rows copied, converted or quantized
      Quantizer* q = nullptr;
      if (e.method != QuantMethod::kConvert && e.method != QuantMethod::kCopy) {
        q = quantizer_for(e.method);
        if (!q || !q->supports(e.target))
          return Status::errorf("tensor '{}': no {} quantizer for {}", e.name, quant_method_name(e.method),
                                dtype_name(e.target));
      }
      std::shared_ptr<void> owner;
      TensorView done;
      if (e.method == QuantMethod::kCopy) {  // the bytes as they are
        done = entry_view(e);
        auto buf = std::make_shared<std::vector<uint8_t>>(done.nbytes);
        for (int64_t r = 0; r < done.nrows(); ++r)
          std::memcpy(buf->data() + r * done.row_bytes(), plan_entry_row(*src, e, r), done.row_bytes());
        done.data = buf->data();
        owner = buf;
      } else {
        auto v = run_plan_entry(*src, e, q, importance_for && q ? importance_for(e) : nullptr, pool, &owner);
        if (!v) return v.status();
        done = *v;
      }
      out->tensors[e.name] = done;
      out->owners.push_back(std::move(owner));
      continue;
    }
    const TensorView& t = *src->tensor(e.name);
    if (e.method == QuantMethod::kCopy) {
      out->tensors[e.name] = t;
      continue;
    }
    Quantizer* q = nullptr;
    if (e.method != QuantMethod::kConvert) {
      q = quantizer_for(e.method);
      if (!q || !q->supports(e.target))
        return Status::errorf("tensor '{}': no {} quantizer for {}", e.name, quant_method_name(e.method),
                              dtype_name(e.target));
    }
    const float* importance = importance_for && q ? importance_for(e) : nullptr;
    const KernelSet& in_k = kernels(t.type);
    if (e.transform == TensorTransform::kPermuteQkRows && t.n_dims == 1) {
      // A Q / K bias: its elements are the rows to permute; stored as f32.
      const int64_t n = t.ne[0];
      if (e.target != DType::kF32 || e.head_dim <= 0 || n % e.head_dim != 0)
        return Status::errorf("tensor '{}': cannot permute a bias of {} elements by heads of {}", e.name, n,
                              e.head_dim);
      std::vector<float> in(n);
      if (t.type == DType::kF32) std::memcpy(in.data(), t.data, n * sizeof(float));
      else in_k.dequantize_row(t.data, in.data(), n);
      auto vec = std::make_shared<std::vector<float>>(n);
      for (int64_t r = 0; r < n; ++r) (*vec)[r] = in[permuted_source_row(r, e.head_dim)];
      TensorView v = t;
      v.type = DType::kF32;
      v.data = vec->data();
      v.nbytes = static_cast<size_t>(n) * sizeof(float);
      out->tensors[e.name] = v;
      out->owners.push_back(std::move(vec));
      continue;
    }
    std::shared_ptr<void> owner;
    auto v = run_plan_entry(t, e, q, importance, pool, &owner);
    if (!v) return v.status();
    out->tensors[e.name] = *v;
    out->owners.push_back(std::move(owner));
  }
  std::shared_ptr<ModelFile> keep(std::move(src));
  out->owners.push_back(std::static_pointer_cast<void>(keep));
  return out;
}

}  // namespace ember
