// libFuzzer target for the request-body path of `ember serve`: a JSON body
// through parse_json_object and parse_generation_request
// (src/server/openai_protocol.h) for both /v1/completions and
// /v1/chat/completions (built with -DEMBER_BUILD_FUZZ=ON).
//
// Build and run (from the repo root):
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_BUILD_FUZZ=ON -DEMBER_BUILD_TESTS=OFF \
//     -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang && ninja -C build-fuzz openai_protocol_fuzz
//   mkdir -p /tmp/openai_corpus
//   echo '{"prompt": ["a", "b"], "max_tokens": 4, "n": 2, "stop": ["x"], "logprobs": 3, "seed": 7}' \
//     > /tmp/openai_corpus/completion
//   echo '{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "stream": true,
//     "stream_options": {"include_usage": true}, "top_logprobs": 2, "logprobs": true}' > /tmp/openai_corpus/chat
//   build-fuzz/openai_protocol_fuzz /tmp/openai_corpus -max_total_time=60 -rss_limit_mb=1024 -max_len=4096
//
// The body comes from any client. Every input must be refused with a 400 and
// a message that serializes, or accepted with every limit the protocol
// promises holding (n, prompt count, max_tokens, ranges, stop strings).
// Anything else (crash, exception, ASan/UBSan report) is a bug.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "server/openai_protocol.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_request(const ember::GenerationRequest& r, ember::Endpoint ep, const ember::ProtocolLimits& lim) {
  check(r.endpoint == ep);
  check(r.n >= 1 && r.n <= lim.max_n);
  check(r.max_tokens >= -1 && r.max_tokens <= lim.max_model_len);
  check(r.temperature >= 0 && r.temperature <= 10);
  check(r.top_p > 0 && r.top_p <= 1);
  check(r.min_p >= 0 && r.min_p <= 1);
  check(r.top_k >= 0);
  check(r.repetition_penalty > 0 && r.repetition_penalty <= 10);
  check(r.top_logprobs >= 0 && r.top_logprobs <= 20);
  check(r.stop.size() <= 16);
  for (const auto& s : r.stop) check(s.size() <= 256);
  check(r.stop_token_ids.size() <= 256);
  for (int32_t t : r.stop_token_ids) check(t >= 0);
  if (ep == ember::Endpoint::kChat) {
    check(r.messages.is_array() && !r.messages.empty());
    for (const auto& m : r.messages) check(m.is_object() && m["role"].is_string() && m["content"].is_string());
    check(!(r.continue_final_message && r.add_generation_prompt));
  } else {
    const size_t n = r.prompt_is_tokens ? r.token_prompts.size() : r.text_prompts.size();
    check(n >= 1 && n <= static_cast<size_t>(lim.max_prompts));
    check(r.prompt_is_tokens ? r.text_prompts.empty() : r.token_prompts.empty());
    for (const auto& p : r.token_prompts) {
      check(!p.empty());
      for (int32_t t : p) check(t >= 0);
    }
  }
  check(!r.include_usage || r.stream);
}

void check_error(const ember::ApiError& e) {
  check(e.status == 400 && !e.message.empty());
  const std::string text = ember::json_text(ember::error_body(e));
  check(!text.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  ember::ProtocolLimits lim;
  lim.max_model_len = 2048;
  ember::ApiError err;
  std::optional<nlohmann::json> j = ember::parse_json_object(body, &err);
  if (!j) {
    check_error(err);
    return 0;
  }
  for (ember::Endpoint ep : {ember::Endpoint::kCompletions, ember::Endpoint::kChat}) {
    ember::ApiError e;
    auto r = ember::parse_generation_request(*j, ep, lim, &e);
    if (r) {
      check_request(*r, ep, lim);
    } else {
      check_error(e);
    }
  }
  return 0;
}
