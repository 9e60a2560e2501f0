// Cutting a model file down to one rank's shard; see shard.h.
#include "model/shard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "model/archs/arch_spec.h"
#include "model/archs/archs.h"
#include "model/archs/tensors.h"
#include "quant/sparse.h"

namespace ember {

std::string ModelShard::describe() const {
  std::string s;
  if (tp_size > 1) s = fmt::format("tensor-parallel rank {} of {}", tp_rank, tp_size);
  if (pipelined()) {
    if (!s.empty()) s += ", ";
    s += fmt::format("pipeline stage of layers {}-{} of {}", layer_begin, layer_end - 1, n_layer_total);
  }
  return s.empty() ? "the whole model" : s;
}

namespace {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// This rank's heads of one layer (whole-model counts in lc).
struct HeadSplit {
  int q0 = 0, q1 = 0;    // query heads
  int kv0 = 0, kv1 = 0;  // KV heads
};

Result<HeadSplit> split_heads(const LayerConfig& lc, int il, int rank, int n) {
  const int H = lc.n_head, Hkv = lc.n_head_kv;
  if (H % n != 0)
    return Status::errorf("tensor parallelism over {} ranks: layer {} has {} attention heads, not a multiple of {}", n,
                          il, H, n);
  HeadSplit s;
  s.q0 = rank * (H / n);
  s.q1 = s.q0 + H / n;
  if (Hkv % n == 0) {
    s.kv0 = rank * (Hkv / n);
    s.kv1 = s.kv0 + Hkv / n;
  } else if (n % Hkv == 0) {  // fewer KV heads than ranks: each rank holds the KV head of its query heads
    s.kv0 = rank / (n / Hkv);
    s.kv1 = s.kv0 + 1;
  } else {
    return Status::errorf("tensor parallelism over {} ranks: layer {} has {} KV heads: neither a multiple nor a "
                          "divisor of {}",
                          n, il, Hkv, n);
  }
  return s;
}

// The range of dimension `d` (whole-model sizes of layer il) this rank holds;
// `split` false: the dimension is replicated. kFfExp2 (a fused gate|up
// expert) gives the range within each half (the caller takes both).
Result<Range> dim_range(Dim d, const ModelConfig& cfg, int il, const ModelShard& sh, bool* split) {
  *split = true;
  const int n = sh.tp_size, r = sh.tp_rank;
  if (d == Dim::kVocab) return Range{sh.vocab_begin, sh.vocab_end};
  if (cfg.qk_norm_full && d == Dim::kQNorm) d = Dim::kQ;  // a QK-norm over the whole row: split with its rows
  if (cfg.qk_norm_full && d == Dim::kKNorm) d = Dim::kKv;
  switch (il < 0 ? Dim::kEmbd : d) {
    case Dim::kQ: case Dim::kKv: case Dim::kV: case Dim::kO: case Dim::kHead:
    case Dim::kFf: case Dim::kFfExp: case Dim::kFfExp2: case Dim::kFfShexp: break;
    default: *split = false; return Range{};
  }
  const LayerConfig& lc = cfg.layers[static_cast<size_t>(il)];
  // An FFN width (dense, an expert's, the shared expert's) in n equal parts.
  auto width = [&](int64_t w, const char* what) -> Result<Range> {
    if (w % n != 0)
      return Status::errorf("tensor parallelism over {} ranks: layer {} has {} of {}, not a multiple of {}", n, il,
                            what, w, n);
    return Range{r * (w / n), (r + 1) * (w / n)};
  };
  if (d == Dim::kFf) return width(lc.n_ff, "an FFN width");
  if (d == Dim::kFfExp || d == Dim::kFfExp2) return width(lc.n_ff_exp, "an expert FFN width");
  if (d == Dim::kFfShexp) return width(lc.n_ff_shexp, "a shared-expert FFN width");
  auto hs = split_heads(lc, il, r, n);
  if (!hs) return hs.status();
  const int64_t hd = cfg.head_dim, hdv = cfg.head_dim_v;
  switch (d) {
    case Dim::kQ: return Range{hs->q0 * hd, hs->q1 * hd};
    case Dim::kO: return Range{hs->q0 * hdv, hs->q1 * hdv};
    case Dim::kHead: return Range{hs->q0, hs->q1};  // one value per query head (attention sinks)
    case Dim::kKv: return Range{hs->kv0 * hd, hs->kv1 * hd};
    default: return Range{hs->kv0 * hdv, hs->kv1 * hdv};
  }
}

// Interleaved layouts store rows in groups: a row range must hold whole groups.
Status check_row_group(const TensorView& t, Range r, const std::string& what) {
  const int64_t g = dtype_row_group(t.type);
  if (g > 1 && (r.begin % g != 0 || r.size() % g != 0))
    return Status::errorf("{}: rows [{}, {}) cut {}'s groups of {} interleaved rows", what, r.begin, r.end,
                          dtype_name(t.type), g);
  return Status::ok();
}

// Rows [r.begin, r.end) of a matrix (or elements of a vector): a view.
Status row_view(TensorView* t, Range r, const std::string& what) {
  const int64_t rows = t->n_dims == 1 ? t->ne[0] : t->ne[1];
  if (r.begin < 0 || r.end > rows || r.size() <= 0)
    return Status::errorf("{}: rows [{}, {}) of {}", what, r.begin, r.end, rows);
  if (t->n_dims == 1) {
    if (r.begin % dtype_block_size(t->type) != 0)
      return Status::errorf("{}: element {} is inside a {} block", what, r.begin, dtype_name(t->type));
    t->data = static_cast<const uint8_t*>(t->data) + dtype_row_size(t->type, r.begin);
    t->ne[0] = r.size();
    t->nbytes = dtype_row_size(t->type, r.size());
    return Status::ok();
  }
  EMBER_RETURN_IF_ERROR(check_row_group(*t, r, what));
  t->data = static_cast<const uint8_t*>(t->data) + static_cast<size_t>(r.begin) * t->row_bytes();
  t->ne[1] = r.size();
  t->nbytes = static_cast<size_t>(r.size()) * t->row_bytes();
  return Status::ok();
}

// Columns [c.begin, c.end) of a sparse matrix (quant/sparse.h): each row's
// masks, scales and kept values of the part's 64-input blocks, re-packed
// into the capacity the part needs (its densest row's; a part may keep more
// than the whole row's average), so the type can change from sq8_c<C>.
Status sparse_column_copy(TensorView* t, Range c, const std::string& what, ModelFile* file) {
  if (c.begin % kSparseBlock != 0 || c.size() % kSparseBlock != 0)
    return Status::errorf("{}: its {} input columns split into parts of {} do not fall on {}'s {}-element blocks",
                          what, t->ne[0], c.size(), dtype_name(t->type), kSparseBlock);
  const int64_t rows = t->nrows();
  const int cap = sparse_slice_capacity(t->type, t->data, rows, t->ne[0], c.begin, c.size());
  const DType dst = dtype_is_sq4(t->type) ? dtype_sq4(cap) : dtype_sq8(cap);
  const size_t src_row = t->row_bytes(), dst_row = dtype_row_size(dst, c.size());
  std::shared_ptr<uint8_t[]> buf(new uint8_t[dst_row * static_cast<size_t>(rows)]);
  const uint8_t* src = static_cast<const uint8_t*>(t->data);
  for (int64_t i = 0; i < rows; ++i)
    EMBER_RETURN_IF_ERROR(sparse_slice_row(t->type, src + i * src_row, t->ne[0], c.begin, c.size(), dst,
                                           buf.get() + i * dst_row));
  t->type = dst;
  t->data = buf.get();
  t->ne[0] = c.size();
  t->nbytes = dst_row * static_cast<size_t>(rows);
  file->owners.push_back(std::move(buf));
  return Status::ok();
}

// Columns [c.begin, c.end) of every row: copied into owned memory, whole
// quantization blocks only.
Status column_copy(TensorView* t, Range c, const std::string& what, ModelFile* file) {
  if (dtype_is_sparse(t->type)) return sparse_column_copy(t, c, what, file);
  const int64_t block = dtype_block_size(t->type);
  if (dtype_row_group(t->type) > 1) return Status::errorf("{}: an interleaved layout cannot be split", what);
  if (c.begin % block != 0 || c.size() % block != 0)
    return Status::errorf("{}: its {} input columns split into parts of {} do not fall on {}'s {}-element blocks",
                          what, t->ne[0], c.size(), dtype_name(t->type), block);
  const size_t src_row = t->row_bytes(), off = dtype_row_size(t->type, c.begin);
  const size_t dst_row = dtype_row_size(t->type, c.size());
  const int64_t rows = t->nrows();
  std::shared_ptr<uint8_t[]> buf(new uint8_t[dst_row * static_cast<size_t>(rows)]);
  const uint8_t* src = static_cast<const uint8_t*>(t->data);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(buf.get() + i * dst_row, src + i * src_row + off, dst_row);
  t->data = buf.get();
  t->ne[0] = c.size();
  t->nbytes = dst_row * static_cast<size_t>(rows);
  file->owners.push_back(std::move(buf));
  return Status::ok();
}

// Rows `ranges` (in order, within each matrix of ne[1] rows: a 3-D stack of
// experts is cut the same way in every expert) copied into owned memory:
// the parts of a fused matrix, an expert's rows. Whole rows, so any
// quantization block survives; interleaved row groups must stay whole.
Status row_gather(TensorView* t, const std::vector<Range>& ranges, const std::string& what, ModelFile* file) {
  const int64_t rows = t->ne[1], mats = t->n_dims >= 3 ? t->ne[2] : 1;
  int64_t kept = 0;
  for (const Range& r : ranges) {
    if (r.begin < 0 || r.end > rows || r.size() <= 0)
      return Status::errorf("{}: rows [{}, {}) of {}", what, r.begin, r.end, rows);
    EMBER_RETURN_IF_ERROR(check_row_group(*t, r, what));
    kept += r.size();
  }
  const size_t rb = t->row_bytes();
  std::shared_ptr<uint8_t[]> buf(new uint8_t[rb * static_cast<size_t>(kept * mats)]);
  const uint8_t* src = static_cast<const uint8_t*>(t->data);
  uint8_t* dst = buf.get();
  for (int64_t m = 0; m < mats; ++m)
    for (const Range& r : ranges) {
      const size_t bytes = rb * static_cast<size_t>(r.size());
      std::memcpy(dst, src + (static_cast<size_t>(m * rows + r.begin)) * rb, bytes);
      dst += bytes;
    }
  t->data = buf.get();
  t->ne[1] = kept;
  t->nbytes = rb * static_cast<size_t>(kept * mats);
  file->owners.push_back(std::move(buf));
  return Status::ok();
}

// "blk.12.attn_q.weight" -> 12 (and the rest after "blk.12."); -1 if not a block tensor.
int block_of(const std::string& name, std::string* rest) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  size_t p = 4;
  int64_t v = 0;
  while (p < name.size() && p < 12 && name[p] >= '0' && name[p] <= '9') v = v * 10 + (name[p++] - '0');
  if (p == 4 || p >= name.size() || name[p] != '.') return -1;
  *rest = name.substr(p + 1);
  return static_cast<int>(v);
}

// Cuts one tensor of layer il (il < 0: a model-level one) whose dimensions
// are `dims` (ne[0] first): the last dimension split is a row view (or, in
// a 3-D stack of experts, the rows of each expert copied), another one a
// column copy. `fused`: a matrix that stacks the rows of these roles
// (TensorSpec::parts), each part cut by its own dimension.
Status shard_dims(TensorView* t, const Dim* dims, int n_dims, std::span<const TensorRole> fused, int il,
                  const ModelConfig& cfg, const ModelShard& sh, const std::string& what, ModelFile* file) {
  if (!fused.empty()) {
    std::vector<Range> ranges;
    const TensorSizes whole = tensor_sizes(cfg, il);
    int64_t off = 0;
    for (TensorRole p : fused) {
      const Dim d = role_info(p).ne[1];
      bool split = false;
      auto r = dim_range(d, cfg, il, sh, &split);
      if (!r) return r.status();
      const int64_t rows = whole.of(d);
      ranges.push_back(split ? Range{off + r->begin, off + r->end} : Range{off, off + rows});
      off += rows;
    }
    if (t->n_dims != 2 || t->ne[1] != off)
      return Status::errorf("{}: shape {}, expected {} rows (its parts stacked)", what, t->shape_string(), off);
    return row_gather(t, ranges, what, file);
  }
  for (int d = 0; d < n_dims; ++d) {
    bool split = false;
    auto r = dim_range(dims[d], cfg, il, sh, &split);
    if (!r) return r.status();
    if (!split) continue;
    if (d >= t->n_dims) return Status::errorf("{}: shape {} has no dimension {}", what, t->shape_string(), d);
    if (dims[d] == Dim::kFfExp2) {  // gate rows then up rows of each expert
      const int64_t F = t->ne[1] / 2;
      EMBER_RETURN_IF_ERROR(row_gather(t, {*r, Range{F + r->begin, F + r->end}}, what, file));
    } else if (d == n_dims - 1) {
      EMBER_RETURN_IF_ERROR(row_view(t, *r, what));
    } else if (d == 1) {
      EMBER_RETURN_IF_ERROR(row_gather(t, {*r}, what, file));
    } else {
      EMBER_RETURN_IF_ERROR(column_copy(t, *r, what, file));
    }
  }
  return Status::ok();
}

Status shard_tensor(TensorView* t, TensorRole role, const ArchSpec* spec, int il, const ModelConfig& cfg,
                    const ModelShard& sh, ModelFile* file) {
  const RoleInfo& ri = role_info(role);
  const std::string what = il >= 0 ? fmt::format("layer {} {}", il, ri.name) : std::string(ri.name);
  const TensorSpec* listed = spec ? spec->find(role) : nullptr;
  const std::span<const TensorRole> fused = listed ? listed->parts : std::span<const TensorRole>{};
  return shard_dims(t, ri.ne, ri.n_dims, fused, il, cfg, sh, what, file);
}

// One expert's own 2-D matrix (llama.cpp's per-expert names, Hugging Face
// checkpoints of one matrix per expert): gate / up split by rows (a view),
// down by columns.
Status shard_expert_matrix(TensorView* t, TensorRole exps, int il, int expert, const ModelConfig& cfg,
                           const ModelShard& sh, ModelFile* file) {
  const std::string what = fmt::format("layer {} expert {} {}", il, expert, role_info(exps).name);
  const Dim gate_up[2] = {Dim::kEmbd, Dim::kFfExp}, down[2] = {Dim::kFfExp, Dim::kEmbd};
  return shard_dims(t, exps == TensorRole::kFfnDownExps ? down : gate_up, 2, {}, il, cfg, sh, what, file);
}

}  // namespace

