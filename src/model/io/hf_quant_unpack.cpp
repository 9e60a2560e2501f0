// Unpacking of the quantized linears of GPTQ, AWQ GEMM and
// compressed-tensors checkpoints into HfQuantMatrix (codes, zero points,
// scales, group index per input column), following the layouts in
// hf_quant.h; and the walk over a checkpoint that finds, unpacks and
// repacks every quantized linear. Every tensor's dtype and shape is checked
// against the others of its linear before a byte is read.
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "core/fp16.h"
#include "model/io/hf_quant.h"

namespace ember {
namespace {

constexpr int kAwqReverseOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// The tensors of one linear, looked up by suffix.
class LinearParts {
 public:
  LinearParts(const SafetensorsSet& set, const std::string& prefix, std::set<std::string>* used)
      : set_(set), prefix_(prefix), used_(used) {}

  const SafetensorsTensor* find(const char* suffix) const {
    auto it = set_.tensors.find(prefix_ + "." + suffix);
    if (it == set_.tensors.end()) return nullptr;
    used_->insert(it->first);
    return it->second.tensor;
  }
  Result<const SafetensorsTensor*> need(const char* suffix) const {
    const SafetensorsTensor* t = find(suffix);
    if (!t) return Status::errorf("tensor '{}.{}' is missing", prefix_, suffix);
    return t;
  }
  std::string name(const SafetensorsTensor& t) const { return fmt::format("tensor '{}'", t.name); }
  const std::string& prefix() const { return prefix_; }

