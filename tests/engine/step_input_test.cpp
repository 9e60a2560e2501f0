// The step input as plain data (engine/step_input.h): its bytes round-trip
// and a damaged message is an error; the executing side's tables follow the
// edits exactly; an engine whose steps travel as bytes (encode, decode,
// CpuModelRunner::execute_step: what a remote rank runs) gives the
// in-process engine's tokens and log-probabilities bit for bit; the engine's
// pipelining (a runner with two steps in flight) gives the same outputs too,
// with aborts of requests in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "engine/cpu_model_runner.h"
#include "engine/engine.h"
#include "engine/step_input.h"
#include "model/model.h"

namespace ember {
namespace {

const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";
const char* kTinyGemma = EMBER_SOURCE_DIR "/tests/data/model/hf_gemma3";

StepInput sample_input() {
  StepInput in;
  in.step = 7;
  in.n_groups = 2;
  in.kv_ops = {{KvOp::Kind::kCopy, 3, 4, 5}, {KvOp::Kind::kSwapOut, 6, 0, 16}, {KvOp::Kind::kSwapIn, 0, 9, 0}};
  in.dropped = {11, 12};
  in.edits = {{5, 0, 3, 0, 2}, {5, 1, 3, 4, 1}};
  in.edit_entries = {0, 7, 2, 8, 1, -1};
  in.idle = {{9, 40}};
  in.slices = {{5, 32, 3, 0, true, false}, {6, 0, 4, 1, true, true}};
  in.tokens = {1, 2, 3, 4, 5, 6, 7};
  in.pre_hidden = {0.5f, -1.25f};
  in.n_logit_rows = 5;
  in.n_tokens = 6;
  return in;
}

TEST(StepInput, BytesRoundTripAndDamageIsAnError) {
  const StepInput in = sample_input();
  std::vector<uint8_t> bytes;
  encode_step_input(in, &bytes);
  StepInput out;
  ASSERT_TRUE(decode_step_input(bytes.data(), bytes.size(), &out).is_ok());
  EXPECT_EQ(out.step, in.step);
  EXPECT_EQ(out.n_groups, in.n_groups);
  ASSERT_EQ(out.kv_ops.size(), in.kv_ops.size());
  for (size_t i = 0; i < in.kv_ops.size(); ++i) {
    EXPECT_EQ(out.kv_ops[i].kind, in.kv_ops[i].kind);
    EXPECT_EQ(out.kv_ops[i].src, in.kv_ops[i].src);
    EXPECT_EQ(out.kv_ops[i].dst, in.kv_ops[i].dst);
    EXPECT_EQ(out.kv_ops[i].n_rows, in.kv_ops[i].n_rows);
  }
  EXPECT_EQ(out.dropped, in.dropped);
  EXPECT_EQ(out.edit_entries, in.edit_entries);
  ASSERT_EQ(out.slices.size(), 2u);
  EXPECT_EQ(out.slices[1].n_pre, 1);
  EXPECT_TRUE(out.slices[1].all_logits);
  EXPECT_EQ(out.tokens, in.tokens);
  EXPECT_EQ(out.pre_hidden, in.pre_hidden);
  std::vector<uint8_t> again;
  encode_step_input(out, &again);
  EXPECT_EQ(again, bytes);
  // Every truncation fails; flipped bytes never crash (most fail).
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(decode_step_input(bytes.data(), n, &out).is_ok()) << n;
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b = bytes;
    b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    (void)decode_step_input(b.data(), b.size(), &out);
  }
}

// Random block tables over many steps (growth, released pages, rollbacks,
// sequences that come and go): the executing side's tables always equal
// the engine's, and sequences that hold no pages are dropped.
TEST(StepInput, TablesFollowTheEdits) {
  std::mt19937 rng(11);
  std::map<uint64_t, std::unique_ptr<Request>> reqs;
  std::map<uint64_t, BlockTables> truth;
  StepInputBuilder builder(4);
  SeqTables tables;
  uint64_t next = 1;
  for (int step = 0; step < 300; ++step) {
    if (truth.size() < 6 && rng() % 3 == 0) {
      auto r = std::make_unique<Request>();
      r->seq_id = next++;
      r->tokens = {1, 2, 3};
      truth[r->seq_id] = BlockTables(2);
      reqs[r->seq_id] = std::move(r);
    }
    for (auto it = truth.begin(); it != truth.end();) {
      BlockTables& t = it->second;
      const int op = static_cast<int>(rng() % 10);
      if (op == 0) {  // finished
        reqs.erase(it->first);
        it = truth.erase(it);
        continue;
      }
      for (auto& g : t) {
        if (op < 5) g.push_back(static_cast<int32_t>(rng() % 100));
        if (op == 5 && !g.empty()) g[rng() % g.size()] = -1;
        if (op == 6 && !g.empty()) g.pop_back();
        if (op == 7 && !g.empty()) g[rng() % g.size()] = static_cast<int32_t>(rng() % 100);
      }
      ++it;
    }
    SchedulerOutput so;
    for (auto& [seq, t] : truth) {
      if (rng() % 2) {
        so.idle.push_back({&t, 0, seq});
      } else {
        ScheduledRequest sr;
        sr.req = reqs[seq].get();
        sr.n_tokens = 1;
        sr.tables = &t;
        so.scheduled.push_back(sr);
      }
    }
    StepInput in;
    builder.build(so, &in);
    std::vector<uint8_t> bytes;
    encode_step_input(in, &bytes);
    StepInput got;
    ASSERT_TRUE(decode_step_input(bytes.data(), bytes.size(), &got).is_ok());
    ASSERT_TRUE(tables.apply(got, 100).is_ok());
    ASSERT_EQ(tables.size(), truth.size()) << "step " << step;
    for (const auto& [seq, t] : truth) {
      const BlockTables* mine = tables.find(seq);
      ASSERT_NE(mine, nullptr);
      EXPECT_EQ(*mine, t) << "step " << step << " seq " << seq;
    }
  }
  // A step out of order, an entry out of range: errors.
  StepInput bad;
  bad.step = 1;
  EXPECT_FALSE(tables.apply(bad, 100).is_ok());
  SeqTables fresh;
  StepInput oob;
  oob.step = 1;
  oob.n_groups = 1;
  oob.edits = {{1, 0, 1, 0, 1}};
  oob.edit_entries = {0, 100};
  EXPECT_FALSE(fresh.apply(oob, 100).is_ok());
}

// The remote path: each step as bytes, decoded and run by execute_step.
class BytesRunner final : public ModelRunner {
 public:
  explicit BytesRunner(std::unique_ptr<CpuModelRunner> inner)
      : inner_(std::move(inner)), builder_(inner_->model().config().n_embd) {}
  int n_vocab() const override { return inner_->n_vocab(); }
  int64_t n_ctx_train() const override { return inner_->n_ctx_train(); }
  int max_batch_tokens() const override { return inner_->max_batch_tokens(); }
  KvSpec kv_spec() const override { return inner_->kv_spec(); }
  Result<int32_t> allocate_kv(const KvLayout& l, int bs, size_t m, int64_t n, const KvPoolLimits& lim) override {
    return inner_->allocate_kv(l, bs, m, n, lim);
  }
  KvMemory kv_memory() const override { return inner_->kv_memory(); }
  Result<float*> execute(const SchedulerOutput& so) override {
    EMBER_RETURN_IF_ERROR(submit(so));
    return collect();
  }
  // Pipelined when depth > 1: the step's input is made at submit (as a
  // remote rank would get it) and run at collect.
  int max_in_flight() const override { return depth; }
  Status submit(const SchedulerOutput& so) override {
    StepInput in;
    builder_.build(so, &in);
    bytes_.emplace_back();
    encode_step_input(in, &bytes_.back());
    return Status::ok();
  }
  Result<float*> collect() override {
    EMBER_RETURN_IF_ERROR(decode_step_input(bytes_.front().data(), bytes_.front().size(), &in_));
    bytes_.pop_front();
    return inner_->execute_step(in_);
  }
  int depth = 1;

