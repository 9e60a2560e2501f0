// Model loading: config from metadata, weights bound and checked, RoPE
// frequencies per layer; see model.h. The forward pass is forward.cpp and
// layers/.
#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/interleave.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// What the forward pass runs: every layer's sizes consistent with its
// weights, GQA head counts, its norms present, plain linears or the shards
// `shard` says this process holds (their local shapes are the config's).
Status check_forward_support(const ModelConfig& c, const ModelWeights& w, const ModelShard& shard) {
  if (static_cast<int>(c.layers.size()) != c.n_layer || static_cast<int>(w.layers.size()) != c.n_layer)
    return Status::errorf("config has {} layer entries and the weights {}, expected {}", c.layers.size(),
                          w.layers.size(), c.n_layer);
  const bool sharded = shard.tensor_parallel();
  // `what`: "layer 3 attn_q", "output".
  auto check_linear = [&](const Linear& l, const std::string& what, int64_t n_out, int64_t n_in) -> Status {
    if (!l.weight) return Status::errorf("{}: no weight", what);
    if (!l.is_plain() && (!sharded || l.shard.n_ranks != shard.tp_size || l.shard.rank != shard.tp_rank))
      return Status::errorf("{}: a tensor-parallel shard ({} of {}) in a model that holds {}", what, l.shard.rank,
                            l.shard.n_ranks, shard.describe());
    if (l.n_out() != n_out || l.n_in() != n_in)
      return Status::errorf("{}: weight is [{}, {}] (out, in), the config needs [{}, {}]", what, l.n_out(), l.n_in(),
                            n_out, n_in);
    return Status::ok();
  };
  const int64_t E = c.n_embd;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerConfig& lc = c.layers[il];
    const LayerWeights& l = w.layers[il];
    if (lc.n_head <= 0 || lc.n_head_kv <= 0 || lc.n_head % lc.n_head_kv != 0 || lc.n_ff <= 0)
      return Status::errorf("layer {}: n_head {}, n_head_kv {}, n_ff {}: need positive sizes and n_head a multiple "
                            "of n_head_kv",
                            il, lc.n_head, lc.n_head_kv, lc.n_ff);
    if (!l.attn_norm || !l.ffn_norm || (c.qk_norm && (!l.q_norm || !l.k_norm)))
      return Status::errorf("layer {}: missing norm weights", il);
    const struct {
      const Linear& lin;
      LinearRole role;
      int64_t n_out, n_in;
    } linears[] = {
        {l.q, LinearRole::kQ, lc.n_q_dim(c.head_dim), E},
        {l.k, LinearRole::kK, lc.n_kv_dim(c.head_dim), E},
        {l.v, LinearRole::kV, lc.n_v_dim(c.head_dim_v), E},
        {l.o, LinearRole::kO, E, static_cast<int64_t>(lc.n_head) * c.head_dim_v},
        {l.gate, LinearRole::kGate, lc.n_ff, E},
        {l.up, LinearRole::kUp, lc.n_ff, E},
        {l.down, LinearRole::kDown, E, lc.n_ff},
    };
    for (const auto& x : linears)
      EMBER_RETURN_IF_ERROR(check_linear(x.lin, fmt::format("layer {} {}", il, linear_role_name(x.role)), x.n_out,
                                         x.n_in));
  }
  if (!w.tok_embd || !w.output_norm) return Status::error("missing token embeddings or output norm");
  if (!shard.has_head()) return w.output ? Status::error("a pipeline stage without the head holds an output matrix")
                                         : Status::ok();
  for (size_t i = 0; i < c.head_tokens.size(); ++i)
    if (c.head_tokens[i] < 0 || c.head_tokens[i] >= c.n_vocab || (i > 0 && c.head_tokens[i] <= c.head_tokens[i - 1]))
      return Status::errorf("truncated output head: token {} at row {} is out of order or out of range [0, {})",
                            c.head_tokens[i], i, c.n_vocab);
  const int64_t head_rows = sharded ? shard.vocab_end - shard.vocab_begin : c.n_logits();
  EMBER_RETURN_IF_ERROR(check_linear(w.output, linear_role_name(LinearRole::kOutput), head_rows, E));
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelShard& shard) {
  auto file = open_model_file(path);
  if (!file) return file.status();
  auto m = from_file(std::move(file.value()), shard);
  if (!m) return m.status().with_context(path);
  return m;
}

Result<std::unique_ptr<Model>> Model::from_file(std::unique_ptr<ModelFile> file, const ModelShard& shard) {
  auto cfg = config_from_metadata(file->metadata);
  if (!cfg) return cfg.status();
  ModelShard sh = shard;
  sh.n_layer_total = cfg->n_layer;
  if (sh.layer_end < 0) sh.layer_end = cfg->n_layer;
  const bool sharded = !sh.whole();
  if (sharded) EMBER_RETURN_IF_ERROR(shard_model_file(file.get(), &cfg.value(), &sh).with_context(sh.describe()));
  auto w = bind_weights(*file, &cfg.value());
  if (!w) return w.status();
  if (sharded) {
    ModelWeights& mw = *w.value();
    cfg->n_vocab = sh.n_vocab_total;  // the binder read the shard's rows
    const LinearShard rows{LinearShard::Split::kRows, sh.tp_rank, sh.tp_size};
    const LinearShard cols{LinearShard::Split::kCols, sh.tp_rank, sh.tp_size};
    if (sh.tensor_parallel()) {
      for (LayerWeights& l : mw.layers) {
        for (Linear* lin : {&l.q, &l.k, &l.v, &l.gate, &l.up}) lin->shard = rows;
        for (Linear* lin : {&l.o, &l.down}) {
          lin->shard = cols;
          if (sh.tp_rank != 0) lin->bias = nullptr;  // added once, by rank 0, before the all-reduce
        }
      }
      mw.output.shard = rows;
    }
    if (!sh.has_head()) mw.output = Linear{};
  }
  return from_parts(std::move(cfg.value()), std::move(w.value()), std::move(file), sh);
}

