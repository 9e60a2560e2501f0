// Importance matrices: llama.cpp's GGUF and legacy file formats, the
// collecting observer and the calibration run; see imatrix.h.
#include "transform/imatrix.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "core/check.h"
#include "model/io/gguf.h"
#include "model/kv_cache.h"
#include "quant/quantize_imatrix.h"

namespace ember {
namespace {

constexpr const char* kSums = ".in_sum2";
constexpr const char* kCounts = ".counts";

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

Result<Imatrix> read_gguf(const std::string& path) {
  auto f = GgufFile::open(path);
  if (!f) return f.status();
  const Metadata& md = (*f)->metadata();
  Imatrix m;
  if (const GgufValue* v = md.find("imatrix.datasets")) m.datasets = v->strings;
  m.chunk_count = static_cast<int32_t>(md.get_int("imatrix.chunk_count").value_or(0));
  m.chunk_size = static_cast<int32_t>(md.get_int("imatrix.chunk_size").value_or(0));
  if (const std::string* t = md.get_string("general.type"); t && *t != "imatrix")
    return Status::errorf("{}: general.type is '{}', not an imatrix", path, *t);
  for (const GgufTensorInfo& ti : (*f)->tensors()) {
    const TensorView& sums = ti.view;
    if (!ends_with(sums.name, kSums)) continue;
    const std::string name = sums.name.substr(0, sums.name.size() - std::strlen(kSums));
    const GgufTensorInfo* ci = (*f)->find_tensor(name + kCounts);
    if (!ci) return Status::errorf("{}: '{}' has no '{}{}'", path, sums.name, name, kCounts);
    const TensorView& counts = ci->view;
    if (sums.type != DType::kF32 || counts.type != DType::kF32)
      return Status::errorf("{}: '{}' is not f32", path, name);
    const int64_t n_in = sums.ne[0], n_mat = sums.n_dims > 1 ? sums.nelements() / n_in : 1;
    if (counts.nelements() != n_mat)
      return Status::errorf("{}: '{}' has {} counts for {} matrices", path, name, counts.nelements(), n_mat);
    ImatrixEntry e;
    const float* s = static_cast<const float*>(sums.data);
    const float* c = static_cast<const float*>(counts.data);
    e.sums.assign(s, s + n_in * n_mat);
    for (int64_t j = 0; j < n_mat; ++j) {
      if (!(c[j] >= 0) || !std::isfinite(c[j])) return Status::errorf("{}: '{}' has a bad count", path, name);
      e.counts.push_back(static_cast<int64_t>(c[j]));
    }
    for (double v : e.sums)
      if (!std::isfinite(v) || v < 0) return Status::errorf("{}: '{}' has a negative or non-finite sum", path, name);
    m.entries[name] = std::move(e);
  }
  if (m.entries.empty()) return Status::errorf("{}: no '*.in_sum2' tensors: not an imatrix file", path);
  return m;
}

// Little-endian reader over a byte buffer with bounds checks.
struct Cursor {
  const std::vector<uint8_t>& b;
  size_t p = 0;
  bool i32(int32_t* v) {
    if (b.size() - p < 4) return false;
    std::memcpy(v, &b[p], 4);
    p += 4;
    return true;
  }
  bool bytes(void* dst, size_t n) {
    if (b.size() - p < n) return false;
    std::memcpy(dst, &b[p], n);
    p += n;
    return true;
  }
};

Result<Imatrix> read_legacy(const std::string& path, const std::vector<uint8_t>& raw) {
  Cursor c{raw};
  Imatrix m;
  m.legacy = true;
  int32_t n_entries;
  if (!c.i32(&n_entries) || n_entries < 1 || n_entries > 1000000)
    return Status::errorf("{}: not an imatrix file (bad entry count)", path);
  for (int32_t k = 0; k < n_entries; ++k) {
    int32_t len, ncall, nval;
    if (!c.i32(&len) || len < 1 || len > 4096) return Status::errorf("{}: entry {}: bad name length", path, k);
    std::string name(static_cast<size_t>(len), '\0');
    if (!c.bytes(name.data(), name.size()) || !c.i32(&ncall) || !c.i32(&nval) || nval < 1 || ncall < 0)
      return Status::errorf("{}: entry {} is truncated or malformed", path, k);
    std::vector<float> v(static_cast<size_t>(nval));
    if (!c.bytes(v.data(), v.size() * 4)) return Status::errorf("{}: '{}': values truncated", path, name);
    ImatrixEntry e;
    for (float x : v) {
      if (!std::isfinite(x) || x < 0) return Status::errorf("{}: '{}' has a negative or non-finite value", path, name);
      e.sums.push_back(x);
    }
    e.counts = {ncall};
    m.entries[name] = std::move(e);
  }
  int32_t chunks, len;
  if (c.i32(&chunks)) {
    m.chunk_count = chunks;
    if (c.i32(&len) && len > 0 && len < 65536) {
      std::string ds(static_cast<size_t>(len), '\0');
      if (c.bytes(ds.data(), ds.size())) m.datasets.push_back(ds);
    }
  }
  return m;
}

}  // namespace

std::optional<std::vector<float>> Imatrix::importance(const std::string& tensor) const {
  auto it = entries.find(tensor);
  if (it == entries.end() || it->second.counts.empty()) return std::nullopt;
  const ImatrixEntry& e = it->second;
  const size_t n_mat = e.counts.size(), n_in = e.sums.size() / n_mat;
  std::vector<float> out(e.sums.size());
  for (size_t j = 0; j < n_mat; ++j)
    for (size_t i = 0; i < n_in; ++i) {
      const double c = static_cast<double>(e.counts[j]);
      // Legacy: values are mean * ncall; ncall 0 leaves them as they are.
      out[j * n_in + i] = legacy ? static_cast<float>(c > 0 ? e.sums[j * n_in + i] / c : e.sums[j * n_in + i])
                                 : (c > 0 ? static_cast<float>(static_cast<float>(e.sums[j * n_in + i]) /
                                                               static_cast<float>(c))
                                          : 1.0f);
    }
  return out;
}

Result<Imatrix> read_imatrix(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::errorf("cannot open imatrix '{}'", path);
  std::vector<uint8_t> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (raw.size() >= 4 && std::memcmp(raw.data(), "GGUF", 4) == 0) return read_gguf(path);
  return read_legacy(path, raw);
}

Status write_imatrix_gguf(const Imatrix& m, const std::string& path) {
  GgufWriter w;
  w.add_string("general.type", "imatrix");
  w.add_string_array("imatrix.datasets", m.datasets);
  w.add_uint32("imatrix.chunk_count", static_cast<uint32_t>(m.chunk_count));
  w.add_uint32("imatrix.chunk_size", static_cast<uint32_t>(m.chunk_size));
  for (const auto& [name, e] : m.entries) {  // std::map: sorted names, as llama-imatrix
    if (e.counts.empty() || e.sums.size() % e.counts.size() != 0)
      return Status::errorf("imatrix entry '{}': {} sums for {} matrices", name, e.sums.size(), e.counts.size());
    const int64_t n_mat = static_cast<int64_t>(e.counts.size()), n_in = static_cast<int64_t>(e.sums.size()) / n_mat;
    std::vector<float> s(e.sums.begin(), e.sums.end()), c(e.counts.begin(), e.counts.end());
    EMBER_RETURN_IF_ERROR(w.add_tensor(name + kSums, DType::kF32, {n_in, n_mat}, s.data(), s.size() * 4));
    EMBER_RETURN_IF_ERROR(w.add_tensor(name + kCounts, DType::kF32, {1, n_mat}, c.data(), c.size() * 4));
  }
  return w.write(path);
}

Status write_imatrix_legacy(const Imatrix& m, const std::string& path) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) { out.insert(out.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
  auto put_i32 = [&](int32_t v) { put(&v, 4); };
  put_i32(static_cast<int32_t>(m.entries.size()));
  const int64_t chunk = m.chunk_size > 0 ? m.chunk_size : 1;
  for (const auto& [name, e] : m.entries) {
    put_i32(static_cast<int32_t>(name.size()));
    put(name.data(), name.size());
    int64_t max_count = 0;
    for (int64_t c : e.counts) max_count = std::max(max_count, c);
    const int32_t ncall = m.legacy ? static_cast<int32_t>(max_count) : static_cast<int32_t>((max_count + chunk - 1) / chunk);
    put_i32(ncall);
    put_i32(static_cast<int32_t>(e.sums.size()));
    const size_t n_in = e.sums.size() / e.counts.size();
    for (size_t i = 0; i < e.sums.size(); ++i) {
      float v;
      if (m.legacy) {
        v = static_cast<float>(e.sums[i]);
      } else {
        const float c = static_cast<float>(e.counts[i / n_in]);
        v = c == 0.0f ? static_cast<float>(ncall) : static_cast<float>(e.sums[i]) / c * static_cast<float>(ncall);
      }
      put(&v, 4);
    }
  }
  put_i32(m.chunk_count);
  const std::string ds = m.datasets.empty() ? std::string() : m.datasets.back();
  put_i32(static_cast<int32_t>(ds.size()));
  put(ds.data(), ds.size());
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size())))
    return Status::errorf("cannot write imatrix '{}'", path);
  return Status::ok();
}

