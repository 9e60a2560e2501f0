// OpenAI API layer without sockets: stop-string matching, request
// validation (errors name the field), constant-time key check, metrics
// format, and whole requests through OpenAiService + AsyncEngine on the
// default model with an in-memory HttpResponse (streamed text == plain
// text, stop strings cut the greedy output exactly, a client that goes away
// frees every KV block).
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "server/openai_service.h"
#include "server/stop_matcher.h"

namespace ember {
namespace {

using nlohmann::json;

TEST(StopMatcher, HoldsBackPartialMatchesAcrossPieces) {
  StopMatcher m({"\n\n", "END"});
  EXPECT_EQ(m.push("Hello E"), "Hello ");  // "E" may start "END"
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X more"), "ENX more");
  EXPECT_EQ(m.push(" text\n"), " text");
  EXPECT_EQ(m.push("\nrest"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\n\n");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(Protocol, ReasoningFields) {
  ProtocolLimits lim;
  ApiError err;
  auto r = parse_generation_request(
      json::parse(R"({"messages": [{"role": "user", "content": "q"},
                      {"role": "assistant", "content": "a", "reasoning": "because"}, {"role": "user", "content": "r"}],
                      "reasoning": {"effort": "high", "exclude": true, "min_tokens": 3, "enabled": true},
                      "reasoning_format": "none", "chat_template_kwargs": {"enable_thinking": false, "x": [1]}})"),
      Endpoint::kChat, lim, &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_EQ(r->reasoning.effort, "high");
  EXPECT_TRUE(r->reasoning.exclude);
  EXPECT_EQ(r->reasoning.min_tokens, 3);
  EXPECT_EQ(r->reasoning.budget, -2);
  EXPECT_TRUE(r->reasoning.enabled.value_or(false));
  EXPECT_EQ(r->reasoning.format, "none");
  EXPECT_EQ(r->chat_template_kwargs, json::parse(R"({"enable_thinking": false, "x": [1]})"));
  EXPECT_EQ(r->messages[1]["reasoning_content"], "because");  // given back under its template name
  auto b = parse_generation_request(
      json::parse(R"({"messages": [{"role": "user", "content": "q"}], "reasoning_effort": "none",
                      "thinking_budget": -1, "thinking_budget_min": 0})"),
      Endpoint::kChat, lim, &err);
  ASSERT_TRUE(b.has_value()) << err.message;
  EXPECT_EQ(b->reasoning.effort, "none");
  EXPECT_EQ(b->reasoning.budget, -1);
  EXPECT_EQ(b->reasoning.min_tokens, 0);
}

TEST(StopMatcher, EarliestMatchWinsAndFlushReleasesTail) {
  StopMatcher m({"cd", "bcx"});
  EXPECT_EQ(m.push("ab"), "a");
  EXPECT_EQ(m.push("cd"), "b");  // "cd" wins; the held "b" never completed "bcx"
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"xyz"});
  EXPECT_EQ(n.push("abxy"), "ab");
  EXPECT_EQ(n.flush(), "xy");
  StopMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
  StopMatcher at_start({"ab"});
  EXPECT_EQ(at_start.push("ab"), "");
  EXPECT_TRUE(at_start.stopped());
}