Result<std::unique_ptr<Model>> Model::from_parts(ModelConfig cfg, std::unique_ptr<ModelWeights> weights,
                                                 std::unique_ptr<ModelFile> file, const ModelShard& shard) {
  if (!weights || !file) return Status::error("model: missing weights or file");
  ModelShard sh = shard;
  if (sh.n_layer_total == 0) sh.n_layer_total = cfg.n_layer;
  if (sh.layer_end < 0) sh.layer_end = sh.n_layer_total;
  EMBER_RETURN_IF_ERROR(check_forward_support(cfg, *weights, sh));
  auto m = std::unique_ptr<Model>(new Model());
  m->cfg_ = std::move(cfg);
  m->shard_ = sh;
  m->weights_ = std::move(weights);
  m->file_ = std::move(file);

  EMBER_RETURN_IF_ERROR(m->set_activation_bits(m->cfg_.act_bits));
  const ModelConfig& c = m->cfg_;
  const int half = c.n_rot / 2;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerConfig& l = c.layers[il];
    std::vector<float> f(half);
    for (int i = 0; i < half; ++i) {
      double inv = std::pow(static_cast<double>(l.rope_base), -2.0 * i / c.n_rot) * l.rope_freq_scale;
      if (l.use_rope_freq_factors && m->weights_->rope_freqs) inv /= m->weights_->rope_freqs[i];
      f[i] = static_cast<float>(inv);
    }
    int table = m->n_rope_tables_;
    for (int j = 0; j < il; ++j)
      if (m->inv_freq_[j] == f) table = m->rope_table_[j];
    if (table == m->n_rope_tables_) ++m->n_rope_tables_;
    m->rope_table_.push_back(table);
    m->inv_freq_.push_back(std::move(f));
  }
  return m;
}

Status Model::set_activation_bits(int bits) {
  if (bits != 4 && bits != 8) return Status::errorf("activation bits must be 4 or 8, not {}", bits);
  for (int il = 0; il < cfg_.n_layer; ++il) {
    LayerWeights& l = weights_->layers[il];
    for (Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      const DType act = vec_dot_type(lin->weight->type);
      if (bits == 4 && !kernels(act).quantize_row_int4)
        return Status::errorf("4-bit activations need weights that multiply Q8_0 activations (Q4_0, Q5_0, Q8_0); "
                              "layer {} has a {} matrix (activations {})",
                              il, dtype_name(lin->weight->type), dtype_name(act));
    }
  }
  for (LayerWeights& l : weights_->layers)
    for (Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) lin->act_bits = bits == 4 ? 4 : 0;
  cfg_.act_bits = bits;
  return Status::ok();
}

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& [name, t] : file_->tensors) n += t.nelements();
  return n;
}

namespace {

// A buffer for a large tensor, 2 MiB aligned and marked for transparent
// huge pages (far fewer page faults when it is filled).
std::shared_ptr<uint8_t> huge_page_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  EMBER_CHECK_MSG(p, "out of memory for an interleaved weight");
  madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// Address ranges of this process's file mappings (/proc/self/maps lines
// with an inode): the mapped model files.
std::vector<std::pair<uintptr_t, uintptr_t>> file_mappings() {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long b = 0, e = 0, inode = 0;
    char perms[8] = {}, dev[16] = {};
    unsigned long long offset = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %15s %lu", &b, &e, perms, &offset, dev, &inode) == 6 && inode)
      out.emplace_back(b, e);
  }
  return out;
}

// The whole pages of [p, p + bytes), no longer read, leave the resident set
// when they lie in a file mapping (MADV_DONTNEED: unwritten private file
// pages are dropped from this process and read again from the page cache if
// ever touched), so an interleaved model does not hold its weights twice.
// Other memory is left alone.
void release_pages(const void* p, size_t bytes, const std::vector<std::pair<uintptr_t, uintptr_t>>& files) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (e <= b) return;
  for (const auto& [fb, fe] : files)
    if (b >= fb && e <= fe) {
      madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
      return;
    }
}

}  // namespace

int Model::interleave_weights(int threads) {
  std::set<const TensorView*> mats;
  for (const LayerWeights& l : weights_->layers)
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (lin->weight) mats.insert(lin->weight);
  if (weights_->output.weight) mats.insert(weights_->output.weight);
  std::vector<TensorView*> todo;
  for (auto& [name, t] : file_->tensors)
    if (mats.count(&t) && t.n_dims == 2 && interleave_pays(t.type, t.ne[1])) todo.push_back(&t);
  std::vector<std::shared_ptr<uint8_t>> bufs(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) bufs[i] = huge_page_buffer(todo[i]->nbytes);
  const auto files = file_mappings();
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (size_t i; (i = next++) < todo.size();) {
      interleave_rows(todo[i]->type, todo[i]->data, todo[i]->ne[1], todo[i]->ne[0], bufs[i].get());
      release_pages(todo[i]->data, todo[i]->nbytes, files);
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < std::max(1, threads); ++k) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  for (size_t i = 0; i < todo.size(); ++i) {
    todo[i]->type = interleaved_type(todo[i]->type);
    todo[i]->data = bufs[i].get();
    file_->owners.push_back(bufs[i]);
  }
  return static_cast<int>(todo.size());
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : file_->tensors) n += t.nbytes;
  return n;
}

}  // namespace ember
