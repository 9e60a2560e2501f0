// TrainModel: parameters from a Model, layer subsets, LoRA adapters, the
// GGUF writer; see train_model.h.
#include "train/train_model.h"


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "kernels/train.h"
#include "model/archs/archs.h"
#include "model/io/gguf.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "train/rng.h"

namespace ember {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  // FNV-1a over 8-byte words (then the tail bytes): gigabytes of weights in
  // a fraction of a second.
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

namespace {

constexpr int kKinds = 3;

// The block linears that get adapters.
constexpr TensorRole kLoraRoles[] = {TensorRole::kAttnQ,  TensorRole::kAttnK,   TensorRole::kAttnV,
                                     TensorRole::kAttnOutput, TensorRole::kFfnGate, TensorRole::kFfnUp,
                                     TensorRole::kFfnDown};

// A scalar or, when layers differ, llama.cpp's per-layer array.
GgufValue size_value(const std::vector<int32_t>& v) {
  for (int32_t x : v)
    if (x != v[0]) return Metadata::make_int_array(v);
  return Metadata::make_int(v.empty() ? 0 : v[0], GgufType::kUint32);
}

template <typename T>
uint64_t hash_value(uint64_t h, const T& v) {
  return fnv1a64(&v, sizeof(v), h);
}
uint64_t hash_string(uint64_t h, const std::string& s) { return fnv1a64(s.data(), s.size(), hash_value(h, s.size())); }

}  // namespace

int64_t TrainModel::add_tensor(TrainTensor t) {
  t.offset = static_cast<int64_t>(params_.size());
  params_.resize(params_.size() + static_cast<size_t>(t.size()), 0.f);
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

void TrainModel::index() {
  index_.assign(static_cast<size_t>((cfg_.n_layer + 1) * kKinds), {});
  for (auto& a : index_) a.fill(-1);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TrainTensor& t = tensors_[i];
    if (t.kind == ParamKind::kAux) continue;
    index_[static_cast<size_t>((t.layer + 1) * kKinds + static_cast<int>(t.kind))][static_cast<int>(t.role)] =
        static_cast<int>(i);
  }
}

const TrainTensor* TrainModel::find(TensorRole r, int layer, ParamKind kind) const {
  if (layer < -1 || layer >= cfg_.n_layer || r == TensorRole::kUnknown) return nullptr;
  const int i = index_[static_cast<size_t>((layer + 1) * kKinds + static_cast<int>(kind))][static_cast<int>(r)];
  return i < 0 ? nullptr : &tensors_[static_cast<size_t>(i)];
}

namespace {

// The block features the training forward and backward implement (the
// dense Llama / Qwen2 / Qwen3 / Gemma 3 block); anything else is refused
// by name rather than trained wrongly.
Status check_trainable(const ModelConfig& cfg, const ArchSpec& spec) {
  auto no = [&](const char* what) {
    return Status::errorf("training does not support {} yet (architecture '{}'; docs/distillation.md, Limits)", what,
                          cfg.arch);
  };
  if (cfg.has_moe()) return no("Mixture-of-Experts layers");
  for (const TensorSpec& t : spec.block_tensors)
    if (!t.parts.empty()) return no("fused matrices (attn_qkv, gate|up)");
  if (cfg.qk_norm_full) return no("QK-norm over whole projections");
  if (!cfg.attn_pre_norm || !cfg.ffn_pre_norm) return no("blocks without pre-norms");
  if (cfg.attn_temp_scale > 0.f) return no("attention temperature scaling");
  for (const LayerConfig& l : cfg.layers) {
    if (!l.use_rope) return no("layers without RoPE");
    if (l.rope_ext_factor != 0.f || l.rope_attn_factor != 1.f) return no("YaRN / LongRoPE scaling");
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<TrainModel>> TrainModel::from_model(const Model& model) {
  const ModelConfig& cfg = model.config();
  if (cfg.rotation.any())
    return Status::error("training needs a model without fused rotations (this one was written by --rotate)");
  if (!cfg.head_tokens.empty()) return Status::error("training needs a model with a full output head");
  const ArchSpec* spec = find_arch(cfg.arch);
  if (!spec) return unsupported_arch_error(cfg.arch);
  EMBER_RETURN_IF_ERROR(check_trainable(cfg, *spec));
  auto m = std::unique_ptr<TrainModel>(new TrainModel());
  m->cfg_ = cfg;
  const ModelFile& file = model.file();
  auto add_list = [&](std::span<const TensorSpec> list, int il) -> Status {
    const TensorSizes sizes = tensor_sizes(cfg, il);
    for (const TensorSpec& ts : list) {
      if (ts.presence == Presence::kUnbound || is_moe_role(ts.role)) continue;  // dense only (check_trainable)
      const std::string name = gguf_tensor_name(ts.role, il);
      const TensorView* v = file.tensor(name);
      if (!v) {
        if (ts.presence == Presence::kRequired) return Status::errorf("missing tensor '{}'", name);
        continue;
      }
      const RoleInfo& ri = role_info(ts.role);
      TrainTensor t;
      t.name = name;
      t.role = ts.role;
      t.layer = il;
      t.n_dims = ri.n_dims;
      t.cols = sizes.of(ri.ne[0]);
      t.rows = ri.n_dims > 1 ? sizes.of(ri.ne[1]) : 1;
      if (v->nelements() != t.size())
        return Status::errorf("tensor '{}' has {} elements, expected {}", name, v->nelements(), t.size());
      if (dtype_row_group(v->type) > 1 || !can_dequantize(v->type))
        return Status::errorf("tensor '{}' has type {}, which training cannot read (load the file without "
                              "repacking)",
                              name, dtype_name(v->type));
      if (ri.kind == TensorKind::kNorm && spec->hf_norm_plus_one) t.norm_offset = 1.f;
      const int64_t off = m->add_tensor(t);
      float* dst = m->params_.data() + off;
      const int64_t row_len = v->ne[0];
      for (int64_t r = 0; r < v->nrows(); ++r) dequantize_row_ref(v->type, v->row(r), dst + r * row_len, row_len);
      if (t.norm_offset != 0.f)
        for (int64_t i = 0; i < t.size(); ++i) dst[i] -= t.norm_offset;
    }
    return Status::ok();
  };
  EMBER_RETURN_IF_ERROR(add_list(spec->model_tensors, -1));
  for (int il = 0; il < cfg.n_layer; ++il) EMBER_RETURN_IF_ERROR(add_list(spec->block_tensors, il));
  for (int il = 0; il < cfg.n_layer; ++il) {
    const float* f = model.inv_freq(il);
    m->inv_freq_.emplace_back(f, f + cfg.n_rot / 2);
    m->source_layer_.push_back(il);
  }
  m->index();
  return m;
}

Result<std::unique_ptr<TrainModel>> TrainModel::subset_layers(const std::vector<int>& keep) const {
  if (keep.empty()) return Status::error("a layer subset needs at least one layer");
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i] < 0 || keep[i] >= cfg_.n_layer || (i > 0 && keep[i] <= keep[i - 1]))
      return Status::errorf("layer subset: layer {} is out of range [0, {}) or not ascending", keep[i], cfg_.n_layer);
  if (lora_rank_ > 0) return Status::error("layer subset: take the subset before adding adapters");
  auto m = std::unique_ptr<TrainModel>(new TrainModel());
  m->cfg_ = cfg_;
  m->cfg_.n_layer = static_cast<int>(keep.size());
  m->cfg_.layers.clear();
  for (int l : keep) {
    m->cfg_.layers.push_back(cfg_.layers[l]);
    m->inv_freq_.push_back(inv_freq_[l]);
    m->source_layer_.push_back(source_layer_[l]);
  }
  for (const TrainTensor& t : tensors_) {
    int nl = -1;
    if (t.layer >= 0) {
      const auto it = std::find(keep.begin(), keep.end(), t.layer);
      if (it == keep.end()) continue;
      nl = static_cast<int>(it - keep.begin());
    }
    TrainTensor c = t;
    c.layer = nl;
    c.name = t.layer >= 0 ? gguf_tensor_name(t.role, nl) : t.name;
    c.trainable = false;
    c.grad_offset = -1;
    const int64_t off = m->add_tensor(c);
    std::copy(params_.begin() + t.offset, params_.begin() + t.offset + t.size(), m->params_.begin() + off);
  }
  m->index();
  return m;
}

Result<std::unique_ptr<TrainModel>> TrainModel::subset_ffn(const std::vector<std::vector<int>>& keep) const {
  if (static_cast<int>(keep.size()) != cfg_.n_layer)
    return Status::errorf("FFN subset: {} layer lists for {} layers", keep.size(), cfg_.n_layer);
  if (lora_rank_ > 0) return Status::error("FFN subset: take the subset before adding adapters");
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::vector<int>& k = keep[l];
    if (k.empty()) return Status::errorf("FFN subset: layer {} keeps no channel", l);
    for (size_t i = 0; i < k.size(); ++i)
      if (k[i] < 0 || k[i] >= cfg_.layers[l].n_ff || (i > 0 && k[i] <= k[i - 1]))
        return Status::errorf("FFN subset: layer {}: channel {} out of range [0, {}) or not ascending", l, k[i],
                              cfg_.layers[l].n_ff);
  }
  auto m = std::unique_ptr<TrainModel>(new TrainModel());
  m->cfg_ = cfg_;
  m->inv_freq_ = inv_freq_;
  m->source_layer_ = source_layer_;
  m->cfg_.n_ff = 0;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    m->cfg_.layers[l].n_ff = static_cast<int>(keep[l].size());
    m->cfg_.n_ff = std::max(m->cfg_.n_ff, m->cfg_.layers[l].n_ff);
  }
  for (const TrainTensor& t : tensors_) {
    if (t.kind != ParamKind::kTensor) continue;
    TrainTensor c = t;
    c.trainable = false;
    c.grad_offset = -1;
    const float* src = params_.data() + t.offset;
    const bool rows = t.role == TensorRole::kFfnGate || t.role == TensorRole::kFfnUp;
    const bool cols = t.role == TensorRole::kFfnDown;
    const std::vector<int>* k = t.layer >= 0 ? &keep[static_cast<size_t>(t.layer)] : nullptr;
    if (rows) c.rows = static_cast<int64_t>(k->size());
    if (cols) c.cols = static_cast<int64_t>(k->size());
    const int64_t off = m->add_tensor(c);
    float* dst = m->params_.data() + off;
    if (rows) {
      for (size_t i = 0; i < k->size(); ++i) std::copy(src + (*k)[i] * t.cols, src + ((*k)[i] + 1) * t.cols, dst + i * t.cols);
    } else if (cols) {
      for (int64_t r = 0; r < t.rows; ++r)
        for (size_t i = 0; i < k->size(); ++i) dst[r * c.cols + static_cast<int64_t>(i)] = src[r * t.cols + (*k)[i]];
    } else {
      std::copy(src, src + t.size(), dst);
    }
  }
  m->index();
  return m;
}