 private:
  std::unique_ptr<CpuModelRunner> inner_;
  StepInputBuilder builder_;
  std::deque<std::vector<uint8_t>> bytes_;
  StepInput in_;
};

struct Outputs {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::vector<float>> logprobs;
  int64_t preemptions = 0, prefix_hits = 0;
};

std::vector<std::pair<std::string, RequestParams>> requests(int vocab) {
  std::mt19937 rng(5);
  std::vector<int32_t> shared(40);
  for (auto& t : shared) t = static_cast<int32_t>(rng() % vocab);
  std::vector<std::pair<std::string, RequestParams>> out;
  for (int i = 0; i < 20; ++i) {
    RequestParams p;
    const int len = 8 + static_cast<int>(rng() % 50);
    for (int j = 0; j < len; ++j) p.prompt.push_back(j < 40 && i % 2 ? shared[j] : static_cast<int32_t>(rng() % vocab));
    p.max_tokens = 6 + static_cast<int>(rng() % 12);
    p.logprobs = true;
    p.n = i % 7 == 3 ? 2 : 1;
    p.sampling.temperature = i % 3 ? 0.f : 0.9f;
    p.sampling.seed = static_cast<uint64_t>(i);
    out.emplace_back("q" + std::to_string(i), std::move(p));
  }
  return out;
}

// abort_every > 0: aborts request q<k> after step k * abort_every (the same
// points in every run).
Outputs run(const Model& m, ThreadPool& pool, int mode, int abort_every = 0) {
  EngineConfig ec;
  ec.max_num_seqs = 6;
  ec.max_num_batched_tokens = 32;
  ec.num_kv_blocks = 15;  // tight: preemption
  ec.kv_cache_bytes = 0;
  std::unique_ptr<Engine> e;
  if (mode == 0) {
    e = std::move(Engine::create(m, pool, ec).value());
  } else {
    auto r = std::make_unique<BytesRunner>(std::make_unique<CpuModelRunner>(m, pool, ec.max_num_batched_tokens));
    r->depth = mode;
    e = std::move(Engine::create(std::move(r), ec).value());
  }
  Outputs o;
  for (auto& [id, p] : requests(m.config().n_vocab)) EXPECT_TRUE(e->add_request(id, p).is_ok());
  int step = 0, aborted = 0;
  while (e->has_unfinished()) {
    auto out = e->step();
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out) break;
    for (const TokenEvent& t : out->tokens) {
      const std::string key = t.id + "/" + std::to_string(t.index);
      o.tokens[key].push_back(t.token);
      o.logprobs[key].push_back(t.logprob);
    }
    EXPECT_TRUE(e->check_invariants().is_ok());
    ++step;
    if (abort_every > 0 && step % abort_every == 0) e->abort("q" + std::to_string(aborted++));
  }
  const EngineStats st = e->stats();
  o.preemptions = st.n_preemptions;
  o.prefix_hits = st.prefix.hit_tokens;
  EXPECT_EQ(st.blocks_used, 0);
  return o;
}

