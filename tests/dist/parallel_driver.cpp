// Test driver for tensor and pipeline parallelism through the engine (run by
// tests/dist/parallel_test.sh, under mpirun for the parallel modes):
//
//   parallel_driver MODEL single|tp|pp|tppp SUITE OUT
//
// single runs one process over the whole model (CpuModelRunner); tp, pp and
// tppp (2 tensor ranks per stage, size / 2 stages) run the job's ranks (every rank one shard; rank 0 the engine over a
// ParallelRunner, the others run_parallel_worker). Rank 0 writes OUT:
//   "req <id> <tokens...>" and "lp <id> <logprobs, %a>" lines, and OUT.rows:
//   every logits row the engine got, keyed by (request, position).
// Suites:
//   logits   16 greedy requests (shared prefixes, chunked prefill, 4 at a
//            time) on a tiny model; the script compares OUT and OUT.rows
//            with the single run (`compare`).
//   engine   the default model: the same 12 requests together, each alone
//            (batch invariance: identical tokens and log-probabilities), in
//            a KV pool that forces preemption (identical, preemptions > 0),
//            and a shared 160-token prefix (the second request hits the
//            prefix cache for 144+ tokens; identical to a run without it).
//            Prints "ok ..." / "FAIL ..." per check. In one process only
//            the requests together (the reference the script compares).
//
//   parallel_driver compare A B TOL
//
// compares two runs: identical tokens, every logits row present in both
// within TOL (max absolute difference); prints the largest difference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dist/mpi_collective.h"
#include "engine/cpu_model_runner.h"
#include "engine/engine.h"
#include "engine/parallel_runner.h"
#include "model/model.h"

namespace {

using namespace ember;

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Records every logits row a runner returns, by (request id, position).
class RecordingRunner final : public ModelRunner {
 public:
  using Key = std::tuple<std::string, int, int64_t>;  // id, sample, position
  RecordingRunner(std::unique_ptr<ModelRunner> inner, std::map<Key, std::vector<float>>* rows)
      : inner_(std::move(inner)), rows_(rows) {}
  int n_vocab() const override { return inner_->n_vocab(); }
  int64_t n_ctx_train() const override { return inner_->n_ctx_train(); }
  int max_batch_tokens() const override { return inner_->max_batch_tokens(); }
  KvSpec kv_spec() const override { return inner_->kv_spec(); }
  Result<int32_t> allocate_kv(const KvLayout& l, int bs, size_t mem, int64_t n, const KvPoolLimits& lim) override {
    return inner_->allocate_kv(l, bs, mem, n, lim);
  }
  KvMemory kv_memory() const override { return inner_->kv_memory(); }
  Result<float*> execute(const SchedulerOutput& so) override {
    keys_.push_back(keys(so));
    auto r = inner_->execute(so);
    if (r) record(r.value());
    return r;
  }
  int max_in_flight() const override { return inner_->max_in_flight(); }
  Status submit(const SchedulerOutput& so) override {
    keys_.push_back(keys(so));
    return inner_->submit(so);
  }
  Result<float*> collect() override {
    auto r = inner_->collect();
    if (r) record(r.value());
    return r;
  }

