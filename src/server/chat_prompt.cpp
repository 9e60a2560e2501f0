// Chat prompt rendering; see chat_prompt.h.
#include "server/chat_prompt.h"

#include "model/archs/archs.h"
#include "template/chat_template.h"

namespace ember {

std::string chat_template_for(const Tokenizer& tok, const std::string& arch) {
  if (!tok.chat_template().empty()) return tok.chat_template();
  const ArchSpec* spec = find_arch(arch);
  const char* builtin = builtin_chat_template(spec ? spec->chat_template : "chatml");
  return builtin ? builtin : "";
}

Result<std::string> render_chat(const Tokenizer& tok, const std::string& arch, const nlohmann::json& messages,
                                bool add_generation_prompt, const nlohmann::json& tools) {
  return render_chat_template(tok, chat_template_for(tok, arch), messages, add_generation_prompt, tools,
                              nlohmann::json::object());
}

Result<std::string> render_chat_template(const Tokenizer& tok, const std::string& chat_template,
                                         const nlohmann::json& messages, bool add_generation_prompt,
                                         const nlohmann::json& tools, const nlohmann::json& kwargs) {
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  return apply_chat_template(chat_template, messages, tools, add_generation_prompt, bos, eos, kwargs);
}

std::vector<std::pair<size_t, size_t>> content_ranges(const std::string& rendered, const nlohmann::json& messages) {
  std::vector<std::pair<size_t, size_t>> ranges;
  if (!messages.is_array()) return ranges;
  size_t cursor = 0;
  auto locate = [&](const std::string& text) {
    if (text.empty()) return;
    size_t at = rendered.find(text, cursor);
    std::string trimmed = text;
    if (at == std::string::npos) {
      const size_t b = trimmed.find_first_not_of(" \t\n\r");
      const size_t e = trimmed.find_last_not_of(" \t\n\r");
      trimmed = b == std::string::npos ? "" : trimmed.substr(b, e - b + 1);
      if (trimmed.empty()) return;
      at = rendered.find(trimmed, cursor);
      if (at == std::string::npos) return;
    } else {
      trimmed = text;
    }
    ranges.emplace_back(at, at + trimmed.size());
    cursor = at + trimmed.size();
  };
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("content")) continue;
    const auto& c = m["content"];
    if (c.is_string()) {
      locate(c.get<std::string>());
    } else if (c.is_array()) {  // [{type: text, text: ...}, ...]
      for (const auto& part : c)
        if (part.is_object() && part.contains("text") && part["text"].is_string()) locate(part["text"].get<std::string>());
    }
  }
  return ranges;
}

std::vector<int32_t> tokenize_rendered_chat(const Tokenizer& tok, const std::string& rendered,
                                            const nlohmann::json& messages) {
  bool add_bos = tok.add_bos() && tok.bos_id() >= 0;
  if (add_bos) {
    const std::string& bos = tok.token_text(tok.bos_id());
    if (!bos.empty() && rendered.rfind(bos, 0) == 0) add_bos = false;
  }
  EncodeOptions opts;
  opts.add_bos = add_bos;
  opts.parse_special = true;
  const std::vector<std::pair<size_t, size_t>> ranges = content_ranges(rendered, messages);
  opts.no_special_ranges = &ranges;
  return tok.encode(rendered, opts);
}

}  // namespace ember