TEST(Protocol, ErrorsNameTheField) {
  ProtocolLimits lim;
  lim.max_model_len = 1000;
  struct Case {
    const char* body;
    Endpoint ep;
    const char* param;
  } cases[] = {
      {R"({"prompt": "x", "max_tokens": "5"})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": -1})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e12})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1001})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", Endpoint::kCompletions, "temperature"},
      {R"({"prompt": "x", "n": 1000})", Endpoint::kCompletions, "n"},
      {R"({"prompt": "x", "stop": 5})", Endpoint::kCompletions, "stop"},
      {R"({"prompt": "x", "top_p": 0})", Endpoint::kCompletions, "top_p"},
      {R"({"prompt": "x", "logprobs": true})", Endpoint::kCompletions, "logprobs"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", Endpoint::kCompletions, "stream_options"},
      {R"({"prompt": 5})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": []})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": [1, -2]})", Endpoint::kCompletions, "prompt"},
      {R"({})", Endpoint::kCompletions, "prompt"},
      {R"({"messages": "hi"})", Endpoint::kChat, "messages"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", Endpoint::kChat, "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 3}]})", Endpoint::kChat, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", Endpoint::kChat,
       "messages[0].content[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 3})", Endpoint::kChat, "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 50})", Endpoint::kChat,
       "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", Endpoint::kChat, "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": 1.5})", Endpoint::kChat, "seed"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})", Endpoint::kChat,
       "reasoning_effort"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning": "high"})", Endpoint::kChat, "reasoning"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning": {"max_tokens": -5}})", Endpoint::kChat,
       "reasoning.max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning": {"effort": "low", "max_tokens": 5}})",
       Endpoint::kChat, "reasoning"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning": {"exclude": 1}})", Endpoint::kChat,
       "reasoning.exclude"},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking_budget": "x"})", Endpoint::kChat, "thinking_budget"},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking_budget": 5, "reasoning": {"max_tokens": 5}})",
       Endpoint::kChat, "thinking_budget"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_format": "raw"})", Endpoint::kChat,
       "reasoning_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})", Endpoint::kChat,
       "chat_template_kwargs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}})", Endpoint::kChat,
       "chat_template_kwargs"},
      {R"({"messages": [{"role": "assistant", "content": "x", "reasoning_content": 5}]})", Endpoint::kChat,
       "messages[0].reasoning_content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
       Endpoint::kChat, "response_format.type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})",
       Endpoint::kChat, "response_format.json_schema"},
      {R"({"prompt": "x", "response_format": {"type": "json_object"}, "guided_regex": "a+"})", Endpoint::kCompletions,
       "guided_regex"},
      {R"({"prompt": "x", "guided_choice": []})", Endpoint::kCompletions, "guided_choice"},
      {R"({"prompt": "x", "structured_outputs": {"grammar": 3}})", Endpoint::kCompletions, "structured_outputs.grammar"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", Endpoint::kCompletions, "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 101}})", Endpoint::kCompletions, "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", Endpoint::kChat,
       "tools[0].function"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {"type": "function"}})", Endpoint::kChat, "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       Endpoint::kChat, "tools[0].function.name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
          "parameters": 3}}]})", Endpoint::kChat, "tools[0].function.parameters"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}})", Endpoint::kChat, "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", Endpoint::kChat, "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "always"})", Endpoint::kChat, "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "required", "response_format": {"type": "json_object"}})", Endpoint::kChat, "tool_choice"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": 3}]}]})", Endpoint::kChat,
       "messages[0].tool_calls[0]"},
      {R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", Endpoint::kCompletions, "tools"},
  };
  for (const Case& c : cases) {
    ApiError err;
    auto r = parse_generation_request(json::parse(c.body), c.ep, lim, &err);
    EXPECT_FALSE(r.has_value()) << c.body;
    EXPECT_EQ(err.status, 400) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body << ": " << err.message;
    EXPECT_FALSE(err.message.empty());
  }
  ApiError err;
  auto ok = parse_generation_request(
      json::parse(R"({"prompt": [[1, 2], [3]], "max_tokens": 16.0, "stop": ["a", "b"], "logprobs": 2, "n": 2,
                      "seed": -1, "stream": true, "stream_options": {"include_usage": true}})"),
      Endpoint::kCompletions, lim, &err);
  ASSERT_TRUE(ok.has_value()) << err.message;
  EXPECT_TRUE(ok->prompt_is_tokens);
  EXPECT_EQ(ok->token_prompts.size(), 2u);
  EXPECT_EQ(ok->max_tokens, 16);
  EXPECT_EQ(ok->top_logprobs, 2);
  EXPECT_TRUE(ok->include_usage);
  EXPECT_EQ(*ok->seed, ~uint64_t{0});
  auto chat = parse_generation_request(
      json::parse(R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                      {"type": "text", "text": "b"}]}], "max_completion_tokens": 3})"),
      Endpoint::kChat, lim, &err);
  ASSERT_TRUE(chat.has_value()) << err.message;
  EXPECT_EQ(chat->messages[0]["role"], "system");
  EXPECT_EQ(chat->messages[0]["content"], "ab");
  EXPECT_EQ(chat->max_tokens, 3);
  // Tools: definitions kept for the template, tool_choice read, earlier
  // calls' arguments (JSON text) turned into objects for the template.
  auto tools = parse_generation_request(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null,
                      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f",
                      "arguments": "{\"a\": 1}"}}]}, {"role": "tool", "content": "2", "tool_call_id": "c1"}],
                      "tools": [{"type": "function", "function": {"name": "f"}}],
                      "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false})"),
      Endpoint::kChat, lim, &err);
  ASSERT_TRUE(tools.has_value()) << err.message;
  EXPECT_EQ(tools->tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(tools->tool_choice_name, "f");
  EXPECT_FALSE(tools->parallel_tool_calls);
  EXPECT_EQ(tools->tools.size(), 1u);
  EXPECT_EQ(tools->messages[1]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"a": 1})"));
  EXPECT_EQ(tools->messages[2]["tool_call_id"], "c1");
  auto no_tools = parse_generation_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}], "tools": [],
                                                           "tool_choice": "auto"})"),
                                           Endpoint::kChat, lim, &err);
  ASSERT_TRUE(no_tools.has_value()) << err.message;
  EXPECT_EQ(no_tools->tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(parse_json_object("{\"a\": ", &err).has_value());
  EXPECT_FALSE(parse_json_object("[1]", &err).has_value());
  EXPECT_EQ(error_body(err)["error"]["param"], nullptr);
}

