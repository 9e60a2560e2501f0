// libFuzzer target for the chat-template engine (src/template/; built with
// -DEMBER_BUILD_FUZZ=ON): a template comes from a model file, so its source
// is untrusted input. It is parsed, and when it parses, rendered with a
// small conversation under tight limits.
//
// Build and run (from the repo root):
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_BUILD_FUZZ=ON -DEMBER_BUILD_TESTS=OFF \
//     -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang && ninja -C build-fuzz template_fuzz
//   mkdir -p /tmp/template_corpus && cp tests/data/template/templates/*.jinja /tmp/template_corpus/
//   build-fuzz/template_fuzz /tmp/template_corpus -max_total_time=60 -rss_limit_mb=1024 -max_len=8192
//
// Every input must give a Status error or a rendered text within the output
// limit. Anything else (crash, exception, ASan/UBSan report, a check
// failure, a hang past the step limit) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = ember::tmpl::Template::parse(source);
  if (!t.is_ok()) return 0;
  ember::tmpl::ChatInputs in;
  in.messages = ember::tmpl::Value(nlohmann::json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}},
       {{"role", "assistant"}, {"content", "Hi!"}}, {{"role", "user"}, {"content", "Bye"}}}));
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.options.now = 0;
  in.options.limits.max_output_bytes = 1 << 16;
  in.options.limits.max_steps = 20000;
  in.options.limits.max_range = 1000;
  auto out = ember::tmpl::apply_chat_template(**t, in);
  if (out.is_ok() && out->size() > in.options.limits.max_output_bytes) std::abort();
  return 0;
}
