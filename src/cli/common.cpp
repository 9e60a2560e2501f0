// Shared CLI helpers; see common.h.
#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>

#include "core/thread_pool.h"
#include "model/io/model_file.h"
#include "transform/sparse_store.h"

namespace ember::cli {

namespace fs = std::filesystem;

namespace {
constexpr const char* kDefaultModel = "gemma-3-270m-q4_k_m.gguf";
}

Result<std::string> read_all(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::errorf("cannot read '{}'", path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string default_model_path() {
  if (const char* e = std::getenv("EMBER_MODEL"); e && *e) return e;
  std::error_code ec;
  fs::path cwd = fs::path("models") / kDefaultModel;
  if (fs::exists(cwd, ec)) return cwd.string();
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = 0;
    fs::path exe_dir = fs::path(buf).parent_path();
    for (fs::path p : {exe_dir / "models" / kDefaultModel, exe_dir.parent_path() / "models" / kDefaultModel})
      if (fs::exists(p, ec)) return p.string();
  }
  return cwd.string();
}

std::string resolve_model_path(const ArgParser& p, const std::string& m) {
  std::string path = m.empty() ? default_model_path() : m;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (m.empty())
      usage_error(p, fmt::format("default model not found at '{}': run scripts/setup.sh, or pass -m MODEL", path));
    else
      usage_error(p, fmt::format("model file '{}' does not exist", path));
    return "";
  }
  return path;
}

void LoadFlags::add_to(ArgParser& p) {
  p.flag("--detect-sparsity", &detect_sparsity,
         "store the Q8_0 / Q4_0 block matrices that are sparse enough (at least 10% fewer bytes: exact 2:4, a "
         "pruned dense export) in ember's sparse int8 / int4 formats at load (faster decode on AVX-512 VBMI2 "
         "CPUs, slower on AVX2-only ones; last-bit changes)");
}

Result<std::unique_ptr<Model>> load_model(const std::string& path, const ModelShard& shard, const LoadFlags& flags) {
  if (!flags.detect_sparsity) return Model::load(path, shard);
  // Stored sparse before the shard: a tensor-parallel rank's column part is
  // re-packed by model/shard.cpp.
  auto file = open_model_file(path);
  if (!file) return file.status();
  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  SparseStoreOptions so;
  so.max_ratio = 0.9;  // at least 10% fewer bytes (magnitude at 50% in int4: 17%)
  so.strict = false;
  auto rep = store_block_matrices_sparse(file.value().get(), pool, so);
  if (!rep) return rep.status().with_context(path);
  std::fprintf(stderr, "detect-sparsity: %d of %d Q8_0 / Q4_0 block matrices stored sparse (%s -> %s; %s of "
               "mapped dense pages released)\n",
               rep->matrices + rep->matrices4, rep->candidates, human_bytes(static_cast<double>(rep->dense_bytes)).c_str(),
               human_bytes(static_cast<double>(rep->sparse_bytes)).c_str(),
               human_bytes(static_cast<double>(rep->released_bytes)).c_str());
  auto m = Model::from_file(std::move(file.value()), shard);
  if (!m) return m.status().with_context(path);
  return m;
}

bool load_model_and_tokenizer(const ArgParser& p, const std::string& m, LoadedModel* out, const ModelShard& shard,
                              const LoadFlags& flags) {
  out->path = resolve_model_path(p, m);
  if (out->path.empty()) return false;
  auto model = load_model(out->path, shard, flags);
  if (!model) {
    usage_error(p, model.status().message());
    return false;
  }
  auto tok = Tokenizer::from_metadata((*model)->file().metadata);
  if (!tok) {
    usage_error(p, fmt::format("{}: tokenizer: {}", out->path, tok.status().message()));
    return false;
  }
  out->model = std::move(model.value());
  out->tokenizer = std::move(tok.value());
  if (!flags.file_layout) prepare_for_cpu(*out->model);
  return true;
}

void prepare_for_cpu(Model& model) {
  // The column copies of activation sparsity (none without thresholds) are
  // made from the interleaved rows as well as from the file's.
  const char* e = std::getenv("EMBER_REPACK");
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (e && std::string(e) == "0") {
    model.build_activation_columns(threads);
    return;
  }
  model.interleave_weights(threads);
  model.build_activation_columns(threads);  // none without activation-sparsity thresholds
}

// "1073741824", "512M", "2G", "1.5GiB" -> bytes.
Status parse_int_list(const std::string& name, const std::string& text, int lo, int hi, std::vector<int>* out) {
  out->clear();
  size_t b = 0;
  while (b <= text.size()) {
    size_t e = text.find(',', b);
    if (e == std::string::npos) e = text.size();
    const std::string item = text.substr(b, e - b);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || errno || v < lo || v > hi)
      return Status::errorf("{} expects integers in [{}, {}] separated by commas, got '{}'", name, lo, hi, text);
    out->push_back(static_cast<int>(v));
    b = e + 1;
  }
  return Status::ok();
}

bool parse_bytes(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v >= 0)) return false;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1024.0 * 1024 * 1024;
  else return false;
  const double b = v * mul;
  if (b > 1e15) return false;
  *out = static_cast<size_t>(b);
  return true;
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
}

}  // namespace ember::cli
