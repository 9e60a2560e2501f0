// The parallel flags and job of the ember commands; see parallel_options.h.
#include "cli/parallel_options.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "cli/common.h"
#include "model/io/model_file.h"
#include "model/layer_cost.h"

#ifdef EMBER_HAVE_MPI
#include "dist/job_notice.h"
#include "dist/mpi_collective.h"
#endif

namespace ember::cli {

void ParallelOptions::add_to(ArgParser& p) {
  p.option("-tp,--tensor-parallel-size", &tp, "N",
           "split every layer over N ranks (run under mpirun -np N; docs/parallelism.md)");
  p.option("-pp,--pipeline-parallel-size", &pp, "M",
           "split the layers into M stages, one per rank (mpirun -np M; with -tp N: N ranks a stage, -np N*M)");
  p.option("--pipeline-layers", &pipeline_layers, "A,B,..",
           "layers of each pipeline stage, in order (default: balanced as --pipeline-balance says)");
  p.option("--pipeline-balance", &pipeline_balance, "bytes|measured",
           "balance the stages by each layer's weight bytes (default) or by its time, measured once at start-up on "
           "rank 0 (the head's time counts to the last stage)");
  p.option("--dist-timeout", &timeout_s, "S", "seconds a rank waits for the others before failing (default 300)");
}

struct ParallelJob::Impl {
#ifdef EMBER_HAVE_MPI
  std::unique_ptr<dist::MpiCollective> comm;
  std::unique_ptr<dist::MpiCollective> tp_comm;  // both kinds: this stage's tensor group (destroyed first)
  Collective* tp_group() const { return tp_comm.get(); }
#endif
};

ParallelJob::ParallelJob() : impl_(std::make_unique<Impl>()) {}

namespace {

// Per-layer weight bytes of the model file (what a decode step reads).
Result<std::vector<double>> layer_bytes(const std::string& path) {
  auto f = open_model_file(path);
  if (!f) return f.status();
  std::vector<double> bytes;
  for (const auto& [name, t] : (*f)->tensors) {
    if (name.compare(0, 4, "blk.") != 0) continue;
    const int il = std::atoi(name.c_str() + 4);
    if (il < 0 || il > (1 << 16)) continue;
    if (static_cast<int>(bytes.size()) <= il) bytes.resize(static_cast<size_t>(il) + 1, 0.0);
    bytes[static_cast<size_t>(il)] += static_cast<double>(t.nbytes);
  }
  if (bytes.empty()) return Status::errorf("{}: no layer tensors", path);
  return bytes;
}

#ifdef EMBER_HAVE_MPI
// --pipeline-balance measured: rank 0 times each layer of the whole model
// (one thread) and sends the times to every other rank (tag kTagBalance);
// a failed timing is sent as a negative first value, so every rank fails
// with rank 0's reason instead of waiting.
constexpr int kTagBalance = 40;

Result<std::vector<double>> measured_layer_costs(Collective& comm, const std::string& path, int n_layer) {
  std::vector<double> cost(static_cast<size_t>(n_layer), -1.0);
  Status mine = Status::ok();
  if (comm.rank() == 0) {
    auto m = Model::load(path);
    if (!m) {
      mine = m.status();
    } else {
      ThreadPool pool(1);
      auto c = measure_layer_seconds(*m.value(), pool);
      if (!c) mine = c.status();
      else if (static_cast<int>(c->size()) != n_layer) mine = Status::error("layer count mismatch");
      else cost = std::move(c.value());
    }
    if (!mine) cost.assign(static_cast<size_t>(n_layer), -1.0);
    for (int r = 1; r < comm.size(); ++r)
      EMBER_RETURN_IF_ERROR(comm.send(cost.data(), cost.size() * sizeof(double), r, kTagBalance));
    if (!mine) return mine.with_context("--pipeline-balance measured");
  } else {
    EMBER_RETURN_IF_ERROR(comm.recv(cost.data(), cost.size() * sizeof(double), 0, kTagBalance));
    if (n_layer > 0 && !(cost[0] > 0))
      return Status::error("--pipeline-balance measured: rank 0 could not time the layers");
  }
  return cost;
}
#endif

Status parse_stage_layers(const std::string& text, int pp, int n_layer, std::vector<int>* bounds) {
  std::vector<int> counts;
  EMBER_RETURN_IF_ERROR(parse_int_list("--pipeline-layers (layers per stage)", text, 1, n_layer, &counts));
  bounds->assign(1, 0);
  for (int c : counts) bounds->push_back(bounds->back() + c);
  if (static_cast<int>(bounds->size()) != pp + 1 || bounds->back() != n_layer)
    return Status::errorf("--pipeline-layers '{}' must give {} stages that add up to the model's {} layers", text, pp,
                          n_layer);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<ParallelJob>> ParallelJob::start(const ParallelOptions& o, const std::string& model_path) {
  if (o.tp < 1 || o.tp > 64 || o.pp < 1 || o.pp > 64)
    return Status::error("--tensor-parallel-size and --pipeline-parallel-size must be in [1, 64]");
  if (!(o.timeout_s > 0)) return Status::error("--dist-timeout must be positive");
#ifndef EMBER_HAVE_MPI
  (void)model_path;
  return Status::error("this ember was built without MPI: run scripts/setup_mpi.sh, reconfigure and rebuild");
#else
  std::unique_ptr<ParallelJob> job(new ParallelJob());
  ParallelPlan& plan = job->plan_;
  plan.tp = o.tp;
  plan.pp = o.pp;
  auto bytes = layer_bytes(model_path);
  if (!bytes) return bytes.status();
  const int n_layer = static_cast<int>(bytes->size());
  if (o.pipeline_balance != "bytes" && o.pipeline_balance != "measured")
    return Status::errorf("--pipeline-balance must be bytes or measured, got '{}'", o.pipeline_balance);
  const bool measured = plan.pp > 1 && o.pipeline_layers.empty() && o.pipeline_balance == "measured";
  if (plan.pp > 1) {
    if (!o.pipeline_layers.empty()) {
      EMBER_RETURN_IF_ERROR(parse_stage_layers(o.pipeline_layers, plan.pp, n_layer, &plan.stage_layers));
    } else {
      if (plan.pp > n_layer)
        return Status::errorf("{} pipeline stages for a model of {} layers", plan.pp, n_layer);
      plan.stage_layers = balance_stages(bytes.value(), plan.pp);  // measured: replaced once MPI runs
    }
  }
  dist::DistOptions opts;
  opts.timeout_s = o.timeout_s;
  auto comm = dist::MpiCollective::init(nullptr, nullptr, opts);
  if (!comm) return comm.status();
  job->impl_->comm = std::move(comm.value());
  if (Status st = plan.validate(job->impl_->comm->size(), n_layer); !st) return st;
  if (measured) {
    auto cost = measured_layer_costs(*job->impl_->comm, model_path, n_layer);
    if (!cost) return cost.status();
    plan.stage_layers = balance_stages(cost.value(), plan.pp);
    if (Status st = plan.validate(job->impl_->comm->size(), n_layer); !st) return st;
    if (job->impl_->comm->rank() == 0) {
      std::string per_stage;
      for (int s = 0; s < plan.pp; ++s) {
        double t = 0;
        for (int l = plan.stage_layers[s]; l < plan.stage_layers[s + 1]; ++l) t += cost.value()[static_cast<size_t>(l)];
        per_stage += fmt::format("{}{:.3f}", s ? ", " : "", t * 1e3);
      }
      std::fprintf(stderr, "ember: pipeline stages balanced by measured time: %s; ms per stage (one thread, 4 tokens): %s\n",
                   plan.describe().c_str(), per_stage.c_str());
    }
  }
  if (plan.tp > 1 && plan.pp > 1) {  // each stage's ranks: a tensor-parallel group of their own
    const int r = job->impl_->comm->rank();
    auto g = job->impl_->comm->split(r / plan.tp, plan.tp_rank_of(r));
    if (!g) return g.status();
    job->impl_->tp_comm = std::move(g.value());
  }
  // A rank ended by the launcher (another rank died) says what it was doing.
  // `ember serve` takes its signals itself (sigwait): there rank 0 calls
  // note_ending() instead.
  dist::install_job_end_notice(job->rank(), job->impl_->comm->size());
  return job;
#endif
}

int start_parallel_job(const ArgParser& p, const ParallelOptions& o, const std::string& model_flag, SpecMethod spec,
                       std::unique_ptr<ParallelJob>* job) {
  job->reset();
  if (!o.enabled()) return kExitOk;
  // A draft model runs whole on rank 0 (Engine::create over the parallel
  // runner); layerskip's draft is the target's own layers, which the ranks
  // split.
  if (spec == SpecMethod::kLayerSkip)
    return usage_error(p, "--speculative-method layerskip drafts with the target's own layers, which tensor and "
                          "pipeline parallelism split over the ranks; use --speculative-method draft "
                          "--speculative-model PATH (the draft runs whole on rank 0) or ngram");
  const std::string path = resolve_model_path(p, model_flag);
  if (path.empty()) return kExitUsage;
  auto j = ParallelJob::start(o, path);
  if (!j) return usage_error(p, j.status().message());
  *job = std::move(j.value());
  return kExitOk;
}

ParallelJob::~ParallelJob() {
#ifdef EMBER_HAVE_MPI
  if (impl_->comm && leader() && !dist::job_ending()) {
    if (Status st = shutdown_parallel_workers(*impl_->comm); !st)
      std::fprintf(stderr, "ember: ending the parallel job: %s\n", st.message().c_str());
  }
#endif
}

int ParallelJob::rank() const {
#ifdef EMBER_HAVE_MPI
  return impl_->comm ? impl_->comm->rank() : 0;
#else
  return 0;
#endif
}

std::string ParallelJob::describe() const {
#ifdef EMBER_HAVE_MPI
  return fmt::format("{} (rank {} of {} on {}; {})", plan_.describe(), rank(), impl_->comm->size(),
                     impl_->comm->host_name(), impl_->comm->library_version());
#else
  return plan_.describe();
#endif
}

Result<std::unique_ptr<ParallelRunner>> ParallelJob::make_runner(const Model& model, ThreadPool& pool, int max_batch,
                                                                 KvTypes kv_types) {
#ifdef EMBER_HAVE_MPI
  auto local = std::make_unique<CpuModelRunner>(model, pool, max_batch, kv_types);
  return ParallelRunner::create(std::move(local), *impl_->comm, plan_, impl_->tp_group());
#else
  return Status::error("built without MPI");
#endif
}

int ParallelJob::run_worker(Model& model, int threads, const char* command) {
#ifdef EMBER_HAVE_MPI
  ThreadPool pool(threads);
  Status st = run_parallel_worker(model, pool, *impl_->comm, plan_, impl_->tp_group());
  if (!st) {
    std::fprintf(stderr, "ember %s: rank %d: %s\n", command, rank(), st.message().c_str());
    dist::abort_job(kExitFailure);
  }
  return kExitOk;
#else
  (void)model;
  (void)threads;
  (void)command;
  return kExitFailure;
#endif
}

void ParallelJob::note_ending() {
#ifdef EMBER_HAVE_MPI
  dist::note_job_ending();
#endif
}

void ParallelJob::abort(int code) {
#ifdef EMBER_HAVE_MPI
  dist::abort_job(code);
#else
  std::_Exit(code);
#endif
}

}  // namespace ember::cli