void expect_same(const Outputs& a, const Outputs& b) {
  for (const auto& [k, t] : a.tokens) {
    ASSERT_TRUE(b.tokens.count(k)) << k;
    EXPECT_EQ(t, b.tokens.at(k)) << k;
    EXPECT_EQ(0, std::memcmp(a.logprobs.at(k).data(), b.logprobs.at(k).data(), t.size() * sizeof(float))) << k;
  }
}

TEST(StepInput, StepsAsBytesGiveTheInProcessOutputs) {
  for (const char* path : {kTinyQwen, kTinyGemma}) {
    auto m = Model::load(path);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    ThreadPool pool(2);
    const Outputs local = run(**m, pool, 0);
    const Outputs remote = run(**m, pool, 1);
    EXPECT_GT(local.preemptions, 0) << path;
    EXPECT_GT(local.prefix_hits, 0) << path;
    expect_same(local, remote);
    EXPECT_EQ(local.tokens.size(), remote.tokens.size());
  }
}

// Pipelining: two steps in flight over disjoint requests (micro-batches),
// the same outputs; aborts of requests whose step is in flight are kept
// until it is collected, and the rest are unchanged.
TEST(StepInput, PipelinedEngineGivesTheSameOutputs) {
  auto m = Model::load(kTinyQwen);
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(2);
  const Outputs sync = run(**m, pool, 0);
  const Outputs piped = run(**m, pool, 2);
  expect_same(sync, piped);
  EXPECT_EQ(sync.tokens.size(), piped.tokens.size());
  // Aborts (of requests that may be in flight): every output is a prefix of
  // the run without aborts (whole for the requests never aborted).
  const Outputs piped_ab = run(**m, pool, 2, 3);
  int shorter = 0;
  for (const auto& [k, t] : piped_ab.tokens) {
    const std::vector<int32_t>& full = sync.tokens.at(k);
    ASSERT_LE(t.size(), full.size()) << k;
    EXPECT_TRUE(std::equal(t.begin(), t.end(), full.begin())) << k;
    shorter += t.size() < full.size();
  }
  EXPECT_GT(shorter, 0);
}

}  // namespace
}  // namespace ember
