// Helpers for the tokenizer tests: fixture paths, JSONL reading, base64,
// unpacking the gzip-compressed tokenizer.json fixtures, and loading the
// reference tokenizers.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ember::testing_tok {

inline std::string source_dir() {
  if (const char* env = std::getenv("EMBER_SOURCE_DIR")) return env;
  return EMBER_SOURCE_DIR;
}
inline std::string data_dir() { return source_dir() + "/tests/data/tokenizer"; }
inline std::string gemma_path() { return source_dir() + "/models/gemma-3-270m-q4_k_m.gguf"; }

inline std::string base64_decode(const std::string& in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int buf = 0, bits = 0;
  for (char c : in) {
    const int v = val(c);
    if (v < 0) continue;
    buf = (buf << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xFF));
    }
  }
  return out;
}

struct Case {
  std::string text;
  bool add_special = false;
  bool special = false;
  std::vector<int32_t> ids;
  std::string decoded;
};

inline std::vector<Case> read_cases(const std::string& path) {
  std::vector<Case> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    Case c;
    c.text = j.contains("text") ? j["text"].get<std::string>() : base64_decode(j["text_b64"].get<std::string>());
    c.add_special = j["add_special"].get<bool>();
    c.special = j["special"].get<bool>();
    c.ids = j["ids"].get<std::vector<int32_t>>();
    c.decoded = j.contains("decoded") ? j["decoded"].get<std::string>()
                                      : base64_decode(j["decoded_b64"].get<std::string>());
    out.push_back(std::move(c));
  }
  return out;
}

// Unpacks tests/data/tokenizer/<name>/ (tokenizer.json.gz + tokenizer_config.json)
// into a fresh temporary folder and returns it ("" on failure).
inline std::string unpack_hf_fixture(const std::string& name) {
  namespace fs = std::filesystem;
  const std::string src = data_dir() + "/" + name;
  fs::path dir = fs::temp_directory_path() / ("ember_tok_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd = "gzip -dc '" + src + "/tokenizer.json.gz' > '" + (dir / "tokenizer.json").string() + "'";
  if (std::system(cmd.c_str()) != 0) return "";
  std::error_code ec;
  fs::copy_file(src + "/tokenizer_config.json", dir / "tokenizer_config.json", fs::copy_options::overwrite_existing,
                ec);
  if (ec) return "";
  return dir.string();
}

// Loads a committed Hugging Face tokenizer fixture through the Metadata path
// the model loader uses. Cached per name for the test binary's lifetime.
inline const Tokenizer* hf_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  const std::string dir = unpack_hf_fixture(name);
  if (dir.empty()) return nullptr;
  Metadata md;
  md.set("ember.hf.dir", Metadata::make_string(dir));
  auto tok = Tokenizer::from_metadata(md);
  std::filesystem::remove_all(dir);
  if (!tok) {
    ADD_FAILURE() << tok.status().message();
    return nullptr;
  }
  return (cache[name] = std::move(tok.value())).get();
}

inline const Tokenizer* gemma_tokenizer() {
  static std::unique_ptr<GgufFile> file;
  static std::unique_ptr<Tokenizer> tok;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (!std::filesystem::exists(gemma_path())) return nullptr;
    auto f = GgufFile::open(gemma_path());
    if (!f) {
      ADD_FAILURE() << f.status().message();
      return nullptr;
    }
    file = std::move(f.value());
    auto t = Tokenizer::from_metadata(file->metadata());
    if (!t) {
      ADD_FAILURE() << t.status().message();
      return nullptr;
    }
    tok = std::move(t.value());
  }
  return tok.get();
}

inline std::string show_ids(const std::vector<int32_t>& v) {
  std::ostringstream ss;
  ss << "[";
  for (size_t i = 0; i < v.size(); ++i) ss << (i ? "," : "") << v[i];
  ss << "]";
  return ss.str();
}

}  // namespace ember::testing_tok