std::string linear_tensor_name(int layer, LinearRole role, bool tied_output) {
  if (role == LinearRole::kOutput) return tied_output ? "token_embd.weight" : "output.weight";
  return fmt::format("blk.{}.{}.weight", layer, linear_role_name(role));
}

void ImportanceCollector::on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                                          int64_t n_in) {
  if (role == LinearRole::kOutput && !output_) return;
  ImatrixEntry& e = m_.entries[linear_tensor_name(layer, role, tied_)];
  if (e.sums.empty()) {
    e.sums.assign(static_cast<size_t>(n_in), 0.0);
    e.counts = {0};
  }
  EMBER_CHECK(static_cast<int64_t>(e.sums.size()) == n_in);
  double* s = e.sums.data();
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = x + r * ld;
    for (int64_t i = 0; i < n_in; ++i) s[i] += static_cast<double>(row[i]) * row[i];
  }
  e.counts[0] += n_rows;
}

void ImportanceCollector::on_expert_input(int layer, LinearRole role, int expert, int n_expert, const float* x,
                                          int64_t ld, int64_t n_rows, int64_t n_in) {
  ImatrixEntry& e = m_.entries[linear_tensor_name(layer, role, tied_)];
  if (e.sums.empty()) {
    e.sums.assign(static_cast<size_t>(n_in) * n_expert, 0.0);
    e.counts.assign(static_cast<size_t>(n_expert), 0);
  }
  EMBER_CHECK(static_cast<int64_t>(e.sums.size()) == n_in * n_expert && expert >= 0 && expert < n_expert);
  double* s = e.sums.data() + static_cast<size_t>(expert) * n_in;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = x + r * ld;
    for (int64_t i = 0; i < n_in; ++i) s[i] += static_cast<double>(row[i]) * row[i];
  }
  e.counts[expert] += n_rows;
}

