// open_model_file: GGUF files as they are; Hugging Face folders (config.json
// + safetensors) translated into GGUF metadata keys and tensor names. See
// model_file.h for the keys the HF path writes.
#include "model/io/model_file.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/fp16.h"
#include "model/archs/archs.h"
#include "model/io/gguf.h"
#include "model/io/hf_config.h"
#include "model/io/hf_quant.h"
#include "model/io/safetensors.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

Result<std::unique_ptr<ModelFile>> open_gguf(const std::string& path) {
  Result<std::unique_ptr<GgufFile>> g = GgufFile::open(path);
  if (!g) return g.status();
  std::shared_ptr<GgufFile> file(std::move(g.value()));
  auto mf = std::make_unique<ModelFile>();
  mf->path = path;
  mf->format = "gguf";
  mf->metadata = file->metadata();
  for (const GgufTensorInfo& t : file->tensors()) mf->tensors.emplace(t.view.name, t.view);
  if (const std::string* arch = mf->architecture()) {
    // RoPE style of files that do not say (the architecture's spec).
    const ArchSpec* spec = find_arch(*arch);
    const char* rope = spec ? spec->gguf_rope_type : nullptr;
    if (rope && !mf->metadata.find(*arch + ".rope.type"))
      mf->metadata.set(*arch + ".rope.type", Metadata::make_string(rope));
  }
  mf->owners.push_back(std::move(file));
  return mf;
}

Result<std::string> read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    s.append(buf, n);
    if (s.size() > (64u << 20)) {
      std::fclose(f);
      return Status::errorf("{}: larger than 64 MiB", path);
    }
  }
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) return Status::errorf("{}: read error", path);
  return s;
}

