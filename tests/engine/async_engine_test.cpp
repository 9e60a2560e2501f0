// AsyncEngine: concurrent submitters get the same outputs as the
// synchronous engine; abort and shutdown end requests with kAbort.
#include "engine/async_engine.h"

#include "core/cpu_time.h"
#include "engine/fake_model_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <random>
#include <thread>

namespace ember {
namespace {

const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, FinishedRequest> done;
  AsyncEngine::Callback cb() {
    return [this](const RequestUpdate& u) {
      std::lock_guard<std::mutex> lk(mu);
      auto& t = tokens[u.id];
      t.insert(t.end(), u.tokens.begin(), u.tokens.end());
      if (u.finished) done[u.id] = u.result;
      cv.notify_all();
    };
  }
  void wait_for(size_t n) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done.size() >= n; });
  }
};

RequestParams make_request(std::mt19937& rng, int vocab, int max_tokens) {
  RequestParams p;
  const int len = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < len; ++i) p.prompt.push_back(static_cast<int32_t>(rng() % vocab));
  p.sampling.temperature = 0.9f;
  p.sampling.seed = rng();
  p.max_tokens = max_tokens;
  p.logprobs = true;
  return p;
}

TEST(AsyncEngine, ConcurrentSubmittersMatchSyncEngine) {
  auto m = Model::load(kTinyQwen);
  ASSERT_TRUE(m.is_ok());
  const Model& model = *m.value();
  ThreadPool pool(2);  // driven from the engine thread
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 32;
  auto a = AsyncEngine::start(model, pool, cfg);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  AsyncEngine& eng = *a.value();
  std::mt19937 rng(5);
  std::vector<RequestParams> reqs;
  for (int i = 0; i < 16; ++i) reqs.push_back(make_request(rng, model.config().n_vocab, 12));
  Collector col;
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t)
    submitters.emplace_back([&, t] {
      for (int i = t; i < 16; i += 4) EXPECT_TRUE(eng.submit("q" + std::to_string(i), reqs[i], col.cb()).is_ok());
    });
  for (auto& th : submitters) th.join();
  EXPECT_FALSE(eng.submit("bad", RequestParams{}, col.cb()).is_ok());  // empty prompt: rejected synchronously
  col.wait_for(16);
  EXPECT_EQ(eng.n_active(), 0);
  EngineStats st = eng.stats();
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_EQ(st.n_generated_tokens, 16 * 12);

  auto sync = Engine::create(model, pool, cfg);
  ASSERT_TRUE(sync.is_ok());
  for (int i = 0; i < 16; ++i) {
    const std::string id = "q" + std::to_string(i);
    ASSERT_TRUE(sync.value()->add_request(id, reqs[i]).is_ok());
    std::vector<int32_t> want;
    std::vector<float> want_lp;
    while (sync.value()->has_unfinished()) {
      auto out = sync.value()->step();
      ASSERT_TRUE(out.is_ok());
      for (auto& f : out->finished) {
        want = f.output;
        want_lp = f.logprobs;
      }
    }
    EXPECT_EQ(col.done[id].output, want) << id;
    EXPECT_EQ(col.done[id].logprobs, want_lp) << id;
    EXPECT_EQ(col.tokens[id], want) << id;
  }
}

