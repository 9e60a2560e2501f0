// `ember tokenize`, `ember detokenize` and `ember template`: the tokenizer
// and chat-template layers from the command line.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "server/chat_prompt.h"
#include "cli/common.h"

namespace ember::cli {

namespace {

// Loads only what the tokenizer needs (metadata), not the weights' config.
Result<std::unique_ptr<ModelFile>> open_for_tokenizer(const ArgParser& p, const std::string& m, std::string* path) {
  *path = resolve_model_path(p, m);
  if (path->empty()) return Status::error("");
  return open_model_file(*path);
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::string escape_piece(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c == '\r') o += "\\r";
    else if (c < 0x20) o += fmt::format("\\x{:02x}", c);
    else o += static_cast<char>(c);
  }
  return o;
}

}  // namespace

int cmd_tokenize(int argc, char** argv, int first) {
  ArgParser p("tokenize", "ember tokenize [-m MODEL] [--special] [--pieces] [--no-bos] TEXT|-");
  std::string model_path;
  bool special = false, pieces = false, no_bos = false;
  std::vector<std::string> pos;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.flag("--special", &special, "match control tokens written in the text");
  p.flag("--pieces", &pieces, "print each id with its piece");
  p.flag("--no-bos", &no_bos, "do not add the BOS token");
  p.positionals(&pos, "TEXT");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() != 1) return usage_error(p, "expects one TEXT argument ('-' reads standard input)");
  std::string path;
  auto file = open_for_tokenizer(p, model_path, &path);
  if (!file) return file.status().message().empty() ? kExitUsage : usage_error(p, file.status().message());
  auto tok = Tokenizer::from_metadata((*file)->metadata);
  if (!tok) return usage_error(p, fmt::format("{}: tokenizer: {}", path, tok.status().message()));
  const std::string text = pos[0] == "-" ? read_stdin() : pos[0];
  EncodeOptions eo;
  eo.add_bos = !no_bos;
  eo.parse_special = special;
  const std::vector<int32_t> ids = (*tok)->encode(text, eo);
  if (pieces) {
    for (int32_t id : ids) std::printf("%7d  '%s'\n", id, escape_piece((*tok)->token_to_piece(id)).c_str());
  } else {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", line.c_str());
  }
  return kExitOk;
}

int cmd_detokenize(int argc, char** argv, int first) {
  ArgParser p("detokenize", "ember detokenize [-m MODEL] [--special] IDS...");
  std::string model_path;
  bool special = false;
  std::vector<std::string> pos;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.flag("--special", &special, "render control tokens as text");
  p.positionals(&pos, "IDS");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.empty()) return usage_error(p, "expects token ids");
  // Accept "1 2 3", "1,2,3" and "[1, 2, 3]".
  std::string all;
  for (const std::string& s : pos) all += s + " ";
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&]() -> bool {
    if (cur.empty()) return true;
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(cur.c_str(), &end, 10);
    if (*end || errno || v < 0 || v > INT32_MAX) return false;
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
    return true;
  };
  for (char c : all) {
    if (c == ' ' || c == ',' || c == '[' || c == ']' || c == '\n' || c == '\t') {
      if (!flush()) return usage_error(p, fmt::format("'{}' is not a token id", cur));
    } else {
      cur += c;
    }
  }
  if (!flush()) return usage_error(p, fmt::format("'{}' is not a token id", cur));
  std::string path;
  auto file = open_for_tokenizer(p, model_path, &path);
  if (!file) return file.status().message().empty() ? kExitUsage : usage_error(p, file.status().message());
  auto tok = Tokenizer::from_metadata((*file)->metadata);
  if (!tok) return usage_error(p, fmt::format("{}: tokenizer: {}", path, tok.status().message()));
  for (int32_t id : ids)
    if (id >= (*tok)->n_vocab()) return usage_error(p, fmt::format("token id {} is out of range (vocabulary of {})", id, (*tok)->n_vocab()));
  const std::string text = (*tok)->decode(ids, special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return kExitOk;
}

int cmd_template(int argc, char** argv, int first) {
  ArgParser p("template", "ember template [-m MODEL] --messages FILE.json [--add-generation-prompt] [--ids]");
  std::string model_path, messages_path;
  bool gen_prompt = false, show_ids = false;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.option("--messages", &messages_path, "FILE", "JSON array of {role, content} messages ('-': standard input)");
  p.flag("--add-generation-prompt", &gen_prompt, "end with the assistant turn header");
  p.flag("--ids", &show_ids, "also print the token ids of the rendered prompt");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (messages_path.empty()) return usage_error(p, "--messages FILE is required");
  std::string text;
  if (messages_path == "-") {
    text = read_stdin();
  } else {
    std::ifstream f(messages_path, std::ios::binary);
    if (!f) return usage_error(p, fmt::format("cannot read '{}'", messages_path));
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  nlohmann::json messages = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return usage_error(p, fmt::format("'{}' is not valid JSON", messages_path));
  if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
  if (!messages.is_array()) return usage_error(p, "messages must be a JSON array of {role, content} objects");
  std::string path;
  auto file = open_for_tokenizer(p, model_path, &path);
  if (!file) return file.status().message().empty() ? kExitUsage : usage_error(p, file.status().message());
  auto tok = Tokenizer::from_metadata((*file)->metadata);
  if (!tok) return usage_error(p, fmt::format("{}: tokenizer: {}", path, tok.status().message()));
  const std::string* arch = (*file)->architecture();
  auto rendered = render_chat(**tok, arch ? *arch : "", messages, gen_prompt);
  if (!rendered) return usage_error(p, fmt::format("chat template: {}", rendered.status().message()));
  std::fwrite(rendered->data(), 1, rendered->size(), stdout);
  if (show_ids) {
    std::vector<int32_t> ids = tokenize_rendered_chat(**tok, *rendered, messages);
    std::string line = "\n[";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace ember::cli