 private:
  static std::vector<Key> keys(const SchedulerOutput& so) {
    std::vector<Key> k;
    for (const ScheduledRequest& sr : so.scheduled) {
      const int64_t first = sr.n_rows() == sr.n_tokens ? sr.pos0 : sr.pos0 + sr.n_tokens - 1;
      for (int64_t j = 0; j < sr.n_rows(); ++j) k.emplace_back(sr.req->id, sr.req->index, first + j);
    }
    return k;
  }
  void record(const float* rows) {
    const std::vector<Key> k = std::move(keys_.front());
    keys_.erase(keys_.begin());
    const int V = n_vocab();
    for (size_t i = 0; i < k.size(); ++i) (*rows_)[k[i]].assign(rows + i * V, rows + (i + 1) * V);
  }
  std::unique_ptr<ModelRunner> inner_;
  std::map<Key, std::vector<float>>* rows_;
  std::vector<std::vector<Key>> keys_;
};

struct Run {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::vector<float>> logprobs;
  std::map<RecordingRunner::Key, std::vector<float>> rows;
  EngineStats stats;
};

struct Ctx {
  const Model* model = nullptr;
  ThreadPool* pool = nullptr;
  Collective* comm = nullptr;  // null: one process
  Collective* tp_comm = nullptr;  // tp x pp: this stage's tensor group
  ParallelPlan plan;
};

Result<Run> run_requests(const Ctx& c, EngineConfig ec, const std::vector<std::pair<std::string, RequestParams>>& reqs,
                         bool one_at_a_time = false) {
  Run run;
  std::unique_ptr<ModelRunner> inner;
  if (c.comm) {
    auto local = std::make_unique<CpuModelRunner>(*c.model, *c.pool, ec.max_num_batched_tokens, ec.kv_types);
    auto p = ParallelRunner::create(std::move(local), *c.comm, c.plan, c.tp_comm);
    if (!p) return p.status();
    inner = std::move(p.value());
  } else {
    inner = std::make_unique<CpuModelRunner>(*c.model, *c.pool, ec.max_num_batched_tokens, ec.kv_types);
  }
  auto e = Engine::create(std::make_unique<RecordingRunner>(std::move(inner), &run.rows), ec);
  if (!e) return e.status();
  Engine& eng = *e.value();
  size_t next = 0;
  auto add = [&]() -> Status {
    EMBER_RETURN_IF_ERROR(eng.add_request(reqs[next].first, reqs[next].second));
    ++next;
    return Status::ok();
  };
  if (!one_at_a_time)
    while (next < reqs.size()) EMBER_RETURN_IF_ERROR(add());
  while (next < reqs.size() || eng.has_unfinished()) {
    if (one_at_a_time && !eng.has_unfinished()) EMBER_RETURN_IF_ERROR(add());
    auto out = eng.step();
    if (!out) return out.status();
    for (const TokenEvent& t : out->tokens) {
      run.tokens[t.id].push_back(t.token);
      run.logprobs[t.id].push_back(t.logprob);
    }
    if (Status st = eng.check_invariants(); !st) return st;
  }
  run.stats = eng.stats();
  return run;
}

std::vector<std::pair<std::string, RequestParams>> make_requests(int n, int vocab, int max_tokens, int len_lo,
                                                                 int len_hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> shared(static_cast<size_t>(len_hi));
  for (auto& t : shared) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  std::vector<std::pair<std::string, RequestParams>> out;
  for (int i = 0; i < n; ++i) {
    RequestParams p;
    const int len = len_lo + static_cast<int>(rng() % static_cast<uint64_t>(len_hi - len_lo + 1));
    const int keep = i % 3 == 0 ? len / 2 : 0;  // every third shares a prefix
    for (int j = 0; j < len; ++j)
      p.prompt.push_back(j < keep ? shared[static_cast<size_t>(j)] : static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    p.max_tokens = max_tokens;
    p.logprobs = true;
    if (i % 4 == 3) {  // some seeded sampling next to greedy
      p.sampling.temperature = 0.8f;
      p.sampling.top_k = 20;
      p.sampling.seed = 100 + static_cast<uint64_t>(i);
    } else {
      p.sampling.temperature = 0.f;
    }
    out.emplace_back("r" + std::to_string(i), std::move(p));
  }
  return out;
}

Status write_run(const Run& r, const std::string& path) {
  std::ofstream f(path);
  for (const auto& [id, t] : r.tokens) {
    f << "req " << id;
    for (int32_t x : t) f << ' ' << x;
    f << "\nlp " << id;
    for (float x : r.logprobs.at(id)) {
      char buf[40];
      std::snprintf(buf, sizeof buf, " %a", x);
      f << buf;
    }
    f << '\n';
  }
  std::ofstream b(path + ".rows", std::ios::binary);
  for (const auto& [k, row] : r.rows) {
    const std::string& id = std::get<0>(k);
    const uint32_t n = static_cast<uint32_t>(id.size());
    const int32_t idx = std::get<1>(k);
    const int64_t pos = std::get<2>(k);
    const uint32_t V = static_cast<uint32_t>(row.size());
    b.write(reinterpret_cast<const char*>(&n), 4).write(id.data(), n);
    b.write(reinterpret_cast<const char*>(&idx), 4).write(reinterpret_cast<const char*>(&pos), 8);
    b.write(reinterpret_cast<const char*>(&V), 4).write(reinterpret_cast<const char*>(row.data()), 4 * V);
  }
  return f && b ? Status::ok() : Status::errorf("cannot write {}", path);
}

bool same(const Run& a, const Run& b, std::string* why) {
  if (a.tokens != b.tokens) {
    *why = "tokens differ";
    return false;
  }
  for (const auto& [id, lp] : a.logprobs)
    if (std::memcmp(lp.data(), b.logprobs.at(id).data(), lp.size() * sizeof(float)) != 0) {
      *why = "log-probabilities of " + id + " differ";
      return false;
    }
  return true;
}

Status suite_logits(const Ctx& c, const std::string& out) {
  EngineConfig ec;
  ec.max_num_seqs = 4;
  ec.max_num_batched_tokens = 24;  // chunked prefill
  ec.kv_cache_bytes = size_t{8} << 20;
  const int V = c.model->config().n_vocab;
  auto reqs = make_requests(16, V, 12, 5, 40, 7);
  for (auto& [id, p] : reqs) p.sampling.temperature = 0.f;  // greedy: the tokens compare across runs
  auto r = run_requests(c, ec, reqs);
  if (!r) return r.status();
  return write_run(r.value(), out);
}

Status suite_engine(const Ctx& c, const std::string& out) {
  const int V = c.model->config().n_vocab;
  auto reqs = make_requests(12, V, 16, 20, 90, 11);
  EngineConfig ec;
  ec.max_num_seqs = 12;
  ec.max_num_batched_tokens = 64;
  ec.kv_cache_bytes = size_t{64} << 20;
  auto together = run_requests(c, ec, reqs);
  if (!together) return together.status();
  EMBER_RETURN_IF_ERROR(write_run(together.value(), out));
  // One process: only the reference of `compare` (the engine's own tests
  // check these invariants in one process; here they are checked across ranks).
  if (!c.comm) return Status::ok();
  std::string why;
  {
    EngineConfig one = ec;
    one.max_num_seqs = 1;
    auto alone = run_requests(c, one, reqs, true);
    if (!alone) return alone.status();
    check(same(together.value(), alone.value(), &why), "batch invariance: 12 requests together = each alone " + why);
  }
  {
    EngineConfig tight = ec;
    tight.kv_cache_bytes = 0;
    tight.num_kv_blocks = 72;  // 2-3 sequences of up to 106 tokens: preemption
    auto pre = run_requests(c, tight, reqs);
    if (!pre) return pre.status();
    check(same(together.value(), pre.value(), &why) && pre->stats.n_preemptions > 0,
          "preemption: a pool of 72 blocks (" + std::to_string(pre->stats.n_preemptions) +
              " preemptions) gives the same outputs " + why);
  }
  {
    std::mt19937_64 rng(5);
    std::vector<int32_t> prefix(160);
    for (auto& t : prefix) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
    std::vector<std::pair<std::string, RequestParams>> two;
    for (int i = 0; i < 2; ++i) {
      RequestParams p;
      p.prompt = prefix;
      for (int j = 0; j < 8; ++j) p.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(V)));
      p.max_tokens = 8;
      p.logprobs = true;
      p.sampling.temperature = 0.f;
      two.emplace_back("p" + std::to_string(i), std::move(p));
    }
    auto cached = run_requests(c, ec, two, true);
    EngineConfig nocache = ec;
    nocache.enable_prefix_caching = false;
    auto plain = run_requests(c, nocache, two, true);
    if (!cached) return cached.status();
    if (!plain) return plain.status();
    check(same(cached.value(), plain.value(), &why) && cached->stats.prefix.hit_tokens >= 144,
          "prefix cache: " + std::to_string(cached->stats.prefix.hit_tokens) +
              " prompt tokens from the cache, same outputs as without it " + why);
  }
  return Status::ok();
}