Status TrainModel::add_lora(int rank, float alpha, uint64_t seed) {
  if (rank < 1) return Status::errorf("LoRA rank must be >= 1, not {}", rank);
  if (lora_rank_ > 0) return Status::error("the model has adapters already");
  Rng rng(seed);
  const size_t n0 = tensors_.size();
  for (size_t i = 0; i < n0; ++i) {
    const TrainTensor w = tensors_[i];
    if (w.kind != ParamKind::kTensor ||
        std::find(std::begin(kLoraRoles), std::end(kLoraRoles), w.role) == std::end(kLoraRoles))
      continue;
    TrainTensor a = w, b = w;
    a.kind = ParamKind::kLoraA;
    a.name = w.name + ".lora_a";
    a.rows = rank;
    a.cols = w.cols;
    a.norm_offset = 0.f;
    b.kind = ParamKind::kLoraB;
    b.name = w.name + ".lora_b";
    b.rows = w.rows;
    b.cols = rank;
    b.norm_offset = 0.f;
    const int64_t off = add_tensor(a);
    const double sd = 1.0 / std::sqrt(static_cast<double>(w.cols));
    for (int64_t j = 0; j < a.size(); ++j) params_[static_cast<size_t>(off + j)] = static_cast<float>(sd * rng.normal());
    add_tensor(b);  // zeros
  }
  lora_rank_ = rank;
  lora_alpha_ = alpha;
  index();
  return Status::ok();
}

