// Chat prompt rendering; see chat_prompt.h.
#include "cli/chat_prompt.h"

#include "template/chat_template.h"

namespace ember::cli {

std::string chat_template_for(const Tokenizer& tok, const std::string& arch) {
  if (!tok.chat_template().empty()) return tok.chat_template();
  const char* builtin = builtin_chat_template(arch.rfind("gemma", 0) == 0 ? "gemma" : "chatml");
  return builtin ? builtin : "";
}

Result<std::string> render_chat(const Tokenizer& tok, const std::string& arch, const nlohmann::json& messages,
                                bool add_generation_prompt) {
  const std::string tmpl = chat_template_for(tok, arch);
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  return apply_chat_template(tmpl, messages, nullptr, add_generation_prompt, bos, eos, nlohmann::json::object());
}

std::vector<int32_t> tokenize_rendered_chat(const Tokenizer& tok, const std::string& rendered) {
  bool add_bos = tok.add_bos() && tok.bos_id() >= 0;
  if (add_bos) {
    const std::string& bos = tok.token_text(tok.bos_id());
    if (!bos.empty() && rendered.rfind(bos, 0) == 0) add_bos = false;
  }
  EncodeOptions opts;
  opts.add_bos = add_bos;
  opts.parse_special = true;
  return tok.encode(rendered, opts);
}

}  // namespace ember::cli
