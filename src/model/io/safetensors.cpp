// Safetensors reader and sharded-folder loader; see safetensors.h. JSON is
// parsed with nlohmann::json; its exceptions are caught here and turned into
// Status values, and every field is type-checked before it is read.
#include "model/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ember {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderLength = 100'000'000;  // same limit as the reference implementation
constexpr size_t kMaxRank = 8;
constexpr int kMaxJsonDepth = 8;

struct DTypeInfo {
  const char* name;
  size_t size;
  bool supported;
  DType type;
};

constexpr DTypeInfo kDTypes[] = {
    {"F32", 4, true, DType::kF32},     {"F16", 2, true, DType::kF16},     {"BF16", 2, true, DType::kBF16},
    {"F64", 8, false, DType::kF64},    {"I64", 8, false, DType::kI64},    {"U64", 8, false, DType::kI64},
    {"I32", 4, false, DType::kI32},    {"U32", 4, false, DType::kI32},    {"I16", 2, false, DType::kI16},
    {"U16", 2, false, DType::kI16},    {"I8", 1, false, DType::kI8},      {"U8", 1, false, DType::kI8},
    {"BOOL", 1, false, DType::kI8},    {"F8_E4M3", 1, false, DType::kI8}, {"F8_E5M2", 1, false, DType::kI8},
    {"F8_E8M0", 1, false, DType::kI8},
};

const DTypeInfo* find_dtype(const std::string& name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

// Parses JSON text; rejects duplicate top-level keys and deep nesting.
Status parse_json(const char* begin, const char* end, json* out, bool check_duplicates) {
  std::set<std::string> keys;
  std::string dup;
  bool too_deep = false;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    if (check_duplicates && ev == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.insert(k).second && dup.empty()) dup = k;
    }
    return true;
  };
  try {
    *out = json::parse(begin, end, cb, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    return Status::errorf("invalid JSON: {}", e.what());
  } catch (const std::exception& e) {
    return Status::errorf("cannot parse JSON: {}", e.what());
  }
  if (too_deep) return Status::errorf("JSON nested deeper than {} levels", kMaxJsonDepth);
  if (!dup.empty()) return Status::errorf("duplicate key '{}'", dup);
  return Status::ok();
}

bool get_u64(const json& j, uint64_t* v) {
  if (!j.is_number_unsigned()) return false;
  *v = j.get<uint64_t>();
  return true;
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                                const std::string& name) {
  auto fail = [&](const std::string& msg) { return Status::errorf("{}: {}", name, msg); };
  if (size < 8) return fail(fmt::format("file too small for a safetensors header ({} bytes)", size));
  uint64_t hlen = 0;
  std::memcpy(&hlen, data, 8);
  if (hlen > size - 8)
    return fail(fmt::format("header length {} exceeds the {} bytes after the length field", hlen, size - 8));
  if (hlen > kMaxHeaderLength) return fail(fmt::format("header length {} exceeds the limit of {}", hlen, kMaxHeaderLength));
  if (hlen < 2 || data[8] != '{') return fail("header is not a JSON object (must start with '{')");

  const char* text = reinterpret_cast<const char*>(data + 8);
  json header;
  Status st = parse_json(text, text + hlen, &header, true);
  if (!st) return fail("header: " + st.message());
  if (!header.is_object()) return fail("header is not a JSON object");

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  const uint64_t base = 8 + hlen;
  const uint64_t buf_size = size - base;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) return fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return fail(fmt::format("__metadata__ value for '{}' is not a string", m.key()));
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (key.empty()) return fail("tensor with an empty name");
    const std::string ctx = fmt::format("tensor '{}'", key);
    if (!v.is_object()) return fail(ctx + ": entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return fail(ctx + ": missing or non-string 'dtype'");
    if (sh == v.end() || !sh->is_array()) return fail(ctx + ": missing or non-array 'shape'");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      return fail(ctx + ": 'data_offsets' must be an array of two integers");

    SafetensorsTensor t;
    t.name = key;
    t.dtype = dt->get<std::string>();
    const DTypeInfo* info = find_dtype(t.dtype);
    if (!info) return fail(fmt::format("{}: unknown dtype '{}'", ctx, t.dtype));
    t.supported = info->supported;
    t.type = info->type;

    if (sh->size() > kMaxRank) return fail(fmt::format("{}: rank {} exceeds {}", ctx, sh->size(), kMaxRank));
    uint64_t nelem = 1;
    for (size_t d = 0; d < sh->size(); ++d) {
      uint64_t n = 0;
      if (!get_u64((*sh)[d], &n) || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(fmt::format("{}: shape[{}] is not a non-negative integer", ctx, d));
      if (n != 0 && nelem > std::numeric_limits<uint64_t>::max() / n)
        return fail(fmt::format("{}: element count overflows", ctx));
      nelem *= n;
      t.shape.push_back(static_cast<int64_t>(n));
    }
    if (nelem > std::numeric_limits<uint64_t>::max() / info->size)
      return fail(fmt::format("{}: byte size overflows", ctx));
    const uint64_t nbytes = nelem * info->size;
    if (!get_u64((*off)[0], &t.begin) || !get_u64((*off)[1], &t.end))
      return fail(ctx + ": 'data_offsets' must be non-negative integers");
    if (t.begin > t.end) return fail(fmt::format("{}: data_offsets [{}, {}] are reversed", ctx, t.begin, t.end));
    if (t.end > buf_size)
      return fail(fmt::format("{}: data [offset {}, size {}] extends past end of file (size {})", ctx, base + t.begin,
                              t.end - t.begin, size));
    if (t.end - t.begin != nbytes)
      return fail(fmt::format("{}: data_offsets [{}, {}] hold {} bytes but {} x {} needs {}", ctx, t.begin, t.end,
                              t.end - t.begin, t.dtype, nelem, nbytes));
    t.data = data + base + t.begin;
    t.nbytes = static_cast<size_t>(nbytes);
    f->index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes.
  std::vector<const SafetensorsTensor*> order;
  for (const SafetensorsTensor& t : f->tensors_)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->begin < b->begin; });
  for (size_t k = 1; k < order.size(); ++k) {
    if (order[k - 1]->end > order[k]->begin)
      return fail(fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", order[k - 1]->name,
                              order[k - 1]->begin, order[k - 1]->end, order[k]->name, order[k]->begin, order[k]->end));
  }
  return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  Result<MappedFile> mf = MappedFile::open(path);
  if (!mf) return mf.status();
  MappedFile file = std::move(mf.value());
  Result<std::unique_ptr<SafetensorsFile>> r = parse(file.data(), file.size(), path);
  if (!r) return r.status();
  r.value()->file_ = std::move(file);  // the mapping itself does not move
  return r;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<TensorView> safetensors_view(const SafetensorsTensor& t, const std::string& name, const std::string& file) {
  if (!t.supported)
    return Status::errorf("{}: tensor '{}': dtype {} is not supported (only F32, F16 and BF16)", file, t.name, t.dtype);
  if (t.shape.size() > 4) return Status::errorf("{}: tensor '{}': rank {} exceeds 4", file, t.name, t.shape.size());
  TensorView v;
  v.name = name;
  v.type = t.type;
  v.n_dims = t.shape.empty() ? 1 : static_cast<int>(t.shape.size());
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) return Status::errorf("{}: tensor '{}': shape has a zero dimension", file, t.name);
    v.ne[d] = t.shape[t.shape.size() - 1 - d];
  }
  v.data = t.data;
  v.nbytes = t.nbytes;
  return v;
}

