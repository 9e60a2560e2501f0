// Layer-skip draft models; see layerskip.h.
#include "engine/speculative/layerskip.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "kernels/interleave.h"

namespace ember {

namespace {
bool parse_int(const std::string& s, int* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  const long x = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 20)) return false;
  *v = static_cast<int>(x);
  return true;
}
}  // namespace

Result<std::vector<int>> parse_skip_layers(const std::string& spec, int n_layer) {
  std::set<int> skip;
  if (spec == "none") return std::vector<int>{};  // the whole target (a truncated head makes it cheaper)
  if (spec == "odd") {
    for (int i = 1; i < n_layer; i += 2) skip.insert(i);
  } else if (spec == "even") {
    for (int i = 0; i < n_layer; i += 2) skip.insert(i);
  } else if (spec == "last-third" || spec == "last-half" || spec == "middle-third") {
    const int n = spec == "last-half" ? n_layer / 2 : n_layer / 3;
    // The very last layer is kept: it feeds the output head directly.
    const int first = spec == "middle-third" ? (n_layer - n) / 2 : n_layer - 1 - n;
    for (int i = first; i < first + n; ++i) skip.insert(i);
  } else {
    size_t at = 0;
    while (at <= spec.size()) {
      const size_t comma = std::min(spec.find(',', at), spec.size());
      const std::string item = spec.substr(at, comma - at);
      const size_t dash = item.find('-');
      int a = 0, b = 0;
      const bool ok = dash == std::string::npos ? parse_int(item, &a) && parse_int(item, &b)
                                                : parse_int(item.substr(0, dash), &a) &&
                                                      parse_int(item.substr(dash + 1), &b) && a <= b;
      if (!ok)
        return Status::errorf("skip layers '{}': '{}' is not a layer index or range (expected odd, even, last-third, "
                              "last-half, middle-third or a list like 4,6,8-11)",
                              spec, item);
      if (b >= n_layer) return Status::errorf("skip layers '{}': layer {} out of range [0, {})", spec, b, n_layer);
      for (int i = a; i <= b; ++i) skip.insert(i);
      at = comma + 1;
    }
  }
  if (skip.empty()) return Status::errorf("skip layers '{}' skips no layer of {}", spec, n_layer);
  if (static_cast<int>(skip.size()) >= n_layer)
    return Status::errorf("skip layers '{}' skips all {} layers", spec, n_layer);
  return std::vector<int>(skip.begin(), skip.end());
}

Result<std::unique_ptr<Model>> make_layer_skip_model(const Model& target, const std::vector<int>& skip) {
  if (skip.empty()) return Status::error("layer-skip draft: no layer skipped");
  return make_draft_view(target, skip, {});
}

Result<std::unique_ptr<Model>> make_draft_view(const Model& model, const std::vector<int>& skip,
                                               const std::vector<int32_t>& head_tokens) {
  auto file = std::make_unique<ModelFile>(model.file());  // views of the same mapped tensors
  ModelConfig cfg = model.config();
  if (!cfg.head_tokens.empty()) return Status::error("draft view: the model's head is truncated already");
  if (!cfg.output_tokens.empty() && !head_tokens.empty())
    return Status::error("draft view: a truncated draft head of a trimmed output vocabulary is not supported");
  auto w = bind_weights(*file, &cfg);
  if (!w) return w.status().with_context("draft view");
  std::vector<bool> drop(static_cast<size_t>(cfg.n_layer), false);
  for (int i : skip) {
    if (i < 0 || i >= cfg.n_layer) return Status::errorf("layer-skip draft: layer {} out of range", i);
    drop[static_cast<size_t>(i)] = true;
  }
  std::vector<LayerConfig> layers;
  std::vector<LayerWeights> lw;
  for (int i = 0; i < cfg.n_layer; ++i) {
    if (drop[static_cast<size_t>(i)]) continue;
    layers.push_back(cfg.layers[static_cast<size_t>(i)]);
    lw.push_back(std::move(w.value()->layers[static_cast<size_t>(i)]));
  }
  if (layers.empty()) return Status::error("layer-skip draft: every layer skipped");
  cfg.layers = std::move(layers);
  cfg.n_layer = static_cast<int>(cfg.layers.size());
  w.value()->layers = std::move(lw);
  if (!skip.empty()) cfg.name += "-layerskip";
  if (!head_tokens.empty()) {
    // The head rows of the chosen tokens, gathered into an owned buffer.
    // Interleaved heads (kernels/interleave.h) give their rows back in the
    // base type, interleaved again when the row count allows.
    const TensorView& full = *w.value()->output.weight;
    const size_t rb = full.row_bytes();
    auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[rb * head_tokens.size()]);
    for (size_t j = 0; j < head_tokens.size(); ++j) {
      const int32_t t = head_tokens[j];
      if (t < 0 || t >= full.ne[1] || (j > 0 && t <= head_tokens[j - 1]))
        return Status::errorf("truncated draft head: token {} out of order or out of range [0, {})", t, full.ne[1]);
      copy_row_bytes(full, t, buf.get() + j * rb);
    }
    TensorView v = full;
    v.type = dtype_layout_base(full.type);
    v.name = "output.draft_head";
    v.ne[1] = static_cast<int64_t>(head_tokens.size());
    v.data = buf.get();
    v.nbytes = rb * head_tokens.size();
    file->owners.push_back(buf);
    // Interleaved again where the target's was (the draft runs this head
    // every draft step: the same native kernels as the target's).
    if (full.type != v.type && interleave_pays(v.type, v.ne[1])) {
      auto il = std::shared_ptr<uint8_t[]>(new uint8_t[v.nbytes]);
      interleave_rows(v.type, buf.get(), v.ne[1], v.ne[0], il.get());
      v.type = full.type;
      v.data = il.get();
      file->owners.push_back(il);
    }
    const TensorView* tv = &(file->tensors[v.name] = v);
    w.value()->output.weight = tv;
    if (const float* b = w.value()->output.bias) {
      auto nb = std::make_unique<float[]>(head_tokens.size());
      for (size_t j = 0; j < head_tokens.size(); ++j) nb[j] = b[head_tokens[j]];
      w.value()->output.bias = nb.get();
      w.value()->owned.push_back(std::move(nb));
    }
    cfg.head_tokens = head_tokens;
    cfg.name += fmt::format("-head{}", head_tokens.size());
  }
  return Model::from_parts(std::move(cfg), std::move(w.value()), std::move(file));
}

}  // namespace ember