Result<std::map<RecordingRunner::Key, std::vector<float>>> read_rows(const std::string& path) {
  std::ifstream b(path, std::ios::binary);
  if (!b) return Status::errorf("cannot read {}", path);
  std::map<RecordingRunner::Key, std::vector<float>> rows;
  for (;;) {
    uint32_t n = 0, V = 0;
    int32_t idx = 0;
    int64_t pos = 0;
    if (!b.read(reinterpret_cast<char*>(&n), 4)) break;
    std::string id(n, '\0');
    b.read(id.data(), n).read(reinterpret_cast<char*>(&idx), 4).read(reinterpret_cast<char*>(&pos), 8);
    b.read(reinterpret_cast<char*>(&V), 4);
    std::vector<float> row(V);
    if (!b.read(reinterpret_cast<char*>(row.data()), 4 * V)) return Status::errorf("{}: truncated", path);
    rows[{id, idx, pos}] = std::move(row);
  }
  return rows;
}

int compare(const std::string& a, const std::string& b, double tol) {
  auto lines = [](const std::string& p) {
    std::ifstream f(p);
    std::map<std::string, std::string> m;
    std::string l;
    while (std::getline(f, l))
      if (l.rfind("req ", 0) == 0) m[l.substr(4, l.find(' ', 4) - 4)] = l;
    return m;
  };
  const auto ta = lines(a), tb = lines(b);
  check(!ta.empty() && ta == tb, "the same tokens for " + std::to_string(ta.size()) + " requests");
  auto ra = read_rows(a + ".rows"), rb = read_rows(b + ".rows");
  if (!ra || !rb) {
    check(false, "logits rows readable");
    return 1;
  }
  double worst = 0;
  size_t n = 0;
  for (const auto& [k, row] : ra.value()) {
    auto it = rb->find(k);
    if (it == rb->end() || it->second.size() != row.size()) continue;
    ++n;
    for (size_t i = 0; i < row.size(); ++i) {
      const double d = std::fabs(double(row[i]) - it->second[i]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);  // a NaN on either side fails
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu logits rows of %zu compared: max |difference| %.3g (tolerance %.3g)", n,
                ra->size(), worst, tol);
  check(n == ra->size() && n == rb->size() && n > 0 && worst <= tol, buf);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "compare") return compare(argv[2], argv[3], std::atof(argv[4]));
  if (argc != 5) {
    std::fprintf(stderr, "usage: parallel_driver MODEL single|tp|pp|tppp logits|engine OUT | compare A B TOL\n");
    return 2;
  }
  const std::string path = argv[1], mode = argv[2], suite = argv[3], out = argv[4];
  Ctx c;
  std::unique_ptr<dist::MpiCollective> comm;
  if (mode != "single") {
    auto cm = dist::MpiCollective::init(&argc, &argv, dist::DistOptions{60});
    if (!cm) {
      std::fprintf(stderr, "%s\n", cm.status().message().c_str());
      return 1;
    }
    comm = std::move(cm.value());
    c.comm = comm.get();
    if (mode == "tp") {
      c.plan.tp = comm->size();
    } else if (mode == "pp") {
      c.plan.pp = comm->size();
    } else {  // tppp: 2 tensor ranks per stage
      c.plan.tp = 2;
      c.plan.pp = comm->size() / 2;
    }
  }
  auto whole = Model::load(path);
  if (!whole) {
    std::fprintf(stderr, "%s\n", whole.status().message().c_str());
    return 1;
  }
  if (c.plan.pp > 1) {  // stages balanced by layer count
    const int L = whole.value()->config().n_layer;
    for (int s = 0; s <= c.plan.pp; ++s) c.plan.stage_layers.push_back(L * s / c.plan.pp);
  }
  const int rank = comm ? comm->rank() : 0;
  std::unique_ptr<dist::MpiCollective> tp_comm;  // destroyed before comm
  if (c.plan.tp > 1 && c.plan.pp > 1) {
    auto g = comm->split(rank / c.plan.tp, c.plan.tp_rank_of(rank));
    if (!g) {
      std::fprintf(stderr, "%s\n", g.status().message().c_str());
      dist::abort_job(1);
    }
    tp_comm = std::move(g.value());
    c.tp_comm = tp_comm.get();
  }
  std::unique_ptr<Model> shard;
  if (comm) {
    if (Status st = c.plan.validate(comm->size(), whole.value()->config().n_layer); !st) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    auto m = Model::load(path, c.plan.shard(rank));
    if (!m) {
      std::fprintf(stderr, "rank %d: %s\n", rank, m.status().message().c_str());
      dist::abort_job(1);
    }
    shard = std::move(m.value());
    whole.value().reset();
  }
  Model& model = shard ? *shard : *whole.value();
  // PARALLEL_DRIVER_SHORT_ROPE=1: rank 0 (and one process) runs a LongRoPE
  // model with its short factors (a context within the original one); the
  // other ranks keep the default (long, from the trained context) until the
  // session start gives them rank 0's choice.
  if (rank == 0 && std::getenv("PARALLEL_DRIVER_SHORT_ROPE")) {
    model.set_context_length(model.config().rope_orig_ctx);
    std::fprintf(stderr, "rank 0: LongRoPE %s factors\n", model.rope_long_factors() ? "long" : "short");
  }
  ThreadPool pool(1);
  c.model = &model;
  c.pool = &pool;
  if (rank > 0) {
    Status st = run_parallel_worker(model, pool, *comm, c.plan, c.tp_comm);
    if (!st) {
      std::fprintf(stderr, "rank %d: %s\n", rank, st.message().c_str());
      dist::abort_job(1);
    }
    return 0;
  }
  Status st = suite == "logits" ? suite_logits(c, out) : suite_engine(c, out);
  if (comm && (!st || !shutdown_parallel_workers(*comm))) {
    std::fprintf(stderr, "rank 0: %s\n", st.message().c_str());
    dist::abort_job(1);
  }
  if (!st) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  return failures ? 1 : 0;
}
