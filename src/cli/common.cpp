// Shared CLI helpers; see common.h.
#include "cli/common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace ember::cli {

namespace fs = std::filesystem;

namespace {
constexpr const char* kDefaultModel = "gemma-3-270m-q4_k_m.gguf";
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

bool load_model_and_tokenizer(const ArgParser& p, const std::string& m, LoadedModel* out) {
  out->path = resolve_model_path(p, m);
  if (out->path.empty()) return false;
  auto model = Model::load(out->path);
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
  return true;
}

}  // namespace ember::cli
