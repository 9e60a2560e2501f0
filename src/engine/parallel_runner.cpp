// Rank 0's parallel model runner and the other ranks' loop; see
// parallel_runner.h.
#include "engine/parallel_runner.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "engine/wire.h"

namespace ember {

namespace {

// Tags of the session's messages (kTagHidden carries a stage's rows).
constexpr int kTagControl = 10;  // a 16-byte header: magic, kind, payload bytes
constexpr int kTagPayload = 12;  // the payload that follows it
constexpr uint32_t kMagic = 0x454d5052;  // "EMPR"
constexpr uint64_t kMaxPayload = uint64_t{1} << 31;
constexpr double kStartTimeout = 900;    // the first answer of a rank may wait for its model to load

enum Kind : uint32_t {
  kSetup = 1,       // rank 0 -> all: max batch, KV formats
  kSpec = 2,        // -> rank 0: the rank's KvSpec
  kAlloc = 3,       // rank 0 -> all: the layout and budget
  kFits = 4,        // -> rank 0: pages the rank's budget holds
  kAllocFinal = 5,  // rank 0 -> all: the page count every rank allocates
  kAllocDone = 6,   // -> rank 0: ok or the error
  kStep = 7,        // rank 0 -> all: a step input
  kEnd = 8,         // rank 0 -> all: the session ends
  kShutdown = 9,    // rank 0 -> all: the job ends
};

std::vector<uint8_t> header(uint32_t kind, uint64_t bytes) {
  std::vector<uint8_t> h;
  WireWriter w(&h);
  w.put(kMagic);
  w.put(kind);
  w.put(bytes);
  return h;
}

Status send_msg(Collective& c, int dst, uint32_t kind, const std::vector<uint8_t>& payload) {
  const std::vector<uint8_t> h = header(kind, payload.size());
  EMBER_RETURN_IF_ERROR(c.send(h.data(), h.size(), dst, kTagControl));
  if (payload.empty()) return Status::ok();
  return c.send(payload.data(), payload.size(), dst, kTagPayload);
}

// timeout_s as Collective::recv (the header's; the payload follows at once).
Status recv_msg(Collective& c, int src, uint32_t* kind, std::vector<uint8_t>* payload, double timeout_s) {
  uint8_t h[16];
  EMBER_RETURN_IF_ERROR(c.recv(h, sizeof h, src, kTagControl, timeout_s));
  WireReader r(h, sizeof h);
  uint32_t magic = 0;
  uint64_t bytes = 0;
  if (!r.get(&magic) || !r.get(kind) || !r.get(&bytes) || magic != kMagic || bytes > kMaxPayload)
    return Status::errorf("a malformed message from rank {}", src);
  payload->resize(bytes);
  if (bytes == 0) return Status::ok();
  return c.recv(payload->data(), bytes, src, kTagPayload);
}

// A reply: ok, or the error's message.
std::vector<uint8_t> reply(const Status& st, const std::vector<uint8_t>& body = {}) {
  std::vector<uint8_t> out;
  WireWriter w(&out);
  w.put<uint8_t>(st.is_ok());
  if (!st.is_ok()) {
    w.put_array(std::vector<uint8_t>(st.message().begin(), st.message().end()));
    return out;
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// The reply of rank `src` of kind `want`; its body in *body.
Status recv_reply(Collective& c, int src, uint32_t want, std::vector<uint8_t>* body, double timeout_s = 0) {
  uint32_t kind = 0;
  std::vector<uint8_t> msg;
  EMBER_RETURN_IF_ERROR(recv_msg(c, src, &kind, &msg, timeout_s));
  if (kind != want || msg.empty()) return Status::errorf("rank {} answered out of turn (message {})", src, kind);
  if (msg[0] == 1) {
    body->assign(msg.begin() + 1, msg.end());
    return Status::ok();
  }
  WireReader r(msg.data() + 1, msg.size() - 1);
  std::vector<uint8_t> text;
  if (!r.get_array(&text)) return Status::errorf("rank {} failed", src);
  return Status::errorf("rank {}: {}", src, std::string(text.begin(), text.end()));
}

void put_spec(WireWriter& w, const KvSpec& s) {
  w.put<uint8_t>(static_cast<uint8_t>(s.types.k));
  w.put<uint8_t>(static_cast<uint8_t>(s.types.v));
  w.put<uint8_t>(static_cast<uint8_t>(s.types.rot_k));
  w.put<uint8_t>(static_cast<uint8_t>(s.types.rot_v));
  w.put<int32_t>(s.head_dim);
  w.put<int32_t>(s.head_dim_v);
  w.put<uint64_t>(s.layers.size());
  for (const KvLayerSpec& l : s.layers) {
    w.put<int32_t>(l.window);
    w.put(l.k_dim);
    w.put(l.v_dim);
  }
}

bool get_types(WireReader& r, KvTypes* t) {
  uint8_t k = 0, v = 0, rk = 0, rv = 0;
  if (!r.get(&k) || !r.get(&v) || !r.get(&rk) || !r.get(&rv) || k >= kKvTypeCount || v >= kKvTypeCount || rk > 1 ||
      rv > 1)
    return false;
  *t = KvTypes{static_cast<KvType>(k), static_cast<KvType>(v), static_cast<KvRotation>(rk), static_cast<KvRotation>(rv)};
  return true;
}

bool get_spec(WireReader& r, KvSpec* s) {
  uint64_t n = 0;
  if (!get_types(r, &s->types) || !r.get(&s->head_dim) || !r.get(&s->head_dim_v) || !r.count(&n, 20)) return false;
  s->layers.resize(n);
  for (KvLayerSpec& l : s->layers)
    if (!r.get(&l.window) || !r.get(&l.k_dim) || !r.get(&l.v_dim)) return false;
  return true;
}

struct AllocRequest {
  KvLayout layout;
  int32_t block_size = 0;
  uint64_t memory_bytes = 0;
  int64_t n_blocks = 0;
  KvPoolLimits limits;
};

void put_alloc(WireWriter& w, const AllocRequest& a) {
  w.put<int32_t>(a.layout.n_groups);
  w.put<int32_t>(a.layout.layers_per_group);
  w.put_array(a.layout.group_of_layer);
  w.put_array(a.layout.slot_of_layer);
  w.put_array(a.layout.group_window);
  w.put(a.block_size);
  w.put(a.memory_bytes);
  w.put(a.n_blocks);
  w.put<int32_t>(a.limits.max_seqs);
  w.put<int32_t>(a.limits.max_batch_tokens);
}

bool get_alloc(WireReader& r, AllocRequest* a) {
  return r.get(&a->layout.n_groups) && r.get(&a->layout.layers_per_group) && r.get_array(&a->layout.group_of_layer) &&
         r.get_array(&a->layout.slot_of_layer) && r.get_array(&a->layout.group_window) && r.get(&a->block_size) &&
         r.get(&a->memory_bytes) && r.get(&a->n_blocks) && r.get(&a->limits.max_seqs) &&
         r.get(&a->limits.max_batch_tokens) && r.at_end();
}

// Pages of the layout that `spec`'s rank can hold within the request's budget.
int64_t pages_that_fit(const KvSpec& spec, const AllocRequest& a) {
  if (a.n_blocks > 0) return a.n_blocks;
  KvLayout local = a.layout;
  if (local.group_of_layer.size() < spec.layers.size()) return 0;
  local.group_of_layer.resize(spec.layers.size());
  local.slot_of_layer.resize(spec.layers.size());
  if (local.slot_of_layer.size() != local.group_of_layer.size()) return 0;
  const size_t per_block = KvSlotDims::of(spec, local).page_bytes(a.block_size);
  const size_t reserve = kv_tail_reserve_bytes(spec, local, a.limits);
  if (per_block == 0 || a.memory_bytes <= reserve) return 0;
  return static_cast<int64_t>((a.memory_bytes - reserve) / per_block);
}

}  // namespace

ModelShard ParallelPlan::shard(int rank) const {
  ModelShard s;
  if (tp > 1) {
    s.tp_rank = tp_rank_of(rank);
    s.tp_size = tp;
  }
  if (pp > 1) {
    const int st = stage_of(rank);
    s.layer_begin = stage_layers[static_cast<size_t>(st)];
    s.layer_end = stage_layers[static_cast<size_t>(st) + 1];
  }
  return s;
}

StageLinks ParallelPlan::links(int rank, Collective* comm) const {
  StageLinks l;
  if (pp <= 1) return l;
  const int s = stage_of(rank), t = tp_rank_of(rank);
  l.comm = comm;
  l.prev = s == 0 ? -1 : rank_of(s - 1, t);
  l.next = s == pp - 1 ? -1 : rank_of(s + 1, t);
  return l;
}

Status ParallelPlan::validate(int world, int n_layer) const {
  if (tp < 1 || pp < 1) return Status::error("parallel sizes must be >= 1");
  if (size() != world)
    return Status::errorf("{} needs {} ranks, but the job has {} (mpirun -np {})", describe(), size(), world, size());
  if (pp > 1) {
    if (static_cast<int>(stage_layers.size()) != pp + 1 || stage_layers.front() != 0 || stage_layers.back() != n_layer)
      return Status::errorf("{} pipeline stages need {} layer bounds from 0 to {}", pp, pp + 1, n_layer);
    for (int s = 0; s < pp; ++s)
      if (stage_layers[s + 1] <= stage_layers[s])
        return Status::errorf("pipeline stage {} holds no layers (bounds {} .. {})", s, stage_layers[s],
                              stage_layers[s + 1]);
  }
  return Status::ok();
}

std::string ParallelPlan::describe() const {
  std::string s;
  if (pp > 1) {
    s = fmt::format("a pipeline of {} stages (layers", pp);
    for (int i = 0; i < pp && static_cast<int>(stage_layers.size()) > i + 1; ++i)
      s += fmt::format("{} {}-{}", i ? "," : "", stage_layers[i], stage_layers[i + 1] - 1);
    s += ")";
  }
  if (tp > 1) s += fmt::format("{}tensor parallelism over {} ranks", pp > 1 ? ", each stage with " : "", tp);
  return s.empty() ? "one rank" : s;
}

KvSpec merge_kv_specs(const std::vector<KvSpec>& specs) {
  KvSpec m;
  if (specs.empty()) return m;
  m.types = specs[0].types;
  m.head_dim = specs[0].head_dim;
  m.head_dim_v = specs[0].head_dim_v;
  size_t n = 0;
  for (const KvSpec& s : specs) n = std::max(n, s.layers.size());
  m.layers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bool first = true;
    for (const KvSpec& s : specs) {
      if (i >= s.layers.size()) continue;
      const KvLayerSpec& l = s.layers[i];
      KvLayerSpec& o = m.layers[i];
      if (first) o.window = l.window;
      else if (o.window != l.window) o.window = 0;  // the ranks disagree: keep every page
      o.k_dim = std::max(o.k_dim, l.k_dim);
      o.v_dim = std::max(o.v_dim, l.v_dim);
      first = false;
    }
  }
  return m;
}

ParallelRunner::ParallelRunner(std::unique_ptr<CpuModelRunner> local, Collective& comm, const ParallelPlan& plan)
    : local_(std::move(local)), comm_(comm), plan_(plan), builder_(local_->model().config().n_embd) {}

namespace {

// The tensor-parallel group of a rank: `tp_comm`, or the job's own
// communicator when the plan has no pipeline.
Result<Collective*> tp_group(Collective& comm, const ParallelPlan& plan, Collective* tp_comm) {
  if (plan.tp <= 1) return static_cast<Collective*>(nullptr);
  Collective* g = tp_comm ? tp_comm : plan.pp == 1 ? &comm : nullptr;
  if (!g || g->size() != plan.tp || g->rank() != plan.tp_rank_of(comm.rank()))
    return Status::errorf("{}: rank {} has no tensor-parallel group of {} ranks in which it is rank {}",
                          plan.describe(), comm.rank(), plan.tp, plan.tp_rank_of(comm.rank()));
  return g;
}

}  // namespace

Result<std::unique_ptr<ParallelRunner>> ParallelRunner::create(std::unique_ptr<CpuModelRunner> local,
                                                               Collective& comm, const ParallelPlan& plan,
                                                               Collective* tp_comm) {
  if (comm.rank() != 0) return Status::error("the parallel runner runs on rank 0 (the others run the worker loop)");
  if (plan.size() != comm.size()) return Status::errorf("{} over a job of {} ranks", plan.describe(), comm.size());
  auto group = tp_group(comm, plan, tp_comm);
  if (!group) return group.status();
  std::unique_ptr<ParallelRunner> r(new ParallelRunner(std::move(local), comm, plan));
  if (group.value()) r->local_->set_collective(group.value());
  r->local_->set_stage_links(plan.links(0, &comm));
  EMBER_RETURN_IF_ERROR(r->start());
  return r;
}

Status ParallelRunner::fail(Status st) {
  if (!broken()) {
    failed_ = st;
    broken_.store(true, std::memory_order_release);
  }
  return st;
}

Status ParallelRunner::broadcast(uint32_t kind, const std::vector<uint8_t>& payload) {
  for (int w = 1; w < comm_.size(); ++w) EMBER_RETURN_IF_ERROR(send_msg(comm_, w, kind, payload));
  return Status::ok();
}

Status ParallelRunner::start() {
  std::vector<uint8_t> setup;
  WireWriter w(&setup);
  const KvSpec own = local_->kv_spec();
  w.put<int32_t>(local_->max_batch_tokens());
  w.put<uint8_t>(static_cast<uint8_t>(own.types.k));
  w.put<uint8_t>(static_cast<uint8_t>(own.types.v));
  w.put<uint8_t>(static_cast<uint8_t>(own.types.rot_k));
  w.put<uint8_t>(static_cast<uint8_t>(own.types.rot_v));
  // LongRoPE's factor set follows the context rank 0 runs with
  // (Model::set_context_length): every rank takes the same.
  w.put<uint8_t>(local_->model().rope_long_factors());
  session_ = true;
  if (Status st = broadcast(kSetup, setup); !st) return fail(st);
  std::vector<KvSpec> specs{own};
  for (int r = 1; r < comm_.size(); ++r) {
    std::vector<uint8_t> body;
    if (Status st = recv_reply(comm_, r, kSpec, &body, kStartTimeout); !st) return fail(st);
    WireReader rd(body.data(), body.size());
    KvSpec s;
    if (!get_spec(rd, &s) || !rd.at_end()) return fail(Status::errorf("rank {} sent a malformed KV shape", r));
    specs.push_back(std::move(s));
  }
  spec_ = merge_kv_specs(specs);
  return Status::ok();
}

ParallelRunner::~ParallelRunner() {
  if (!session_ || broken()) return;
  for (Step& s : steps_)
    for (int64_t h : s.sends) (void)comm_.wait(h);
  (void)broadcast(kEnd, {});
}

Result<int32_t> ParallelRunner::allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes,
                                            int64_t n_blocks, const KvPoolLimits& limits) {
  if (broken()) return failed_;
  AllocRequest a{layout, block_size, memory_bytes, n_blocks, limits};
  std::vector<uint8_t> msg;
  WireWriter w(&msg);
  put_alloc(w, a);
  if (Status st = broadcast(kAlloc, msg); !st) return fail(st);
  int64_t pages = pages_that_fit(local_->kv_spec(), a);
  int least = 0;
  for (int r = 1; r < comm_.size(); ++r) {
    std::vector<uint8_t> body;
    if (Status st = recv_reply(comm_, r, kFits, &body); !st) return fail(st);
    WireReader rd(body.data(), body.size());
    int64_t n = 0;
    if (!rd.get(&n) || !rd.at_end()) return fail(Status::errorf("rank {} sent a malformed page count", r));
    if (n < pages) {
      pages = n;
      least = r;
    }
  }
  pages = std::min<int64_t>(pages, std::numeric_limits<int32_t>::max());
  std::vector<uint8_t> fin;
  WireWriter wf(&fin);
  wf.put<int64_t>(pages);
  if (Status st = broadcast(kAllocFinal, fin); !st) return fail(st);
  Status mine = Status::ok();
  if (pages < 1) {
    mine = Status::errorf("the KV cache budget of {} bytes holds no page of rank {}'s layers (each rank gets the "
                          "budget)",
                          memory_bytes, least);
  } else if (auto n = local_->allocate_kv(layout, block_size, memory_bytes, pages, limits); !n) {
    mine = n.status().with_context("rank 0");
  }
  Status all = mine;
  for (int r = 1; r < comm_.size(); ++r) {
    std::vector<uint8_t> body;
    Status st = recv_reply(comm_, r, kAllocDone, &body);
    if (all.is_ok() && !st.is_ok()) all = st;
  }
  if (!all) return all;  // the session can go on (nothing allocated is used)
  return static_cast<int32_t>(pages);
}

Status ParallelRunner::submit(const SchedulerOutput& so) {
  if (broken()) return failed_;
  steps_.emplace_back();
  Step& s = steps_.back();
  builder_.build(so, &s.input);
  encode_step_input(s.input, &s.payload);
  s.header = header(kStep, s.payload.size());
  for (int w = 1; w < comm_.size(); ++w) {
    auto h = comm_.isend(s.header.data(), s.header.size(), w, kTagControl);
    if (!h) return fail(h.status());
    s.sends.push_back(h.value());
    auto p = comm_.isend(s.payload.data(), s.payload.size(), w, kTagPayload);
    if (!p) return fail(p.status());
    s.sends.push_back(p.value());
  }
  return Status::ok();
}

Result<float*> ParallelRunner::collect() {
  if (broken()) return failed_;
  if (steps_.empty()) return fail(Status::error("collect without a submitted step"));
  Step& s = steps_.front();
  auto rows = local_->execute_step(s.input);
  if (!rows) return fail(rows.status());
  for (int64_t h : s.sends)
    if (Status st = comm_.wait(h); !st) return fail(st);
  steps_.pop_front();
  return rows;
}

Result<float*> ParallelRunner::execute(const SchedulerOutput& so) {
  EMBER_RETURN_IF_ERROR(submit(so));
  return collect();
}

Status run_parallel_worker(Model& model, ThreadPool& pool, Collective& comm, const ParallelPlan& plan,
                           Collective* tp_comm) {
  const int me = comm.rank();
  if (me == 0) return Status::error("rank 0 runs the engine, not the worker loop");
  auto group = tp_group(comm, plan, tp_comm);
  if (!group) return group.status();
  std::unique_ptr<CpuModelRunner> runner;
  AllocRequest alloc;
  StepInput in;
  std::vector<uint8_t> msg;
  for (;;) {
    uint32_t kind = 0;
    EMBER_RETURN_IF_ERROR(recv_msg(comm, 0, &kind, &msg, -1));  // waits for work as long as it takes
    WireReader rd(msg.data(), msg.size());
    switch (kind) {
      case kSetup: {
        int32_t max_batch = 0;
        KvTypes types;
        uint8_t rope_long = 0;
        if (!rd.get(&max_batch) || !get_types(rd, &types) || !rd.get(&rope_long) || !rd.at_end() || max_batch < 1 ||
            rope_long > 1)
          return Status::error("a malformed session start");
        runner.reset();
        model.use_rope_long_factors(rope_long != 0);  // before the runner's ForwardContext is made
        runner = std::make_unique<CpuModelRunner>(model, pool, max_batch, types);
        if (group.value()) runner->set_collective(group.value());
        runner->set_stage_links(plan.links(me, &comm));
        std::vector<uint8_t> body;
        WireWriter w(&body);
        put_spec(w, runner->kv_spec());
        EMBER_RETURN_IF_ERROR(send_msg(comm, 0, kSpec, reply(Status::ok(), body)));
        break;
      }
      case kAlloc: {
        if (!runner || !get_alloc(rd, &alloc)) return Status::error("a malformed KV allocation");
        std::vector<uint8_t> body;
        WireWriter w(&body);
        w.put<int64_t>(pages_that_fit(runner->kv_spec(), alloc));
        EMBER_RETURN_IF_ERROR(send_msg(comm, 0, kFits, reply(Status::ok(), body)));
        break;
      }
      case kAllocFinal: {
        int64_t pages = 0;
        if (!runner || !rd.get(&pages) || !rd.at_end()) return Status::error("a malformed KV allocation");
        Status st = Status::ok();
        if (pages >= 1) {
          auto n = runner->allocate_kv(alloc.layout, alloc.block_size, alloc.memory_bytes, pages, alloc.limits);
          if (!n) st = n.status();
        }
        EMBER_RETURN_IF_ERROR(send_msg(comm, 0, kAllocDone, reply(st)));
        break;
      }
      case kStep: {
        if (!runner || !runner->kv_pool()) return Status::error("a step before the KV cache was allocated");
        EMBER_RETURN_IF_ERROR(decode_step_input(msg.data(), msg.size(), &in));
        auto rows = runner->execute_step(in);
        if (!rows) return rows.status().with_context(fmt::format("step {}", in.step));
        break;
      }
      case kEnd:
        runner.reset();
        break;
      case kShutdown:
        return Status::ok();
      default:
        return Status::errorf("an unknown message {} from rank 0", kind);
    }
  }
}

Status shutdown_parallel_workers(Collective& comm) {
  for (int w = 1; w < comm.size(); ++w) EMBER_RETURN_IF_ERROR(send_msg(comm, w, kShutdown, {}));
  return Status::ok();
}

}  // namespace ember