// An owned F32 copy of a 1-D F32/F16/BF16 tensor, optionally plus one.
TensorView to_f32(const TensorView& v, bool plus_one, std::vector<std::shared_ptr<void>>* owners) {
  const int64_t n = v.nelements();
  auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
  float* out = buf->data();
  const uint8_t* src = static_cast<const uint8_t*>(v.data);
  for (int64_t i = 0; i < n; ++i) {
    float x;
    if (v.type == DType::kF32) {
      std::memcpy(&x, src + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      x = v.type == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    out[i] = plus_one ? x + 1.0f : x;
  }
  TensorView r = v;
  r.type = DType::kF32;
  r.data = out;
  r.nbytes = static_cast<size_t>(n) * 4;
  owners->push_back(std::move(buf));
  return r;
}

// An owned, 64-byte aligned copy (for tensors whose offset in the file is not
// a multiple of their element size).
TensorView aligned_copy(const TensorView& v, std::vector<std::shared_ptr<void>>* owners) {
  auto buf = std::make_shared<std::vector<uint64_t>>((v.nbytes + 7) / 8);
  std::memcpy(buf->data(), v.data, v.nbytes);
  TensorView r = v;
  r.data = buf->data();
  owners->push_back(std::move(buf));
  return r;
}

// Layer index of "blk.N.*", or -1.
int64_t block_index(const std::string& name) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  int64_t v = 0;
  size_t p = 4;
  for (; p < name.size() && name[p] >= '0' && name[p] <= '9'; ++p) v = v * 10 + (name[p] - '0');
  return p > 4 ? v : -1;
}

Result<std::unique_ptr<ModelFile>> open_hf(const std::string& dir, const std::string& single_file) {
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(cfg_path, ec)) return Status::errorf("{}: config.json not found", dir);
  Result<std::string> text = read_text_file(cfg_path);
  if (!text) return text.status();

  auto mf = std::make_unique<ModelFile>();
  mf->path = single_file.empty() ? dir : single_file;
  mf->format = "safetensors";
  Result<HfModelInfo> info_r = hf_config_to_metadata(text.value(), cfg_path, &mf->metadata);
  if (!info_r) return info_r.status();
  const HfModelInfo& info = info_r.value();
  fs::path abs_dir = fs::absolute(fs::path(dir), ec);
  if (ec) abs_dir = fs::path(dir);
  abs_dir = abs_dir.lexically_normal();
  std::string dir_str = abs_dir.string();
  if (dir_str.size() > 1 && dir_str.back() == '/') dir_str.pop_back();
  mf->metadata.set("ember.hf.dir", Metadata::make_string(dir_str));
  if (!mf->metadata.find("general.name"))
    mf->metadata.set("general.name", Metadata::make_string(fs::path(dir_str).filename().string()));

  Result<SafetensorsSet> set = single_file.empty() ? open_safetensors_dir(dir) : open_safetensors_files({single_file});
  if (!set) return set.status();
  for (const auto& f : set->files) mf->owners.push_back(f);

  // GPTQ / AWQ / compressed-tensors linears, repacked exactly (hf_quant.h).
  Result<std::optional<HfQuantConfig>> qcfg = parse_hf_quant_config(text.value(), cfg_path);
  if (!qcfg) return qcfg.status();
  if (qcfg->has_value()) mf->metadata.set("ember.hf.quantization", Metadata::make_string((*qcfg)->summary));
  auto gguf_name = [&](const std::string& hf_name) {
    const std::string name = hf_tensor_name_to_gguf(info.arch, hf_name);
    return name == "output.weight" && info.tie_word_embeddings ? std::string() : name;
  };
  Result<HfQuantWeights> quant = load_hf_quant_weights(
      qcfg->has_value() ? &**qcfg : nullptr, set.value(),
      [&](const std::string& hf_name) { return !gguf_name(hf_name).empty(); }, &mf->owners);
  if (!quant) return quant.status();

  // Checks a GGUF name for a tensor of layer range and uniqueness.
  auto check_new = [&](const std::string& name, const std::string& hf_name, const std::string& file) -> Status {
    const int64_t blk = block_index(name);
    if (blk >= info.n_layer)
      return Status::errorf("{}: tensor '{}' belongs to layer {} but the config has {} layers", file, hf_name, blk,
                            info.n_layer);
    if (mf->tensors.count(name))
      return Status::errorf("{}: tensor '{}' maps to '{}', which another tensor already provides", file, hf_name,
                            name);
    return Status::ok();
  };
  for (const auto& [hf_name, view] : quant->weights) {
    const std::string name = gguf_name(hf_name);
    EMBER_RETURN_IF_ERROR(check_new(name, hf_name, quant->files.at(hf_name)));
    TensorView v = view;
    v.name = name;
    mf->tensors.emplace(name, v);
  }

  for (const auto& [hf_name, entry] : set->tensors) {
    if (quant->consumed.count(hf_name)) continue;
    const std::string name = gguf_name(hf_name);
    if (name.empty()) continue;  // not a weight ember uses
    EMBER_RETURN_IF_ERROR(check_new(name, hf_name, entry.file->path()));
    Result<TensorView> view = safetensors_view(*entry.tensor, name, entry.file->path());
    if (!view) return view.status();
    TensorView v = view.value();
    if (v.n_dims == 1) {
      // Norm weights and biases: F32 like in GGUF files; (1 + w) norms get +1.
      const bool plus_one =
          info.norm_plus_one && role_info(role_from_gguf_name(name, nullptr)).kind == TensorKind::kNorm;
      v = to_f32(v, plus_one, &mf->owners);
    } else if (reinterpret_cast<uintptr_t>(v.data) % dtype_type_size(v.type) != 0) {
      v = aligned_copy(v, &mf->owners);
    }
    mf->tensors.emplace(name, v);
  }

  const TensorView* embd = mf->tensor("token_embd.weight");
  if (!embd) return Status::errorf("{}: no model.embed_tokens.weight tensor", dir);
  if (embd->n_dims != 2 || embd->ne[0] != info.n_embd)
    return Status::errorf("{}: model.embed_tokens.weight has shape {} (GGML order) but hidden_size is {}", dir,
                          embd->shape_string(), info.n_embd);
  if (!info.tie_word_embeddings && !mf->tensor("output.weight"))
    return Status::errorf("{}: lm_head.weight is missing and tie_word_embeddings is false", dir);

  if (const ArchSpec* spec = find_arch(info.arch); spec && spec->hf_rearrange)
    EMBER_RETURN_IF_ERROR(spec->hf_rearrange(set.value(), mf.get()));

  for (const auto& [name, values] : info.f32_tensors) {
    auto buf = std::make_shared<std::vector<float>>(values);
    TensorView v;
    v.name = name;
    v.type = DType::kF32;
    v.n_dims = 1;
    v.ne[0] = static_cast<int64_t>(buf->size());
    v.data = buf->data();
    v.nbytes = buf->size() * 4;
    mf->owners.push_back(std::move(buf));
    mf->tensors[v.name] = v;
  }
  return mf;
}

}  // namespace

Result<std::unique_ptr<ModelFile>> open_model_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return Status::errorf("{}: no such file or directory", path);
  if (fs::is_directory(st)) return open_hf(path, "");

  // A file: GGUF by its magic, else a safetensors file or an HF JSON file
  // inside a model folder.
  char magic[4] = {0};
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    const size_t n = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (n == 4 && std::memcmp(magic, "GGUF", 4) == 0) return open_gguf(path);
  } else {
    return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  }
  const fs::path p(path);
  std::string parent = p.parent_path().string();
  if (parent.empty()) parent = ".";
  if (p.extension() == ".safetensors") return open_hf(parent, path);
  const std::string base = p.filename().string();
  if (base == "config.json" || base == "model.safetensors.index.json") return open_hf(parent, "");
  if (p.extension() == ".gguf") return open_gguf(path);  // gives the precise error
  return Status::errorf("{}: not a GGUF file, a .safetensors file or a model folder", path);
}

}  // namespace ember