TEST(AsyncEngine, AbortAndShutdown) {
  auto m = Model::load(kTinyQwen);
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  auto a = AsyncEngine::start(*m.value(), pool, EngineConfig{});
  ASSERT_TRUE(a.is_ok());
  std::mt19937 rng(6);
  Collector col;
  // r1's first token holds the engine thread until the abort is queued, so
  // the abort deterministically lands before r1 can finish.
  std::promise<void> abort_queued;
  std::shared_future<void> gate = abort_queued.get_future().share();
  AsyncEngine::Callback inner = col.cb();
  auto gated = [inner, gate](const RequestUpdate& u) {
    gate.wait();
    inner(u);
  };
  // r1 last: submit() waits for the engine thread, which the gate may hold.
  for (int i : {0, 2, 1}) {
    RequestParams p = make_request(rng, 64, 60);
    ASSERT_TRUE(a.value()->submit("r" + std::to_string(i), p, i == 1 ? gated : col.cb()).is_ok());
  }
  a.value()->abort("r1");
  abort_queued.set_value();
  col.wait_for(3);  // r0, r2 finish (length); r1 was aborted
  EXPECT_LT(col.tokens["r1"].size(), 60u);
  a.value()->shutdown();
  ASSERT_EQ(col.done.size(), 3u);
  EXPECT_EQ(col.done["r1"].reason, FinishReason::kAbort);
  EXPECT_EQ(col.done["r0"].reason, FinishReason::kLength);
  EXPECT_EQ(col.done["r2"].reason, FinishReason::kLength);

  // Shutdown with requests in flight ends them with kAbort.
  auto b = AsyncEngine::start(*m.value(), pool, EngineConfig{});
  ASSERT_TRUE(b.is_ok());
  Collector col2;
  std::promise<void> release;
  std::shared_future<void> hold = release.get_future().share();
  AsyncEngine::Callback inner2 = col2.cb();
  auto held = [inner2, hold](const RequestUpdate& u) {
    hold.wait();
    inner2(u);
  };
  ASSERT_TRUE(b.value()->submit("s0", make_request(rng, 64, 60), held).is_ok());
  std::thread stopper([&] { b.value()->shutdown(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let shutdown set the stop flag
  release.set_value();
  stopper.join();
  ASSERT_EQ(col2.done.size(), 1u);
  EXPECT_EQ(col2.done["s0"].reason, FinishReason::kAbort);
  EXPECT_LT(col2.tokens["s0"].size(), 60u);
  EXPECT_EQ(b.value()->n_active(), 0);
  EXPECT_EQ(a.value()->stats().blocks_used, 0);
  EXPECT_FALSE(a.value()->submit("late", make_request(rng, 64, 2), col.cb()).is_ok());
}


// submit_async: statuses arrive once, in order, on the engine thread; the
// accepted requests run to completion, the rejected one never starts.
TEST(AsyncEngine, SubmitAsyncReportsEachStatus) {
  auto m = Model::load(kTinyQwen);
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  auto e = AsyncEngine::start(**m, pool, {});
  ASSERT_TRUE(e.is_ok());
  std::mt19937 rng(2);
  Collector c;
  std::vector<AsyncEngine::Submission> subs;
  subs.push_back({"a", make_request(rng, (*m)->config().n_vocab, 4), c.cb()});
  subs.push_back({"bad", RequestParams{}, c.cb()});  // empty prompt
  subs.push_back({"b", make_request(rng, (*m)->config().n_vocab, 4), c.cb()});
  std::promise<std::vector<Status>> got;
  std::atomic<int> calls{0};
  (*e)->submit_async(std::move(subs), [&](std::vector<Status> st) {
    ++calls;
    got.set_value(std::move(st));
  });
  auto st = got.get_future().get();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_TRUE(st[0].is_ok());
  EXPECT_FALSE(st[1].is_ok());
  EXPECT_TRUE(st[2].is_ok());
  c.wait_for(2);
  EXPECT_EQ(c.done.count("bad"), 0u);
  EXPECT_EQ(calls.load(), 1);
  (*e)->shutdown();
  bool rejected = false;
  (*e)->submit_async({{"late", make_request(rng, (*m)->config().n_vocab, 4), c.cb()}},
                     [&](std::vector<Status> s) { rejected = s.size() == 1 && !s[0].is_ok(); });
  EXPECT_TRUE(rejected);
}

// Dynamic batching through the engine thread: a lone request waits for the
// window (the thread sleeps meanwhile instead of spinning), a full batch
// starts at once.
TEST(AsyncEngine, DynamicBatchWindowSleepsThenStarts) {
  FakeModelConfig mc;
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 64;
  cfg.max_num_seqs = 2;
  cfg.batching = BatchingPolicy::kDynamic;
  cfg.batch_window_s = 0.4;
  auto e = AsyncEngine::start(std::make_unique<FakeModelRunner>(mc), cfg);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  std::mt19937 rng(5);
  Collector col;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*e)->submit("alone", make_request(rng, mc.n_vocab, 3), col.cb()).is_ok());
  col.wait_for(1);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.4 - 0.01);
  EXPECT_LT(process_cpu_seconds() - cpu0, 0.05);  // asleep, not polling, through the window
  // Two requests fill the batch: no window.
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<AsyncEngine::Submission> two;
  for (const char* id : {"a", "b"}) two.push_back({id, make_request(rng, mc.n_vocab, 3), col.cb()});
  for (const Status& st : (*e)->submit_many(std::move(two))) EXPECT_TRUE(st.is_ok()) << st.message();
  col.wait_for(3);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 0.35);
}

}  // namespace
}  // namespace ember