 private:
  const SafetensorsSet& set_;
  const std::string& prefix_;
  std::set<std::string>* used_;
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Status expect(const SafetensorsTensor& t, const char* dtype, const std::vector<int64_t>& shape) {
  if (t.dtype != dtype) return Status::errorf("tensor '{}': dtype {}, expected {}", t.name, t.dtype, dtype);
  if (t.shape != shape)
    return Status::errorf("tensor '{}': shape {}, expected {}", t.name, shape_text(t.shape), shape_text(shape));
  return Status::ok();
}

int32_t i32_at(const SafetensorsTensor& t, int64_t i) {
  int32_t v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

// Integers of an I8 / I32 / I64 tensor (I64 must fit in int32).
Result<std::vector<int32_t>> read_ints(const SafetensorsTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == "I32") {
      out[i] = i32_at(t, i);
    } else if (t.dtype == "I8") {
      out[i] = static_cast<int8_t>(t.data[i]);
    } else if (t.dtype == "I64") {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      if (v < INT32_MIN || v > INT32_MAX) return Status::errorf("tensor '{}': value {} out of range", t.name, v);
      out[i] = static_cast<int32_t>(v);
    } else {
      return Status::errorf("tensor '{}': dtype {}, expected I32, I64 or I8", t.name, t.dtype);
    }
  }
  return out;
}

// Exact f32 values of an F16 / BF16 / F32 tensor.
Result<std::vector<float>> read_floats(const SafetensorsTensor& t) {
  if (!t.supported) return Status::errorf("tensor '{}': dtype {}, expected F16, BF16 or F32", t.name, t.dtype);
  const size_t n = t.nbytes / dtype_type_size(t.type);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.type == DType::kF32) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = t.type == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

// Group of every input column: g_idx when given (each in range), else
// i / group_size with the group size that makes `n_groups` groups.
Status fill_groups(const LinearParts& p, const SafetensorsTensor* g_idx, int64_t cfg_group, HfQuantMatrix* m) {
  m->g_idx.resize(static_cast<size_t>(m->n_in));
  if (g_idx) {
    if (g_idx->shape != std::vector<int64_t>{m->n_in})
      return Status::errorf("{}: shape {}, expected [{}]", p.name(*g_idx), shape_text(g_idx->shape), m->n_in);
    Result<std::vector<int32_t>> v = read_ints(*g_idx);
    if (!v) return v.status();
    for (int64_t i = 0; i < m->n_in; ++i) {
      if ((*v)[i] < 0 || (*v)[i] >= m->n_groups)
        return Status::errorf("{}: entry {} = {} is not a group index (the scales have {} groups)", p.name(*g_idx), i,
                              (*v)[i], m->n_groups);
      m->g_idx[i] = (*v)[i];
    }
    return Status::ok();
  }
  int64_t gs;
  if (m->n_groups == 1) {
    gs = m->n_in;
  } else if (cfg_group > 0) {
    gs = cfg_group;
    if ((m->n_in + gs - 1) / gs != m->n_groups)
      return Status::errorf("{}: the scales have {} groups but group_size {} over {} input columns needs {}",
                            p.prefix(), m->n_groups, gs, m->n_in, (m->n_in + gs - 1) / gs);
  } else if (m->n_in % m->n_groups == 0) {
    gs = m->n_in / m->n_groups;
  } else {
    return Status::errorf("{}: {} scale groups do not divide {} input columns", p.prefix(), m->n_groups, m->n_in);
  }
  for (int64_t i = 0; i < m->n_in; ++i) m->g_idx[i] = static_cast<int32_t>(i / gs);
  return Status::ok();
}

Status check_dims(const LinearParts& p, const HfQuantMatrix& m) {
  if (m.n_out <= 0 || m.n_in <= 0 || m.n_groups <= 0 || m.n_groups > m.n_in)
    return Status::errorf("{}: invalid quantized shape (out {}, in {}, {} groups)", p.prefix(), m.n_out, m.n_in,
                          m.n_groups);
  return Status::ok();
}

// qweight, qzeros and scales of a GPTQ / AWQ linear (qweight and scales 2-D).
Status qweight_parts(const LinearParts& p, const SafetensorsTensor** qw, const SafetensorsTensor** qz,
                     const SafetensorsTensor** sc) {
  for (auto [suffix, out] : {std::pair{"qweight", qw}, std::pair{"qzeros", qz}, std::pair{"scales", sc}}) {
    Result<const SafetensorsTensor*> t = p.need(suffix);
    if (!t) return t.status();
    *out = *t;
  }
  if ((*qw)->shape.size() != 2 || (*sc)->shape.size() != 2)
    return Status::errorf("{}: qweight and scales must be 2-D", p.prefix());
  return Status::ok();
}

// GPTQ / AWQ scales [n_groups, n_out] as exact floats.
Result<std::vector<float>> read_group_scales(const LinearParts& p, const SafetensorsTensor& sc, const HfQuantMatrix& m) {
  if (sc.shape != std::vector<int64_t>{m.n_groups, m.n_out})
    return Status::errorf("{}: shape {}, expected [{}, {}]", p.name(sc), shape_text(sc.shape), m.n_groups, m.n_out);
  return read_floats(sc);
}

Status unpack_gptq(const HfQuantConfig& cfg, const LinearParts& p, HfQuantMatrix* m) {
  const int bits = cfg.bits, per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const SafetensorsTensor *qw = nullptr, *qz = nullptr, *sc = nullptr;
  EMBER_RETURN_IF_ERROR(qweight_parts(p, &qw, &qz, &sc));
  m->bits = bits;
  m->n_in = qw->shape[0] * per;
  m->n_out = qw->shape[1];
  m->n_groups = sc->shape[0];
  EMBER_RETURN_IF_ERROR(check_dims(p, *m));
  if (m->n_out % per != 0) return Status::errorf("{}: {} outputs are not a multiple of {}", p.prefix(), m->n_out, per);
  EMBER_RETURN_IF_ERROR(expect(*qw, "I32", {m->n_in / per, m->n_out}));
  EMBER_RETURN_IF_ERROR(expect(*qz, "I32", {m->n_groups, m->n_out / per}));
  Result<std::vector<float>> scales = read_group_scales(p, *sc, *m);
  if (!scales) return scales.status();
  EMBER_RETURN_IF_ERROR(fill_groups(p, p.find("g_idx"), cfg.group_size, m));
  const int64_t N = m->n_out, K = m->n_in, G = m->n_groups;
  m->q.resize(static_cast<size_t>(N * K));
  for (int64_t r = 0; r < K / per; ++r)  // one word: `per` consecutive codes of column n
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t w = static_cast<uint32_t>(i32_at(*qw, r * N + n));
      for (int j = 0; j < per; ++j) m->q[n * K + r * per + j] = static_cast<uint8_t>((w >> (j * bits)) & mask);
    }
  m->zero.resize(static_cast<size_t>(N * G));
  m->scale.resize(static_cast<size_t>(N * G));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t w = static_cast<uint32_t>(i32_at(*qz, g * (N / per) + n / per));
      uint32_t z = (w >> ((n % per) * bits)) & mask;
      if (!cfg.gptq_v2) z = (z + 1) & mask;  // v1 stores zero - 1
      m->zero[n * G + g] = static_cast<int16_t>(z);
      m->scale[n * G + g] = (*scales)[g * N + n];
    }
  return Status::ok();
}