TEST(Service, ApiKeyCheck) {
  const std::string good = "Bearer s3cret";
  const std::string bad1 = "Bearer s3creT", bad2 = "Bearer s3cret2", bad3 = "s3cret", empty;
  EXPECT_TRUE(OpenAiService::authorized(&good, "s3cret"));
  EXPECT_FALSE(OpenAiService::authorized(&bad1, "s3cret"));
  EXPECT_FALSE(OpenAiService::authorized(&bad2, "s3cret"));
  EXPECT_FALSE(OpenAiService::authorized(&bad3, "s3cret"));
  EXPECT_FALSE(OpenAiService::authorized(&empty, "s3cret"));
  EXPECT_FALSE(OpenAiService::authorized(nullptr, "s3cret"));
  EXPECT_TRUE(OpenAiService::authorized(nullptr, ""));
}

TEST(Metrics, PrometheusHistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  std::string out;
  h.render("ember:x", "help", &out);
  EXPECT_NE(out.find("ember:x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ember:x_bucket{le=\"1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ember:x_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ember:x_count 3\n"), std::string::npos) << out;
}

// An HttpResponse that keeps everything in memory.
class MemResponse : public HttpResponse {
 public:
  void send(int status, const std::string& ct, std::string body,
            const std::vector<std::pair<std::string, std::string>>&) override {
    std::lock_guard<std::mutex> lk(mu_);
    status_ = status;
    body_ = std::move(body);
    done_ = true;
    cv_.notify_all();
  }
  void start_stream(int status, const std::string&, const std::vector<std::pair<std::string, std::string>>&) override {
    std::lock_guard<std::mutex> lk(mu_);
    status_ = status;
  }
  bool write(std::string data) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return false;
    body_ += data;
    return true;
  }
  void end_stream() override {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    cv_.notify_all();
  }
  bool closed() const override { return closed_; }
  void on_close(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) fn();
    else on_close_ = std::move(fn);
  }
  // The client disconnects.
  void close() {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lk(mu_);
      closed_ = true;
      fn = std::move(on_close_);
    }
    if (fn) fn();
  }
  bool wait(int ms = 60000) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done_; });
  }
  std::string body() {
    std::lock_guard<std::mutex> lk(mu_);
    return body_;
  }
  int status() {
    std::lock_guard<std::mutex> lk(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 0;
  std::string body_;
  bool done_ = false, closed_ = false;
  std::function<void()> on_close_;
};

const char* kModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "default model not installed";
    auto m = Model::load(kModel);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::move(m.value());
    auto t = Tokenizer::from_metadata(model_->file().metadata);
    ASSERT_TRUE(t.is_ok());
    tok_ = std::move(t.value());
    pool_ = std::make_unique<ThreadPool>(1);
    EngineConfig ec;
    ec.kv_cache_bytes = size_t{64} << 20;
    auto e = AsyncEngine::start(*model_, *pool_, ec);
    ASSERT_TRUE(e.is_ok());
    engine_ = std::move(e.value());
    ServiceConfig sc;
    sc.served_model_name = "test-model";
    sc.arch = model_->config().arch;
    sc.api_key = "k";
    service_ = std::make_unique<OpenAiService>(*tok_, *engine_, sc);
  }
  void TearDown() override {
    if (engine_) {
      // Nothing may hold a block once every request has ended.
      for (int i = 0; i < 200 && (engine_->n_active() > 0 || engine_->stats().blocks_used > 0); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      EXPECT_EQ(engine_->n_active(), 0);
      EXPECT_EQ(engine_->stats().blocks_used, 0);
    }
    service_.reset();
    engine_.reset();
  }
  std::shared_ptr<MemResponse> call(const std::string& method, const std::string& path, const std::string& body,
                                    bool auth = true) {
    HttpRequest r;
    r.method = method;
    r.path = r.target = path;
    r.body = body;
    if (auth) r.headers.push_back({"authorization", "Bearer k"});
    auto resp = std::make_shared<MemResponse>();
    service_->handle(r, resp);
    return resp;
  }
  // Concatenated text of an SSE completions stream; checks it ends with [DONE].
  static std::string stream_text(const std::string& sse, json* last_usage) {
    std::string text;
    size_t at = 0;
    bool done = false;
    while ((at = sse.find("data: ", at)) != std::string::npos) {
      const size_t end = sse.find("\n\n", at);
      const std::string payload = sse.substr(at + 6, end - at - 6);
      at = end;
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      json j = json::parse(payload);
      if (!j["usage"].is_null() && last_usage) *last_usage = j["usage"];
      for (const auto& c : j["choices"]) text += c.value("text", "");
    }
    EXPECT_TRUE(done) << sse;
    return text;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<OpenAiService> service_;
};

TEST_F(ServiceTest, StreamEqualsPlainAndStopCutsExactly) {
  const std::string req = R"({"prompt": "The history of the city", "max_tokens": 24, "temperature": 0,
                              "ignore_eos": true)";
  auto plain = call("POST", "/v1/completions", req + "}");
  ASSERT_TRUE(plain->wait());
  ASSERT_EQ(plain->status(), 200) << plain->body();
  json pj = json::parse(plain->body());
  const std::string text = pj["choices"][0]["text"];
  EXPECT_EQ(pj["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(pj["usage"]["completion_tokens"], 24);
  EXPECT_EQ(pj["usage"]["prompt_tokens"], tok_->encode("The history of the city").size());

  auto streamed = call("POST", "/v1/completions",
                       req + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(streamed->wait());
  json usage;
  EXPECT_EQ(stream_text(streamed->body(), &usage), text);
  EXPECT_EQ(usage["completion_tokens"], 24);

  // A stop string from the middle of the greedy text: the output is the text
  // up to it, streamed or not.
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(text.size() / 2, 5);
  const std::string want = text.substr(0, text.find(stop));
  const std::string with_stop = req + ", \"stop\": [\"zzzz\", " + json(stop).dump() + "]";
  auto cut = call("POST", "/v1/completions", with_stop + "}");
  ASSERT_TRUE(cut->wait());
  json cj = json::parse(cut->body());
  EXPECT_EQ(cj["choices"][0]["text"], want);
  EXPECT_EQ(cj["choices"][0]["finish_reason"], "stop");
  auto cut_stream = call("POST", "/v1/completions", with_stop + ", \"stream\": true}");
  ASSERT_TRUE(cut_stream->wait());
  EXPECT_EQ(stream_text(cut_stream->body(), nullptr), want);
  // Every request, also those a stop string ended, has its queue time recorded.
  const std::string metrics = call("GET", "/metrics", "")->body();
  EXPECT_NE(metrics.find("ember:request_queue_time_seconds_count 4\n"), std::string::npos) << metrics;
  // Cost accounting: the engine generated tokens and the server spent CPU
  // time on them; the gauge is their ratio per 1,000 tokens.
  auto value = [&](const std::string& name) {
    const size_t at = metrics.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + name.size() + 2));
  };
  const double generated = value("ember:engine_generated_tokens_total");
  const double cpu = value("ember:serving_cpu_seconds_total");
  EXPECT_GE(generated, 2 * 24);  // the plain and the streamed request ran to 24 tokens each
  EXPECT_GT(cpu, 0);
  EXPECT_GE(value("process_cpu_seconds_total"), cpu);
  EXPECT_NEAR(value("ember:cpu_seconds_per_1k_generation_tokens"), 1000 * cpu / generated, 1e-6 * 1000 * cpu / generated);
}

// echo + logprobs (what evaluation harnesses send): the prompt's tokens with
// their log-probabilities; the last one must equal the log-probability the
// same token gets as an alternative when generated after the shorter prompt.
TEST_F(ServiceTest, EchoLogprobsScorePrompt) {
  const std::vector<int32_t> ids = tok_->encode("The quick brown fox jumps");
  ASSERT_GE(ids.size(), 4u);
  auto echo = call("POST", "/v1/completions",
                   json{{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 5}}.dump());
  ASSERT_TRUE(echo->wait());
  ASSERT_EQ(echo->status(), 200) << echo->body();
  json ej = json::parse(echo->body());
  const json& lp = ej["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(ej["usage"]["completion_tokens"], 0);
  EXPECT_EQ(ej["choices"][0]["text"], tok_->decode(ids));
  std::vector<int32_t> shorter(ids.begin(), ids.end() - 1);
  auto gen = call("POST", "/v1/completions",
                  json{{"prompt", shorter}, {"max_tokens", 1}, {"logprobs", 20}, {"temperature", 0}}.dump());
  ASSERT_TRUE(gen->wait());
  json gj = json::parse(gen->body());
  const json& alts = gj["choices"][0]["logprobs"]["top_logprobs"][0];
  const std::string last = lp["tokens"].back();
  ASSERT_TRUE(alts.contains(last)) << alts.dump() << " lacks " << last;
  EXPECT_NEAR(alts[last].get<double>(), lp["token_logprobs"].back().get<double>(), 1e-4);
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
  // Streaming: the echo chunk carries the prompt's entries.
  auto st = call("POST", "/v1/completions",
                 json{{"prompt", ids}, {"max_tokens", 2}, {"echo", true}, {"logprobs", 1}, {"stream", true}}.dump());
  ASSERT_TRUE(st->wait());
  const std::string body = st->body();
  const size_t first = body.find("data: ");
  json c0 = json::parse(body.substr(first + 6, body.find("\n\n", first) - first - 6));
  EXPECT_EQ(c0["choices"][0]["logprobs"]["tokens"].size(), ids.size());
  EXPECT_EQ(c0["choices"][0]["logprobs"]["token_logprobs"].back(), lp["token_logprobs"].back());
}

TEST_F(ServiceTest, ClientGoneAbortsAndFreesBlocks) {
  auto resp = call("POST", "/v1/completions",
                   R"({"prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": true, "stream": true})");
  // Generous deadlines (the loops exit as soon as the condition holds): on a
  // loaded 2-core machine the first token can take seconds.
  for (int i = 0; i < 6000 && resp->body().find("\"text\"") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(resp->body().find("\"text\""), std::string::npos);
  resp->close();
  for (int i = 0; i < 6000 && (engine_->n_active() > 0 || service_->n_jobs() > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine_->n_active(), 0);
  EXPECT_EQ(service_->n_jobs(), 0);
  const std::string metrics = call("GET", "/metrics", "")->body();
  EXPECT_NE(metrics.find("ember:request_success_total{finished_reason=\"abort\",model_name=\"test-model\"} 1"),
            std::string::npos)
      << metrics;
}

// CORS: only configured origins get the headers; preflight answers 204
// without a key. MemResponse ignores headers, so check through a recorder.
TEST(ServiceCors, AllowedOriginsOnly) {
  struct Recorder : HttpResponse {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    void send(int s, const std::string&, std::string, const std::vector<std::pair<std::string, std::string>>& h) override {
      status = s;
      headers = h;
    }
    void start_stream(int, const std::string&, const std::vector<std::pair<std::string, std::string>>&) override {}
    bool write(std::string) override { return true; }
    void end_stream() override {}
    bool closed() const override { return false; }
    void on_close(std::function<void()>) override {}
    bool has(const std::string& k) const {
      for (const auto& [a, b] : headers)
        if (a == k) return true;
      return false;
    }
  };
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "default model not installed";
  auto m = Model::load(kModel);
  ASSERT_TRUE(m.is_ok());
  auto tok = Tokenizer::from_metadata((*m)->file().metadata);
  ASSERT_TRUE(tok.is_ok());
  ThreadPool pool(1);
  EngineConfig ec;
  ec.kv_cache_bytes = size_t{16} << 20;
  auto e = AsyncEngine::start(**m, pool, ec);
  ASSERT_TRUE(e.is_ok());
  ServiceConfig sc;
  sc.api_key = "k";
  sc.allowed_origins = {"http://app.example"};
  OpenAiService svc(**tok, **e, sc);
  auto call = [&](const std::string& method, const std::string& origin) {
    HttpRequest r;
    r.method = method;
    r.path = r.target = "/v1/models";
    r.headers.push_back({"origin", origin});
    auto rec = std::make_shared<Recorder>();
    svc.handle(r, rec);
    return rec;
  };
  auto pre = call("OPTIONS", "http://app.example");
  EXPECT_EQ(pre->status, 204);
  EXPECT_TRUE(pre->has("Access-Control-Allow-Methods"));
  auto other = call("OPTIONS", "http://evil.example");
  EXPECT_EQ(other->status, 401);  // not a preflight we answer: the key check applies
  EXPECT_FALSE(other->has("Access-Control-Allow-Origin"));
  auto get = call("GET", "http://app.example");
  EXPECT_EQ(get->status, 401);  // still needs the key, but the browser may read the error
  EXPECT_TRUE(get->has("Access-Control-Allow-Origin"));
}

TEST_F(ServiceTest, RoutesAuthAndErrors) {
  EXPECT_EQ(call("GET", "/v1/models", "", false)->status(), 401);
  auto models = call("GET", "/v1/models", "");
  EXPECT_EQ(json::parse(models->body())["data"][0]["id"], "test-model");
  EXPECT_EQ(call("GET", "/v1/completions", "")->status(), 405);
  EXPECT_EQ(call("GET", "/nope", "")->status(), 404);
  auto wrong_model = call("POST", "/v1/completions", R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(wrong_model->status(), 404);
  EXPECT_EQ(json::parse(wrong_model->body())["error"]["code"], "model_not_found");
  EXPECT_EQ(call("GET", "/health", "", false)->status(), 200);
  auto bad = call("POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 99})");
  EXPECT_EQ(bad->status(), 400);
  EXPECT_EQ(json::parse(bad->body())["error"]["param"], "n");
  std::string long_prompt;
  for (int i = 0; i < 5000; ++i) long_prompt += "word ";
  auto too_long = call("POST", "/v1/completions", json{{"prompt", long_prompt}}.dump());
  EXPECT_EQ(too_long->status(), 400);
  EXPECT_EQ(json::parse(too_long->body())["error"]["code"], "context_length_exceeded");
  auto tk = call("POST", "/tokenize", R"({"prompt": "Hello world"})");
  EXPECT_EQ(json::parse(tk->body())["tokens"], json(tok_->encode("Hello world")));
  auto dt = call("POST", "/detokenize", json{{"tokens", tok_->encode("Hello world", EncodeOptions{false})}}.dump());
  EXPECT_EQ(json::parse(dt->body())["prompt"], "Hello world");
}

}  // namespace
}  // namespace ember
