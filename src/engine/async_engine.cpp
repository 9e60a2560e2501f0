// Thread-safe engine front: command queue + engine thread; see async_engine.h.
#include "engine/async_engine.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace ember {

Result<std::unique_ptr<AsyncEngine>> AsyncEngine::start(const Model& model, ThreadPool& pool,
                                                        const EngineConfig& cfg) {
  auto e = Engine::create(model, pool, cfg);
  if (!e) return e.status();
  auto a = std::unique_ptr<AsyncEngine>(new AsyncEngine(std::move(e.value())));
  a->thread_ = std::thread([p = a.get()] { p->loop(); });
  return a;
}

Result<std::unique_ptr<AsyncEngine>> AsyncEngine::start(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg,
                                                        const Model* target, ThreadPool* pool) {
  auto e = target && pool ? Engine::create(std::move(runner), cfg, *target, *pool) : Engine::create(std::move(runner), cfg);
  if (!e) return e.status();
  auto a = std::unique_ptr<AsyncEngine>(new AsyncEngine(std::move(e.value())));
  a->thread_ = std::thread([p = a.get()] { p->loop(); });
  return a;
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  stats_ = engine_->stats();
  max_seq_len_ = engine_->max_seq_len();
  kv_seqs_of_max_len_ = engine_->kv_sequences_of(max_seq_len_);
}

AsyncEngine::~AsyncEngine() { shutdown(); }

void AsyncEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status AsyncEngine::submit(const std::string& id, RequestParams params, Callback cb) {
  auto cmd = std::make_unique<Command>();
  cmd->kind = Command::kAdd;
  cmd->id = id;
  cmd->params = std::move(params);
  cmd->cb = std::move(cb);
  std::future<Status> fut = cmd->accepted.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return Status::error("engine is shut down");
    commands_.push_back(std::move(cmd));
  }
  cv_.notify_all();
  return fut.get();
}

std::vector<Status> AsyncEngine::submit_many(std::vector<Submission> subs) {
  std::vector<std::future<Status>> futs;
  std::vector<Status> out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return std::vector<Status>(subs.size(), Status::error("engine is shut down"));
    for (Submission& sub : subs) {
      auto cmd = std::make_unique<Command>();
      cmd->kind = Command::kAdd;
      cmd->id = std::move(sub.id);
      cmd->params = std::move(sub.params);
      cmd->cb = std::move(sub.cb);
      futs.push_back(cmd->accepted.get_future());
      commands_.push_back(std::move(cmd));
    }
  }
  cv_.notify_all();
  for (auto& f : futs) out.push_back(f.get());
  return out;
}

void AsyncEngine::submit_async(std::vector<Submission> subs, std::function<void(std::vector<Status>)> done) {
  struct Gather {
    std::vector<Status> st;
    size_t left;
    std::function<void(std::vector<Status>)> done;
  };
  auto g = std::make_shared<Gather>();
  g->st.resize(subs.size());
  g->left = subs.size();
  g->done = std::move(done);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stop_) {
      for (size_t i = 0; i < subs.size(); ++i) {
        auto cmd = std::make_unique<Command>();
        cmd->kind = Command::kAdd;
        cmd->id = std::move(subs[i].id);
        cmd->params = std::move(subs[i].params);
        cmd->cb = std::move(subs[i].cb);
        cmd->on_accepted = [g, i](Status st) {
          g->st[i] = std::move(st);
          if (--g->left == 0) g->done(std::move(g->st));
        };
        commands_.push_back(std::move(cmd));
      }
      subs.clear();
    }
  }
  if (!subs.empty()) {  // shut down: reject here
    g->done(std::vector<Status>(subs.size(), Status::error("engine is shut down")));
    return;
  }
  if (g->left == 0) g->done({});
  cv_.notify_all();
}

void AsyncEngine::abort(const std::string& id) {
  auto cmd = std::make_unique<Command>();
  cmd->kind = Command::kAbort;
  cmd->id = id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    commands_.push_back(std::move(cmd));
  }
  cv_.notify_all();
}

void AsyncEngine::stop_sample(const std::string& id, int index) {
  auto cmd = std::make_unique<Command>();
  cmd->kind = Command::kStopSample;
  cmd->id = id;
  cmd->index = index;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    commands_.push_back(std::move(cmd));
  }
  cv_.notify_all();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

int AsyncEngine::n_active() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_active_;
}

