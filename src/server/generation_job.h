// One /v1/completions or /v1/chat/completions request in flight: owns its
// choices (prompt x sample), turns the engine's token updates into text
// (streaming detokenizer, stop strings held back until they cannot match,
// log-probabilities), and writes either SSE chunks as tokens arrive or one
// JSON response at the end, in OpenAI's shapes. Token updates arrive on the
// engine thread; writing only queues bytes on the HTTP connection, so the
// engine never waits for a client.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/choice_output.h"
#include "tokenizer/tokenizer.h"

namespace ember {

struct JobPrompt {
  std::vector<int32_t> tokens;
  std::string echo_text;  // completions with echo: the prompt's text
  std::string rendered;   // chat: the rendered prompt (its end says where the model starts)
  // echo + logprobs: log p of prompt tokens 1.. (filled from the engine)
  std::vector<float> lp;
  std::vector<TopLogprobs> top;
  bool lp_complete() const { return lp.size() + 1 >= tokens.size(); }
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // `req` is validated; prompts are tokenized and fit the context.
  GenerationJob(const GenerationRequest& req, std::vector<JobPrompt> prompts, const Tokenizer& tok,
                AsyncEngine& engine, ServerMetrics& metrics, std::string id, std::string model_name,
                std::shared_ptr<HttpResponse> resp, double t_arrival);

  // Submits every prompt to the engine (parameters per prompt in `params`)
  // and, for streaming, starts the SSE response. Runs on a handler thread.
  void start(std::vector<RequestParams> params);
  // Engine thread: the prompts were accepted or rejected.
  void on_accepted(const std::vector<Status>& st);
  // Engine-thread callback for one engine request (prompt index `p`).
  void on_update(int p, const RequestUpdate& u);
  // The client went away: aborts every engine request of this job.
  void on_client_closed();
  // Called once when the job has ended (response complete or client gone).
  void set_on_done(std::function<void()> fn) { on_done_ = std::move(fn); }
  // One line about the finished job (for the request log), set before on_done.
  const std::string& summary() const { return summary_; }

 private:
  struct Choice {
    int prompt = 0;
    int sample = 0;
    std::unique_ptr<ChoiceOutput> out;  // tokens -> reasoning, content, tool calls
    std::string text;           // emitted text (non-streaming: the whole answer)
    std::string reasoning;      // the thinking (non-streaming)
    int64_t n_tokens = 0;
    int64_t n_forced = 0;       // of which appended by forced-token jumps
    size_t text_len = 0;        // bytes produced by the decoder so far (for text_offset)
    nlohmann::json lp;          // accumulated logprobs (non-streaming)
    std::string finish_reason;  // set when done
    bool done = false;
    bool sent_role = false;
    bool echo_pending = false;  // streaming echo waits for the prompt's log-probabilities
    std::vector<std::pair<std::string, ToolCall>> calls;  // (id, call) parsed so far
  };
  // Folds output events into the choice (reasoning, content, calls) and,
  // streaming, sends them as deltas in order; the last chunk carries `lp`
  // and, when the choice is done, its finish_reason.
  void take_events(Choice& c, int idx, std::vector<OutputEvent>& ev, nlohmann::json lp, bool send_empty);
  // The prompt's tokens as completions logprobs ({tokens, token_logprobs, ...}).
  nlohmann::json prompt_logprobs_json(int p) const;
  std::string engine_id(int p) const;
  Choice& choice(int p, int sample) { return choices_[static_cast<size_t>(p) * n_ + sample]; }
  // Log-probability entries of `tokens` in the endpoint's shape (appended to *out).
  void append_logprobs(Choice& c, const RequestUpdate& u, size_t i, const std::string& piece, nlohmann::json* chunk_lp);
  nlohmann::json chunk_base() const;
  nlohmann::json usage() const;
  void send_chunk(nlohmann::json chunk);
  void emit_stream(Choice& c, int idx, nlohmann::json delta, nlohmann::json lp, bool finished);
  bool reasoning_on() const { return req_.reasoning_syntax.format != ReasoningFormat::kNone; }
  void finish_choice(Choice& c, const std::string& reason);
  void complete(const char* error = nullptr);
  nlohmann::json final_body() const;

  GenerationRequest req_;
  std::vector<JobPrompt> prompts_;
  const Tokenizer& tok_;
  AsyncEngine& engine_;
  ServerMetrics& metrics_;
  std::string id_;
  std::string model_name_;
  std::shared_ptr<HttpResponse> resp_;
  double t_arrival_;
  int64_t created_;
  int n_ = 1;
  std::mutex mu_;
  std::vector<Choice> choices_;
  std::vector<double> queue_seconds_;  // per prompt, from the engine
  int n_done_ = 0;
  double t_first_token_ = -1;
  bool completed_ = false;
  bool failed_ = false;
  std::atomic<bool> client_gone_{false};
  std::function<void()> on_done_;
  std::string summary_;
};

double steady_now();

}  // namespace ember