const TrainTensor* TrainModel::add_aux(const std::string& name, int64_t rows, int64_t cols,
                                      const std::vector<float>& values) {
  TrainTensor t;
  t.name = name;
  t.kind = ParamKind::kAux;
  t.rows = rows;
  t.cols = cols;
  t.n_dims = 2;
  const int64_t off = add_tensor(t);
  std::copy(values.begin(), values.begin() + std::min<int64_t>(rows * cols, static_cast<int64_t>(values.size())),
            params_.begin() + off);
  index();
  return &tensors_.back();
}

const TrainTensor* TrainModel::find_aux(const std::string& name) const {
  for (const TrainTensor& t : tensors_)
    if (t.kind == ParamKind::kAux && t.name == name) return &t;
  return nullptr;
}

int64_t TrainModel::set_trainable(const std::function<bool(const TrainTensor&)>& pred) {
  n_trainable_ = 0;
  for (TrainTensor& t : tensors_) {
    t.trainable = t.role != TensorRole::kRopeFreqs && pred(t);
    t.grad_offset = t.trainable ? n_trainable_ : -1;
    if (t.trainable) n_trainable_ += t.size();
  }
  return n_trainable_;
}

uint64_t TrainModel::layout_digest() const {
  uint64_t h = hash_string(1469598103934665603ull, cfg_.arch);
  for (int v : {cfg_.n_layer, cfg_.n_embd, cfg_.head_dim, cfg_.head_dim_v, cfg_.n_vocab, cfg_.n_rot, lora_rank_})
    h = hash_value(h, v);
  for (const LayerConfig& l : cfg_.layers)
    for (int v : {l.n_head, l.n_head_kv, l.n_ff, l.sliding_window}) h = hash_value(h, v);
  for (const TrainTensor& t : tensors_) {
    h = hash_string(h, t.name);
    for (int64_t v : {t.rows, t.cols, static_cast<int64_t>(t.kind), static_cast<int64_t>(t.trainable)})
      h = hash_value(h, v);
  }
  return h;
}