void AsyncEngine::deliver(const StepOutput& out) {
  // Group this step's tokens per request, preserving order.
  std::map<std::pair<std::string, int>, RequestUpdate> updates;
  for (const TokenEvent& t : out.tokens) {
    RequestUpdate& u = updates[{t.id, t.index}];
    u.id = t.id;
    u.index = t.index;
    u.tokens.push_back(t.token);
    u.logprobs.push_back(t.logprob);
    u.top_logprobs.push_back(t.top);
    u.forced.push_back(t.forced ? 1 : 0);
    if (t.queue_seconds >= 0) u.queue_seconds = t.queue_seconds;
  }
  for (const PromptLogprobEvent& e : out.prompt_logprobs) {
    RequestUpdate& u = updates[{e.id, 0}];
    u.id = e.id;
    u.index = 0;
    if (u.prompt_logprobs.empty()) u.prompt_lp_first = e.first;
    u.prompt_logprobs.insert(u.prompt_logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    u.prompt_top_logprobs.insert(u.prompt_top_logprobs.end(), e.top.begin(), e.top.end());
  }
  for (const FinishedRequest& f : out.finished) {
    RequestUpdate& u = updates[{f.id, f.index}];
    u.id = f.id;
    u.index = f.index;
    u.finished = true;
    u.result = f;
  }
  // Counters first, so a caller woken by a final callback sees them.
  int n_done = 0;
  for (auto& [key, u] : updates) {
    auto it = callbacks_.find(u.id);
    if (it != callbacks_.end() && u.finished && it->second.remaining == 1) ++n_done;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    n_active_ -= n_done;
    stats_ = engine_->stats();
  }
  for (auto& [key, u] : updates) {
    auto it = callbacks_.find(u.id);
    if (it == callbacks_.end()) continue;
    bool any_lp = false;
    for (float lp : u.logprobs) any_lp |= lp == lp;
    if (!any_lp) u.logprobs.clear();
    bool any_top = false;
    for (const auto& t : u.top_logprobs) any_top |= !t.empty();
    if (!any_top) u.top_logprobs.clear();
    Callback cb = it->second.cb;  // the entry may be erased below
    if (u.finished && --it->second.remaining == 0) callbacks_.erase(it);
    cb(u);
  }
}

void AsyncEngine::loop() {
  // > 0 after a step that could run nothing because a request-level batch is
  // still forming (dynamic batching): sleep that long unless a command comes.
  double idle_wait_s = 0;
  for (;;) {
    std::deque<std::unique_ptr<Command>> cmds;
    bool stop;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (idle_wait_s > 0)
        cv_.wait_for(lk, std::chrono::duration<double>(std::min(idle_wait_s, 1.0)),
                     [&] { return stop_ || !commands_.empty(); });
      else
        cv_.wait(lk, [&] { return stop_ || !commands_.empty() || engine_->has_unfinished(); });
      idle_wait_s = 0;
      cmds.swap(commands_);
      stop = stop_;
    }
    for (auto& c : cmds) {
      if (c->kind == Command::kAdd) {
        if (stop) {
          if (c->on_accepted) c->on_accepted(Status::error("engine is shut down"));
          else c->accepted.set_value(Status::error("engine is shut down"));
          continue;
        }
        const int n = c->params.n;
        Status st = callbacks_.count(c->id) ? Status::errorf("request id '{}' is already in use", c->id)
                                            : engine_->add_request(c->id, std::move(c->params));
        if (st.is_ok()) {
          callbacks_.emplace(c->id, Active{std::move(c->cb), n});
          std::lock_guard<std::mutex> lk(mu_);
          ++n_active_;
        }
        if (c->on_accepted) c->on_accepted(std::move(st));
        else c->accepted.set_value(std::move(st));
      } else if (c->kind == Command::kAbort) {
        engine_->abort(c->id);
      } else {
        engine_->stop_sample(c->id, c->index);
      }
    }
    if (stop) {
      std::vector<std::string> ids;
      for (const auto& [id, cb] : callbacks_) ids.push_back(id);
      for (const auto& id : ids) engine_->abort(id);
      auto out = engine_->step();  // reports the aborts
      if (out.is_ok()) deliver(out.value());
      return;
    }
    if (!engine_->has_unfinished()) continue;
    auto out = engine_->step();
    if (out.is_ok()) {
      const bool idle = out->n_seqs == 0 && out->tokens.empty() && out->finished.empty();
      deliver(out.value());
      if (idle && engine_->has_work()) idle_wait_s = engine_->seconds_until_admission();
      continue;
    }
    // The forward pass failed: end every request with kError.
    std::vector<std::string> ids;
    for (const auto& [id, cb] : callbacks_) ids.push_back(id);
    for (const auto& id : ids) engine_->abort(id);
    auto drained = engine_->step();
    if (drained.is_ok()) {
      for (FinishedRequest& f : drained->finished) f.reason = FinishReason::kError;
      deliver(drained.value());
    }
  }
}

}  // namespace ember