// ---------------------------------------------------------------------------
// Sets of files

namespace {

Status add_file(SafetensorsSet* set, std::shared_ptr<SafetensorsFile> f) {
  for (const SafetensorsTensor& t : f->tensors()) {
    auto [it, inserted] = set->tensors.emplace(t.name, SafetensorsSet::Entry{&t, f.get()});
    if (!inserted)
      return Status::errorf("tensor '{}' is in both {} and {}", t.name, it->second.file->path(), f->path());
  }
  set->files.push_back(std::move(f));
  return Status::ok();
}

}  // namespace

Result<SafetensorsSet> open_safetensors_files(const std::vector<std::string>& paths) {
  SafetensorsSet set;
  for (const std::string& p : paths) {
    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(p);
    if (!f) return f.status();
    EMBER_RETURN_IF_ERROR(add_file(&set, std::shared_ptr<SafetensorsFile>(std::move(f.value()))));
  }
  return set;
}

Result<SafetensorsSet> open_safetensors_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::errorf("{}: not a directory", dir);
  const fs::path root(dir);
  const fs::path index = root / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    const std::string ipath = index.string();
    Result<MappedFile> mf = MappedFile::open(ipath);
    if (!mf) return mf.status();
    const char* text = reinterpret_cast<const char*>(mf->data());
    json j;
    Status st = parse_json(text, text + mf->size(), &j, true);
    if (!st) return st.with_context(ipath);
    if (!j.is_object()) return Status::errorf("{}: not a JSON object", ipath);
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) return Status::errorf("{}: missing or non-object 'weight_map'", ipath);
    std::map<std::string, std::string> weight_map;
    std::set<std::string> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        return Status::errorf("{}: weight_map entry '{}' is not a string", ipath, it.key());
      const std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
          file == "." || file == "..")
        return Status::errorf("{}: weight_map entry '{}' names an invalid file '{}'", ipath, it.key(), file);
      weight_map.emplace(it.key(), file);
      shards.insert(file);
    }
    if (shards.empty()) return Status::errorf("{}: weight_map is empty", ipath);
    std::vector<std::string> paths;
    for (const std::string& s : shards) paths.push_back((root / s).string());
    Result<SafetensorsSet> set = open_safetensors_files(paths);
    if (!set) return set.status();
    for (const auto& [tensor, file] : weight_map) {
      auto it = set->tensors.find(tensor);
      const std::string want = (root / file).string();
      if (it == set->tensors.end() || it->second.file->path() != want)
        return Status::errorf("{}: weight_map puts '{}' in {}, but that file does not hold it", ipath, tensor, file);
    }
    return set;
  }
  const fs::path single = root / "model.safetensors";
  if (fs::exists(single, ec)) return open_safetensors_files({single.string()});
  std::vector<std::string> paths;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors") paths.push_back(it->path().string());
  }
  if (ec) return Status::errorf("{}: cannot list directory: {}", dir, ec.message());
  if (paths.empty()) return Status::errorf("{}: no *.safetensors files", dir);
  std::sort(paths.begin(), paths.end());
  return open_safetensors_files(paths);
}

}  // namespace ember
