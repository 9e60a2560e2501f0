// Cutting a model file down to one rank's shard; see shard.h.
#include "model/shard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "model/archs/arch_spec.h"
#include "model/archs/archs.h"
#include "model/archs/tensors.h"

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
// `split` false: the dimension is replicated.
Result<Range> dim_range(Dim d, const ModelConfig& cfg, int il, const ModelShard& sh, bool* split) {
  *split = true;
  const int n = sh.tp_size, r = sh.tp_rank;
  if (d == Dim::kVocab) return Range{sh.vocab_begin, sh.vocab_end};
  if (il < 0 || (d != Dim::kQ && d != Dim::kKv && d != Dim::kV && d != Dim::kO && d != Dim::kFf)) {
    *split = false;
    return Range{};
  }
  const LayerConfig& lc = cfg.layers[static_cast<size_t>(il)];
  if (d == Dim::kFf) {
    if (lc.n_ff % n != 0)
      return Status::errorf("tensor parallelism over {} ranks: layer {} has an FFN width of {}, not a multiple of {}",
                            n, il, lc.n_ff, n);
    return Range{int64_t{r} * (lc.n_ff / n), int64_t{r + 1} * (lc.n_ff / n)};
  }
  auto hs = split_heads(lc, il, r, n);
  if (!hs) return hs.status();
  const int64_t hd = cfg.head_dim, hdv = cfg.head_dim_v;
  switch (d) {
    case Dim::kQ: return Range{hs->q0 * hd, hs->q1 * hd};
    case Dim::kO: return Range{hs->q0 * hdv, hs->q1 * hdv};
    case Dim::kKv: return Range{hs->kv0 * hd, hs->kv1 * hd};
    default: return Range{hs->kv0 * hdv, hs->kv1 * hdv};
  }
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
  t->data = static_cast<const uint8_t*>(t->data) + static_cast<size_t>(r.begin) * t->row_bytes();
  t->ne[1] = r.size();
  t->nbytes = static_cast<size_t>(r.size()) * t->row_bytes();
  return Status::ok();
}

// Columns [c.begin, c.end) of every row: copied into owned memory, whole
// quantization blocks only.
Status column_copy(TensorView* t, Range c, const std::string& what, ModelFile* file) {
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

Status shard_tensor(TensorView* t, TensorRole role, int il, const ModelConfig& cfg, const ModelShard& sh,
                    ModelFile* file) {
  const RoleInfo& ri = role_info(role);
  const std::string what = il >= 0 ? fmt::format("layer {} {}", il, ri.name) : std::string(ri.name);
  if (ri.kind == TensorKind::kExperts || ri.kind == TensorKind::kRouter)
    return Status::errorf("{}: tensor parallelism does not split Mixture-of-Experts tensors yet", what);
  for (int d = 0; d < ri.n_dims; ++d) {
    bool split = false;
    auto r = dim_range(ri.ne[d], cfg, il, sh, &split);
    if (!r) return r.status();
    if (!split) continue;
    if (d == ri.n_dims - 1) {
      EMBER_RETURN_IF_ERROR(row_view(t, *r, what));
    } else {
      EMBER_RETURN_IF_ERROR(column_copy(t, *r, what, file));
    }
  }
  return Status::ok();
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
  // LongRoPE's factors follow the context each process runs with
  // (Model::set_context_length), which the ranks do not agree on yet.
  if (file->tensor("rope_factors_long.weight"))
    return Status::error("tensor and pipeline parallelism do not support LongRoPE (rope_factors_long) models yet");
  if (n > 1) {
    // What the split by role would get wrong without an error: a fused
    // matrix (Phi-3's attn_qkv, gate|up) is one tensor whose row views
    // assume whole head counts; a whole-row QK-norm (OLMoE, OLMo 2) needs
    // the statistics of every rank's heads; a trimmed head scatters rows.
    if (const ArchSpec* spec = find_arch(cfg->arch))
      for (const TensorSpec& t : spec->block_tensors)
        if (!t.parts.empty())
          return Status::errorf("tensor parallelism does not split the fused matrices of '{}' yet", cfg->arch);
    if (cfg->qk_norm_full)
      return Status::errorf("tensor parallelism does not split a QK-norm over whole projections ('{}') yet", cfg->arch);
    if (!cfg->output_tokens.empty())
      return Status::error("tensor parallelism does not split a trimmed output vocabulary");
  }
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
      int layer = -1;
      const TensorRole role = role_from_gguf_name(name, &layer);
      if (role != TensorRole::kUnknown) {
        if (layer >= L) return Status::errorf("tensor '{}' names layer {} of a {}-layer model", name, layer, L);
        EMBER_RETURN_IF_ERROR(shard_tensor(&t, role, layer, *cfg, *sh, file));
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
      lc.n_head = hs->q1 - hs->q0;
      lc.n_head_kv = hs->kv1 - hs->kv0;
      lc.n_ff /= n;
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