Status unpack_awq(const HfQuantConfig& cfg, const LinearParts& p, HfQuantMatrix* m) {
  const SafetensorsTensor *qw = nullptr, *qz = nullptr, *sc = nullptr;
  EMBER_RETURN_IF_ERROR(qweight_parts(p, &qw, &qz, &sc));
  m->bits = 4;
  m->n_in = qw->shape[0];
  m->n_out = qw->shape[1] * 8;
  m->n_groups = sc->shape[0];
  EMBER_RETURN_IF_ERROR(check_dims(p, *m));
  EMBER_RETURN_IF_ERROR(expect(*qw, "I32", {m->n_in, m->n_out / 8}));
  EMBER_RETURN_IF_ERROR(expect(*qz, "I32", {m->n_groups, m->n_out / 8}));
  Result<std::vector<float>> scales = read_group_scales(p, *sc, *m);
  if (!scales) return scales.status();
  EMBER_RETURN_IF_ERROR(fill_groups(p, nullptr, cfg.group_size, m));
  const int64_t N = m->n_out, K = m->n_in, G = m->n_groups;
  auto code = [&](const SafetensorsTensor& t, int64_t row, int64_t n) {
    const uint32_t w = static_cast<uint32_t>(i32_at(t, row * (N / 8) + n / 8));
    return static_cast<uint8_t>((w >> (4 * kAwqReverseOrder[n % 8])) & 15u);
  };
  m->q.resize(static_cast<size_t>(N * K));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) m->q[n * K + k] = code(*qw, k, n);
  m->zero.resize(static_cast<size_t>(N * G));
  m->scale.resize(static_cast<size_t>(N * G));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      m->zero[n * G + g] = code(*qz, g, n);
      m->scale[n * G + g] = (*scales)[g * N + n];
    }
  return Status::ok();
}

// weight_scale of compressed-tensors: [N, G], [N, 1] or one value.
Status ct_scales(const LinearParts& p, const SafetensorsTensor& sc, HfQuantMatrix* m, bool* per_tensor) {
  int64_t n = 1;
  for (int64_t d : sc.shape) n *= d;
  *per_tensor = n == 1 && m->n_out != 1;
  if (*per_tensor) {
    m->n_groups = 1;
  } else if (sc.shape.size() == 2 && sc.shape[0] == m->n_out) {
    m->n_groups = sc.shape[1];
  } else {
    return Status::errorf("{}: shape {}, expected [{}, groups] or one value", p.name(sc), shape_text(sc.shape), m->n_out);
  }
  Result<std::vector<float>> s = read_floats(sc);
  if (!s) return s.status();
  m->scale = *per_tensor ? std::vector<float>(static_cast<size_t>(m->n_out), (*s)[0]) : std::move(s.value());
  return Status::ok();
}

// A weight_zero_point of a symmetric scheme must be all zeros.
Status ct_check_sym_zero(const LinearParts& p) {
  const SafetensorsTensor* zp = p.find("weight_zero_point");
  if (!zp) return Status::ok();
  Result<std::vector<int32_t>> v = read_ints(*zp);
  if (!v) return v.status();
  for (int32_t z : *v)
    if (z != 0) return Status::errorf("{}: nonzero zero point in a symmetric scheme", p.name(*zp));
  return Status::ok();
}