Result<Imatrix> collect_importance(const Model& model, const std::vector<int32_t>& tokens,
                                   const CalibrationOptions& opts, ThreadPool& pool) {
  const int64_t n_ctx = opts.chunk_size;
  if (n_ctx < 2) return Status::errorf("calibration chunk size {} is too small", n_ctx);
  if (model.config().n_ctx_train > 0 && n_ctx > model.config().n_ctx_train)
    return Status::errorf("calibration chunk size {} exceeds the model's context ({})", n_ctx,
                          model.config().n_ctx_train);
  int64_t n_tok = static_cast<int64_t>(tokens.size());
  if (opts.max_tokens > 0) n_tok = std::min(n_tok, opts.max_tokens);
  const int64_t n_chunks = n_tok / n_ctx;
  if (n_chunks < 1)
    return Status::errorf("calibration needs at least {} tokens (one chunk), got {}", n_ctx, n_tok);
  const int V = model.config().n_vocab;
  for (int64_t i = 0; i < n_chunks * n_ctx; ++i)
    if (tokens[i] < 0 || tokens[i] >= V) return Status::errorf("token id {} outside the vocabulary", tokens[i]);
  const bool tied = model.file().tensor("output.weight") == nullptr;
  ImportanceCollector collector(tied, opts.include_output);
  ForwardContext ctx(model, pool, static_cast<int>(std::min<int64_t>(n_ctx, 512)));
  ctx.set_observer(&collector);
  ContiguousKvCache cache(model.config(), n_ctx);
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::copy(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx, chunk.begin());
    if (opts.bos_id >= 0) chunk[0] = opts.bos_id;
    EMBER_RETURN_IF_ERROR(ctx.forward(chunk.data(), n_ctx, 0, cache, logits.data()));
    if (opts.progress) opts.progress(c + 1, n_chunks);
  }
  Imatrix m = std::move(collector.result());
  m.chunk_count = static_cast<int32_t>(n_chunks);
  m.chunk_size = static_cast<int32_t>(n_ctx);
  return m;
}

Result<int> apply_imatrix(const Imatrix& m, QuantPlan* plan, std::map<std::string, std::vector<float>>* importance) {
  int n = 0;
  for (QuantPlanEntry& e : plan->entries) {
    if (e.method != QuantMethod::kRtn || !can_quantize_imatrix(e.target)) continue;
    std::optional<std::vector<float>> w = m.importance(e.name);
    if (!w) continue;
    if (static_cast<int64_t>(w->size()) != e.ne[0] * e.n_matrices())
      return Status::errorf("imatrix entry '{}' has {} values, the tensor {} ({} columns x {} matrices)", e.name,
                            w->size(), e.ne[0] * e.n_matrices(), e.ne[0], e.n_matrices());
    e.method = QuantMethod::kImatrix;
    (*importance)[e.name] = std::move(*w);
    ++n;
  }
  return n;
}

}  // namespace ember