Status shard_model_file(ModelFile* file, ModelConfig* cfg, ModelShard* sh) {
  const int n = sh->tp_size;
  const int L = cfg->n_layer;
  sh->n_layer_total = L;
  if (sh->layer_end < 0) sh->layer_end = L;
  if (n < 1 || sh->tp_rank < 0 || sh->tp_rank >= n) return Status::errorf("tensor-parallel rank {} of {}", sh->tp_rank, n);
  if (sh->layer_begin < 0 || sh->layer_begin >= sh->layer_end || sh->layer_end > L)
    return Status::errorf("pipeline stage layers [{}, {}) of a {}-layer model", sh->layer_begin, sh->layer_end, L);
  if (!cfg->head_tokens.empty()) return Status::error("a truncated output head cannot be sharded");
  // LongRoPE (ModelConfig::rope_longrope): its factor tensors are
  // replicated like every RoPE table, and every rank uses the set rank 0's
  // context picks (the session start carries it: engine/parallel_runner.h).
  // A fused matrix (Phi-3's attn_qkv, gate|up) is cut part by part, a
  // QK-norm over whole projections (OLMoE, OLMo 2) with its rows (the
  // forward pass all-reduces the sums of squares), the experts by their
  // FFN width.
  if (n > 1 && !cfg->output_tokens.empty())
    return Status::error("tensor parallelism does not split a trimmed output vocabulary");
  const ArchSpec* spec = find_arch(cfg->arch);
  const TensorView* embd = file->tensor("token_embd.weight");
  if (!embd || embd->n_dims != 2) return Status::error("missing tensor 'token_embd.weight'");
  const int64_t V = embd->ne[1];
  sh->n_vocab_total = static_cast<int>(V);
  // Vocabulary shards of a multiple of 16 rows (the interleaved layouts' row group).
  const int64_t stride = ((V + n - 1) / n + 15) / 16 * 16;
  sh->vocab_stride = stride;
  sh->vocab_begin = std::min<int64_t>(V, stride * sh->tp_rank);
  sh->vocab_end = std::min<int64_t>(V, sh->vocab_begin + stride);
  if (sh->vocab_end <= sh->vocab_begin)
    return Status::errorf("tensor parallelism over {} ranks: a vocabulary of {} tokens leaves rank {} none", n, V,
                          sh->tp_rank);

  std::map<std::string, TensorView> kept;
  for (auto& [name, tv] : file->tensors) {
    TensorView t = tv;
    std::string rest;
    const int il = block_of(name, &rest);
    if (il >= 0 && (il < sh->layer_begin || il >= sh->layer_end)) continue;  // another stage's layer
    if (n > 1) {
      int layer = -1, expert = -1;
      const TensorRole role = role_from_gguf_name(name, &layer);
      if (role != TensorRole::kUnknown) {
        if (layer >= L) return Status::errorf("tensor '{}' names layer {} of a {}-layer model", name, layer, L);
        EMBER_RETURN_IF_ERROR(shard_tensor(&t, role, spec, layer, *cfg, *sh, file));
      } else if (const TensorRole exps = role_from_gguf_expert_name(name, &layer, &expert);
                 exps != TensorRole::kUnknown) {
        if (layer >= L) return Status::errorf("tensor '{}' names layer {} of a {}-layer model", name, layer, L);
        EMBER_RETURN_IF_ERROR(shard_expert_matrix(&t, exps, layer, expert, *cfg, *sh, file));
      }
    }
    std::string local = name;
    if (il >= 0) local = fmt::format("blk.{}.{}", il - sh->layer_begin, rest);
    t.name = local;
    kept.emplace(local, t);
  }
  file->tensors = std::move(kept);

  // The config of what is held: its layers, their local head counts and FFN widths.
  ModelConfig& c = *cfg;
  std::vector<LayerConfig> layers(c.layers.begin() + sh->layer_begin, c.layers.begin() + sh->layer_end);
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerConfig& lc = layers[i];
    const int il = sh->layer_begin + static_cast<int>(i);
    if (n > 1) {
      auto hs = split_heads(lc, il, sh->tp_rank, n);
      if (!hs) return hs.status();
      lc.kv_replicas = lc.n_head_kv % n == 0 ? 1 : n / lc.n_head_kv;
      lc.n_head = hs->q1 - hs->q0;
      lc.n_head_kv = hs->kv1 - hs->kv0;
      lc.n_ff /= n;  // (a MoE layer's dense width is unused)
      lc.n_ff_exp /= n;
      lc.n_ff_shexp /= n;
      const int64_t o = int64_t{lc.n_head} * c.head_dim_v;
      if (c.rotation.ffn_down && lc.n_ff % c.rotation.ffn_down != 0)
        return Status::errorf("layer {}: the FFN's Hadamard rotation of {} does not divide its {} columns per rank", il,
                              c.rotation.ffn_down, lc.n_ff);
      if (c.rotation.attn_out && o % c.rotation.attn_out != 0)
        return Status::errorf("layer {}: O's Hadamard rotation of {} does not divide its {} columns per rank", il,
                              c.rotation.attn_out, o);
    }
  }
  c.layers = std::move(layers);
  c.n_layer = static_cast<int>(c.layers.size());
  c.n_head = c.max_n_head();
  c.n_head_kv = c.max_n_head_kv();
  c.n_ff = c.max_n_ff();
  return Status::ok();
}

std::vector<int> balance_stages(const std::vector<double>& cost, int n_stages) {
  const int L = static_cast<int>(cost.size());
  n_stages = std::clamp(n_stages, 1, std::max(1, L));
  std::vector<double> prefix(static_cast<size_t>(L) + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the least largest stage cost of the first i layers in s stages; cut[s][i]: where the last begins.
  std::vector<std::vector<double>> best(n_stages + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(n_stages + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= n_stages; ++s)
    for (int i = s; i <= L; ++i)
      for (int j = s - 1; j < i; ++j) {
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {  // strict: the earliest cut among equals, for a stable answer
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
  std::vector<int> bounds(n_stages + 1, 0);
  bounds[n_stages] = L;
  for (int s = n_stages, i = L; s > 0; --s) {
    i = cut[s][i];
    bounds[s - 1] = i;
  }
  return bounds;
}

}  // namespace ember
