// AsyncEngine: the thread-safe front of Engine for the server and
// `ember bench`. Callers on any thread submit and abort requests; one engine
// thread owns the Engine, applies queued commands between steps, runs
// step() while there is work and sleeps otherwise, and delivers each
// request's tokens and its end through the request's callback (called on the
// engine thread: it must be quick and must not call submit(), which waits
// for the engine thread; abort() only queues and is fine). The ThreadPool
// is driven from the engine thread and must not be used elsewhere meanwhile.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/engine.h"

namespace ember {

struct RequestUpdate {
  std::string id;
  int index = 0;                 // sample index (a request with n samples has n streams)
  std::vector<int32_t> tokens;   // new tokens since the last update
  std::vector<float> logprobs;   // matching log-probabilities (if requested)
  std::vector<TopLogprobs> top_logprobs;  // matching top alternatives (if requested)
  std::vector<uint8_t> forced;   // matching: 1 where a forced-token jump appended the token
  double queue_seconds = -1;     // set with the sample's first token (see TokenEvent)
  // Prompt log-probabilities (RequestParams::prompt_logprobs), sample 0 only:
  // prompt tokens [prompt_lp_first, prompt_lp_first + prompt_logprobs.size()).
  int64_t prompt_lp_first = 1;
  std::vector<float> prompt_logprobs;
  std::vector<TopLogprobs> prompt_top_logprobs;
  bool finished = false;          // this sample ended
  FinishedRequest result;         // valid when finished
};

class AsyncEngine {
 public:
  using Callback = std::function<void(const RequestUpdate&)>;

  static Result<std::unique_ptr<AsyncEngine>> start(const Model& model, ThreadPool& pool, const EngineConfig& cfg);
  // Over any model runner (e.g. FakeModelRunner in tests). With `target`
  // and `pool`: a runner over (a shard of) target, whose draft model runs
  // here (Engine::create(runner, cfg, target, pool)).
  static Result<std::unique_ptr<AsyncEngine>> start(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg,
                                                    const Model* target = nullptr, ThreadPool* pool = nullptr);
  // Stops the engine thread; unfinished requests end with kAbort.
  ~AsyncEngine();

  // Queues a request; returns once the engine accepted or rejected it (at
  // most one step later). On success `cb` will see every token and the end.
  Status submit(const std::string& id, RequestParams params, Callback cb);
  // Queues several requests at once (all accepted within the same engine
  // iteration); returns one Status per request, in order.
  struct Submission {
    std::string id;
    RequestParams params;
    Callback cb;
  };
  std::vector<Status> submit_many(std::vector<Submission> subs);
  // Same without waiting: `done` receives the statuses on the engine thread
  // (quick, like callbacks; it may call abort()). Used by the server so that
  // no HTTP thread ever waits for an engine step.
  void submit_async(std::vector<Submission> subs, std::function<void(std::vector<Status>)> done);
  // Aborts a request if it is still running (its callback gets kAbort).
  void abort(const std::string& id);
  // Ends one sample of a request early as kStop (queued like abort()).
  void stop_sample(const std::string& id, int index);
  // Longest sequence (prompt + output) the engine can hold.
  int64_t max_seq_len() const { return max_seq_len_; }
  // Sequences of max_seq_len() tokens the KV pool holds at once
  // (Engine::kv_sequences_of).
  int64_t kv_sequences_of_max_len() const { return kv_seqs_of_max_len_; }
  // Snapshot of the engine's counters after its latest step.
  EngineStats stats() const;
  // Requests accepted and not yet finished.
  int n_active() const;
  // Stops accepting work, aborts what is left, joins the engine thread.
  void shutdown();

 private:
  struct Command {
    enum Kind { kAdd, kAbort, kStopSample } kind;
    std::string id;
    int index = 0;
    RequestParams params;
    Callback cb;
    std::promise<Status> accepted;
    std::function<void(Status)> on_accepted;  // instead of the promise when set
  };
  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  void loop();
  void deliver(const StepOutput& out);

  std::unique_ptr<Engine> engine_;
  int64_t max_seq_len_ = 0;
  int64_t kv_seqs_of_max_len_ = 0;
  struct Active {
    Callback cb;
    int remaining;  // samples not yet finished
  };
  std::unordered_map<std::string, Active> callbacks_;  // engine thread only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Command>> commands_;
  bool stop_ = false;
  EngineStats stats_;
  int n_active_ = 0;
  std::thread thread_;
};

}  // namespace ember