uint64_t TrainModel::frozen_digest() const {
  uint64_t h = 1469598103934665603ull;
  for (const TrainTensor& t : tensors_)
    if (!t.trainable) h = fnv1a64(params_.data() + t.offset, static_cast<size_t>(t.size()) * sizeof(float), h);
  return h;
}

Status TrainModel::write_gguf(const Metadata& base, DType type, const std::string& path) const {
  if (type != DType::kF32 && type != DType::kBF16)
    return Status::errorf("a trained model is written as f32 or bf16, not {}", dtype_name(type));
  const std::string a = cfg_.arch + ".";
  Metadata meta;
  const std::optional<int64_t> base_layers = base.get_int(a + "block_count");
  bool identity = base_layers && *base_layers == cfg_.n_layer;
  for (int i = 0; identity && i < cfg_.n_layer; ++i) identity = source_layer_[i] == i;
  for (const auto& [key, v] : base.entries()) {
    GgufValue nv = v;
    // Per-layer arrays follow the remaining blocks.
    if (!identity && base_layers && key.rfind(a, 0) == 0 && v.type == GgufType::kArray &&
        v.count == static_cast<uint64_t>(*base_layers) && v.items.empty() && v.strings.empty()) {
      nv.ints.clear();
      nv.nums.clear();
      for (int src : source_layer_) {
        if (!v.ints.empty()) nv.ints.push_back(v.ints[static_cast<size_t>(src)]);
        if (!v.nums.empty()) nv.nums.push_back(v.nums[static_cast<size_t>(src)]);
      }
      nv.count = static_cast<uint64_t>(cfg_.n_layer);
    }
    meta.set(key, std::move(nv));
  }
  std::vector<int32_t> nh, nkv, nff, swa;
  for (const LayerConfig& l : cfg_.layers) {
    nh.push_back(l.n_head);
    nkv.push_back(l.n_head_kv);
    nff.push_back(l.n_ff);
    swa.push_back(l.sliding_window > 0);
  }
  meta.set(a + "block_count", Metadata::make_int(cfg_.n_layer, GgufType::kUint32));
  meta.set(a + "attention.head_count", size_value(nh));
  meta.set(a + "attention.head_count_kv", size_value(nkv));
  meta.set(a + "feed_forward_length", size_value(nff));
  if (!identity && cfg_.arch == "gemma3")  // one sliding-window flag per remaining layer
    meta.set(a + "attention.sliding_window_pattern", Metadata::make_int_array(swa, GgufType::kBool));
  meta.set("general.file_type", Metadata::make_int(type == DType::kF32 ? 0 : 32, GgufType::kUint32));

  GgufWriter w;
  w.add_metadata(meta);
  std::vector<std::vector<uint8_t>> bufs;
  ThreadPool pool(1);
  for (const TrainTensor& t : tensors_) {
    if (t.kind != ParamKind::kTensor) continue;
    std::vector<float> v(params_.begin() + t.offset, params_.begin() + t.offset + t.size());
    if (t.norm_offset != 0.f)
      for (float& x : v) x += t.norm_offset;
    const TrainTensor* la = find(t.role, t.layer, ParamKind::kLoraA);
    const TrainTensor* lb = find(t.role, t.layer, ParamKind::kLoraB);
    if (la && lb) {  // W + s B A
      std::vector<float> ba(static_cast<size_t>(t.size()));
      train_gemm(t.rows, t.cols, lora_rank_, param(lb), lora_rank_, false, param(la), t.cols, false, ba.data(),
                 t.cols, false, pool);
      const float s = lora_scale();
      for (size_t i = 0; i < v.size(); ++i) v[i] += s * ba[i];
    }
    const bool matrix = t.n_dims == 2 && role_info(t.role).kind == TensorKind::kMatrix;
    const DType tt = matrix ? type : DType::kF32;
    std::vector<uint8_t> bytes(dtype_row_size(tt, t.cols) * static_cast<size_t>(t.rows));
    if (tt == DType::kF32)
      std::memcpy(bytes.data(), v.data(), bytes.size());
    else
      EMBER_RETURN_IF_ERROR(quantize_rows(tt, v.data(), bytes.data(), t.rows, t.cols));
    std::vector<int64_t> ne = {t.cols};
    if (t.n_dims > 1) ne.push_back(t.rows);
    bufs.push_back(std::move(bytes));
    EMBER_RETURN_IF_ERROR(w.add_tensor_ref(t.name, tt, ne, bufs.back().data(), bufs.back().size()));
  }
  const std::string tmp = path + ".tmp";
  EMBER_RETURN_IF_ERROR(w.write(tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::errorf("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace ember