Status unpack_ct(const HfQuantConfig& cfg, const LinearParts& p, bool packed, HfQuantMatrix* m) {
  const int bits = cfg.bits;
  const int32_t offset = 1 << (bits - 1);
  Result<const SafetensorsTensor*> sc = p.need("weight_scale");
  if (!sc) return sc.status();
  const SafetensorsTensor* packed_t = nullptr;
  const SafetensorsTensor* int_t = nullptr;
  if (packed) {
    Result<const SafetensorsTensor*> pk = p.need("weight_packed"), shp = p.need("weight_shape");
    if (!pk) return pk.status();
    if (!shp) return shp.status();
    Result<std::vector<int32_t>> dims = read_ints(**shp);
    if (!dims) return dims.status();
    if (dims->size() != 2) return Status::errorf("{}: expected 2 values", p.name(**shp));
    m->n_out = (*dims)[0];
    m->n_in = (*dims)[1];
    if (m->n_out <= 0 || m->n_in <= 0) return Status::errorf("{}: invalid weight shape", p.name(**shp));
    // The packed tensor bounds the sizes by the file before anything is allocated.
    EMBER_RETURN_IF_ERROR(expect(**pk, "I32", {m->n_out, (m->n_in + 32 / bits - 1) / (32 / bits)}));
    packed_t = *pk;
  } else {
    Result<const SafetensorsTensor*> w = p.need("weight");
    if (!w) return w.status();
    if ((*w)->shape.size() != 2) return Status::errorf("{}: must be 2-D", p.name(**w));
    m->n_out = (*w)->shape[0];
    m->n_in = (*w)->shape[1];
    EMBER_RETURN_IF_ERROR(expect(**w, "I8", {m->n_out, m->n_in}));
    int_t = *w;
  }
  m->bits = bits;
  bool per_tensor = false;
  if (m->n_out <= 0 || m->n_in <= 0) return Status::errorf("{}: invalid weight shape", p.prefix());
  EMBER_RETURN_IF_ERROR(ct_scales(p, **sc, m, &per_tensor));
  EMBER_RETURN_IF_ERROR(check_dims(p, *m));
  EMBER_RETURN_IF_ERROR(fill_groups(p, p.find("weight_g_idx"), -1, m));
  const int64_t N = m->n_out, K = m->n_in, G = m->n_groups;
  const int per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  m->q.resize(static_cast<size_t>(N * K));
  if (packed_t) {
    const int64_t cols = (K + per - 1) / per;  // shape checked above
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const uint32_t w = static_cast<uint32_t>(i32_at(*packed_t, n * cols + k / per));
        m->q[n * K + k] = static_cast<uint8_t>((w >> ((k % per) * bits)) & mask);  // offset-binary
      }
  } else {
    for (int64_t i = 0; i < N * K; ++i)
      m->q[i] = static_cast<uint8_t>(static_cast<int8_t>(int_t->data[i]) + offset);
  }
  m->zero.assign(static_cast<size_t>(N * G), static_cast<int16_t>(offset));
  if (cfg.sym) return ct_check_sym_zero(p);
  // Asymmetric 4-bit: zero points packed along N, offset-binary like the codes.
  Result<const SafetensorsTensor*> zp = p.need("weight_zero_point");
  if (!zp) return zp.status();
  if (per_tensor) return Status::errorf("{}: asymmetric per-tensor zero points are not supported", p.prefix());
  EMBER_RETURN_IF_ERROR(expect(**zp, "I32", {(N + per - 1) / per, G}));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const uint32_t w = static_cast<uint32_t>(i32_at(**zp, (n / per) * G + g));
      m->zero[n * G + g] = static_cast<int16_t>((w >> ((n % per) * bits)) & mask);
    }
  return Status::ok();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<HfQuantMatrix> unpack_hf_quant(const HfQuantConfig& cfg, const SafetensorsSet& set, const std::string& prefix,
                                      std::set<std::string>* used) {
  const LinearParts p(set, prefix, used);
  HfQuantMatrix m;
  Status st;
  switch (cfg.method) {
    case HfQuantMethod::kGptq: st = unpack_gptq(cfg, p, &m); break;
    case HfQuantMethod::kAwq: st = unpack_awq(cfg, p, &m); break;
    case HfQuantMethod::kCompressedTensors:
      st = unpack_ct(cfg, p, cfg.ct_format == "pack-quantized", &m);
      break;
  }
  if (!st) return st;
  return m;
}

Result<HfQuantWeights> load_hf_quant_weights(const HfQuantConfig* cfg, const SafetensorsSet& set,
                                             const std::function<bool(const std::string&)>& wanted,
                                             std::vector<std::shared_ptr<void>>* owners) {
  HfQuantWeights out;
  for (const auto& [name, entry] : set.tensors) {
    std::string prefix;
    const char* kind = nullptr;
    if (ends_with(name, ".qweight")) {
      prefix = name.substr(0, name.size() - 8);
      kind = "qweight (GPTQ / AWQ)";
    } else if (ends_with(name, ".weight_packed")) {
      prefix = name.substr(0, name.size() - 14);
      kind = "weight_packed (compressed-tensors)";
    } else if (ends_with(name, ".weight") && entry.tensor->dtype == "I8") {
      prefix = name.substr(0, name.size() - 7);
      kind = "int8 weight (compressed-tensors)";
    } else {
      continue;
    }
    const std::string& file = entry.file->path();
    if (!cfg)
      return Status::errorf("{}: tensor '{}' is a quantized {} but config.json has no quantization_config", file,
                            name, kind);
    const bool gptq_like = cfg->method != HfQuantMethod::kCompressedTensors;
    const bool is_qweight = ends_with(name, ".qweight");
    const bool want_packed = cfg->ct_format == "pack-quantized";
    if (gptq_like != is_qweight || (!gptq_like && want_packed != ends_with(name, ".weight_packed")))
      return Status::errorf("{}: tensor '{}' is a {} tensor, which does not match quantization_config ({})", file,
                            name, kind, cfg->summary);
    const std::string hf_weight = prefix + ".weight";
    if (!wanted(hf_weight)) continue;
    Result<HfQuantMatrix> m = unpack_hf_quant(*cfg, set, prefix, &out.consumed);
    if (!m) return m.status().with_context(file);
    out.weights.emplace(hf_weight, repack_hf_quant(*m, hf_weight, owners));
    out.files.emplace(hf_weight, file);
  }
  return out;
}

}  // namespace ember
