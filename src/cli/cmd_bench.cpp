// `ember bench`: prompt-processing (pp) and text-generation (tg) speed, like
// llama-bench: pp = one prefill of P tokens into an empty cache; tg = N
// single-token decode steps from an empty cache. Median and spread over
// repetitions after one warm-up; decode also reports the bytes of weights
// read per token against the measured memory bandwidth.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/act_options.h"
#include "cli/common.h"
#include "cli/kv_options.h"
#include "cli/parallel_options.h"
#include "cli/moe_options.h"
#include "engine/kv/kv_pool.h"
#include "cli/device_options.h"
#include "cli/spec_options.h"
#include "cli/progress.h"
#include "core/cpu_features.h"
#include "core/cpu_time.h"
#include "engine/generator.h"
#include "bench/throughput_bench.h"

namespace ember::cli {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Summary {
  double median = 0, lo = 0, hi = 0, stdev = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.lo = v.front();
  s.hi = v.back();
  double mean = 0;
  for (double x : v) mean += x;
  mean /= n;
  for (double x : v) s.stdev += (x - mean) * (x - mean);
  s.stdev = n > 1 ? std::sqrt(s.stdev / (n - 1)) : 0;
  return s;
}

// Read bandwidth (GB/s) over a buffer much larger than the caches, all threads.
double measure_read_bandwidth(ThreadPool& pool) {
  const size_t n = (512u << 20) / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  std::vector<double> sums(pool.size());
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = now_s();
    pool.run([&](int ith, int nth) {
      size_t b = n * ith / nth, e = n * (ith + 1) / nth;
      float a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
      for (size_t i = b; i + 8 <= e; i += 8) {
        a0 += buf[i]; a1 += buf[i + 1]; a2 += buf[i + 2]; a3 += buf[i + 3];
        a4 += buf[i + 4]; a5 += buf[i + 5]; a6 += buf[i + 6]; a7 += buf[i + 7];
      }
      sums[ith] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    });
    double dt = now_s() - t0;
    best = std::max(best, n * sizeof(float) / dt / 1e9);
  }
  return best;
}

// Bytes of weights a single decode step reads (every matrix once, the
// active share of MoE experts; the embedding matrix only counts if it
// doubles as the output head).
size_t decode_weight_bytes(const Model& m) { return static_cast<size_t>(m.decode_reads().bytes); }

}  // namespace

namespace {

// JSONL dataset for `bench throughput`: one request per line,
// {"prompt": "text", "output_len": N} (prompt tokenized with the model's
// tokenizer, BOS as the model wants) or {"prompt_token_ids": [...], "output_len": N}.
Result<std::vector<RequestParams>> load_dataset(const std::string& path, const Tokenizer& tok, int default_out) {
  std::ifstream f(path);
  if (!f) return Status::errorf("cannot read dataset '{}'", path);
  std::vector<RequestParams> out;
  std::string line;
  for (int ln = 1; std::getline(f, line); ++ln) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Status::errorf("{}:{}: not a JSON object", path, ln);
    RequestParams r;
    if (auto p = j.find("prompt"); p != j.end() && p->is_string()) {
      r.prompt = tok.encode(p->get<std::string>());
    } else if (auto ids = j.find("prompt_token_ids"); ids != j.end() && ids->is_array()) {
      for (const auto& t : *ids) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
          return Status::errorf("{}:{}: 'prompt_token_ids' must hold token ids in [0, {})", path, ln, tok.n_vocab());
        r.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    } else {
      return Status::errorf("{}:{}: needs a string 'prompt' or a 'prompt_token_ids' array", path, ln);
    }
    if (r.prompt.empty()) return Status::errorf("{}:{}: empty prompt", path, ln);
    r.max_tokens = default_out;
    if (auto o = j.find("output_len"); o != j.end()) {
      if (!o->is_number_integer() || o->get<int64_t>() < 1 || o->get<int64_t>() > 1000000)
        return Status::errorf("{}:{}: 'output_len' must be an integer in [1, 1000000]", path, ln);
      r.max_tokens = static_cast<int>(o->get<int64_t>());
    }
    r.sampling.temperature = 0.f;
    out.push_back(std::move(r));
  }
  if (out.empty()) return Status::errorf("dataset '{}' holds no requests", path);
  return out;
}

// `ember bench throughput`: N requests through the serving engine at once.
int bench_throughput(int argc, char** argv, int first) {
  ArgParser p("bench throughput",
              "ember bench throughput [-m MODEL] [--num-prompts 16] [--input-len 64] [--output-len 64] "
              "[--random-range-ratio R] [--dataset FILE.jsonl] [--max-num-seqs 64] [--max-num-batched-tokens 512] "
              "[--kv-cache-memory BYTES] [--sequential] [-t T]");
  std::string model_path, dataset;
  ThroughputOptions o;
  int threads = default_thread_count();
  std::string kv_mem, batching = "continuous";
  float ratio = 0.f;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.option("--num-prompts", &o.num_prompts, "N", "requests");
  p.option("--input-len", &o.input_len, "N", "prompt tokens per request (random ids)");
  p.option("--output-len", &o.output_len, "N", "generated tokens per request (default for dataset lines too)");
  p.option("--random-range-ratio", &ratio, "R", "lengths uniform in [L*(1-R), L*(1+R)] (default 0: fixed)");
  p.option("--seed", &o.seed, "N", "seed of the random prompts and lengths (default 1)");
  p.option("--dataset", &dataset, "FILE", "JSONL requests: {\"prompt\" or \"prompt_token_ids\", \"output_len\"}");
  p.option("--max-num-seqs", &o.engine.max_num_seqs, "N", "sequences per engine step");
  p.option("--max-num-batched-tokens", &o.engine.max_num_batched_tokens, "N", "tokens per engine step");
  p.option("--kv-cache-memory", &kv_mem, "BYTES", "KV cache budget, e.g. 512M, 2G (default 256M)");
  p.flag("--sequential", &o.sequential, "one request at a time (baseline)");
  p.option("--batching", &batching, "POLICY", "continuous (default), dynamic or static (see ember serve --batching)");
  p.option("-t,--threads", &threads, "N", "threads");
  SpecOptions spec_opts;
  spec_opts.add_to(p);
  KvOptions kv_opts;
  kv_opts.add_to(p);
  ParallelOptions par_opts;
  par_opts.add_to(p);
  MoeOptions moe_opts;
  moe_opts.add_to(p);
  LoadFlags load_flags;
  load_flags.add_to(p);
  DeviceOptions dev;
  dev.add_to(p);
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (Status st = dev.resolve(); !st) return usage_error(p, st.message());
  load_flags.file_layout = dev.file_layout();
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1) return usage_error(p, "counts must be >= 1");
  if (!(ratio >= 0.f && ratio < 1.f)) return usage_error(p, "--random-range-ratio must be in [0, 1)");
  o.range_ratio = ratio;
  auto policy = parse_batching_policy(batching);
  if (!policy) return usage_error(p, "--batching: " + policy.status().message());
  o.engine.batching = *policy;
  if (o.engine.max_num_seqs < 1 || o.engine.max_num_batched_tokens < 1) return usage_error(p, "limits must be >= 1");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (!kv_mem.empty() && (!parse_bytes(kv_mem, &o.engine.kv_cache_bytes) || o.engine.kv_cache_bytes == 0))
    return usage_error(p, fmt::format("--kv-cache-memory expects a size such as 512M or 2G, got '{}'", kv_mem));
  auto spec = spec_opts.to_config();
  if (!spec) return usage_error(p, spec.status().message());
  o.engine.spec = *spec;
  std::unique_ptr<ParallelJob> job;  // tensor / pipeline parallelism (under mpirun)
  if (int rc = start_parallel_job(p, par_opts, model_path, o.engine.spec.method, &job)) return rc;
  LoadedModel lm;
  if (!load_model_and_tokenizer(p, model_path, &lm, job ? job->shard() : ModelShard{}, load_flags)) {
    if (job) job->abort(kExitUsage);
    return kExitUsage;
  }
  if (Status st = moe_opts.apply(lm.model.get()); !st) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, st.message());
  }
  if (job && !job->leader()) return job->run_worker(*lm.model, threads, "bench throughput");
  std::unique_ptr<Model> draft_model;  // --speculative-method draft / layerskip
  if (Status st = spec_opts.load_draft(*lm.model, &draft_model, &o.engine.spec); !st)
    return usage_error(p, st.message());
  auto kv_types = kv_opts.to_types(lm.model->config());
  if (!kv_types) return usage_error(p, kv_types.status().message());
  o.engine.kv_types = *kv_types;
  if (Status st = dev.check(*lm.model, *kv_types, o.engine.spec.method != SpecMethod::kNone, job != nullptr); !st)
    return usage_error(p, st.message());
  o.engine.backend = dev.factory();
  if (!dataset.empty()) {
    auto reqs = load_dataset(dataset, *lm.tokenizer, o.output_len);
    if (!reqs) return usage_error(p, reqs.status().message());
    o.requests = std::move(reqs.value());
  }
  ThreadPool pool(threads);
  if (job)
    o.make_runner = [&](const EngineConfig& ec) -> Result<std::unique_ptr<ModelRunner>> {
      auto r = job->make_runner(*lm.model, pool, ec.max_num_batched_tokens, ec.kv_types);
      if (!r) return r.status();
      return std::unique_ptr<ModelRunner>(std::move(r.value()));
    };
  ProgressLine progress;
  int last_done = -1;
  o.progress = [&](int done, int total, double elapsed) {
    if (done == last_done && !progress.is_tty()) return;  // plain logs: only when a request finished
    last_done = done;
    progress.update(done, total, elapsed, "requests finished");
  };
  auto r = run_throughput_bench(*lm.model, pool, o);
  progress.clear();
  if (!r) {
    std::fprintf(stderr, "ember bench throughput: %s\n", r.status().message().c_str());
    return kExitFailure;
  }
  std::printf("%s\n", r->summary().c_str());
  std::printf("decode steps: %s\n", r->decode_steps.describe().c_str());
  std::printf("%d requests, %lld prompt + %lld output tokens; every request had its first token after %.2f s\n",
              r->num_requests, static_cast<long long>(r->prompt_tokens), static_cast<long long>(r->output_tokens),
              r->first_tokens_seconds);
  const EngineStats& st = r->stats;
  const std::string tails =
      st.kv_tail_reserve_bytes > 0
          ? fmt::format(" ({} in pages + {} of the {} tails reserve of {} spread over the pool; tails peaked at {})",
                        st.kv_bytes_per_token, st.kv_tail_bytes_per_token(), kv_type_name(kv_types->k),
                        human_bytes(static_cast<double>(st.kv_tail_reserve_bytes)),
                        human_bytes(static_cast<double>(st.kv_tail_peak_bytes)))
          : "";
  std::printf("KV cache %s: %lld bytes per token%s, %lld tokens in the pool (%s)\n", kv_types_name(*kv_types).c_str(),
              static_cast<long long>(st.kv_bytes_per_token_with_tails()), tails.c_str(),
              static_cast<long long>(st.kv_tokens_total), human_bytes(static_cast<double>(o.engine.kv_cache_bytes)).c_str());
  return kExitOk;
}

}  // namespace

namespace {

struct BenchRow {
  std::string test;
  int threads, n_prompt, n_gen, batch;
  std::vector<double> tps;
  double cpu_seconds = 0;  // process CPU time of the measured repetitions (warm-up excluded)
  double tokens = 0;       // tokens they processed (prompt tokens for pp, generated for tg)
  double cpu_per_1k() const { return cpu_seconds_per_1k(cpu_seconds, tokens); }
};

// Batched latency rows run through the serving engine: `batch` sequences
// together, prefill (n_gen == 0: tokens/s until every prompt is computed) or
// decode (n_prompt == 0: tokens/s of the pure decode steps).
// One batched row's measurement: tokens/s of its phase (all prompts, or the
// pure-decode steps) and the process CPU time that phase took.
struct EngineRowResult {
  double tps = 0;
  double cpu_seconds = 0;
  double tokens = 0;
};

Result<EngineRowResult> engine_row_tps(const Model& m, ThreadPool& pool, int batch, int n_prompt, int n_gen,
                                       uint64_t seed, KvTypes kv_types, ParallelJob* job,
                                       const BackendFactory& backend) {
  const ModelConfig& c = m.config();
  ThroughputOptions o;
  o.num_prompts = batch;
  o.input_len = std::max(1, n_prompt);
  o.output_len = std::max(1, n_gen);
  o.seed = seed;
  o.engine.max_num_seqs = batch;
  o.engine.kv_types = kv_types;
  o.engine.backend = backend;
  const KvSpec spec = kv_spec_from_config(c, kv_types);
  const size_t per_token = kv_bytes_per_token(spec);
  // Room for every sequence, plus the dtype's tails reserve (0 for per-row dtypes).
  // (A pipeline stage's ranks hold other layers than rank 0: room for the largest.)
  const size_t stages = job ? static_cast<size_t>(job->plan().pp) : 1;
  o.engine.kv_cache_bytes = per_token * stages * static_cast<size_t>(batch) * (o.input_len + o.output_len + 32) * 5 / 4 +
                            (size_t{16} << 20) +
                            kv_tail_reserve_bytes(spec, KvLayout::from_spec(spec, o.engine.sliding_window_release),
                                                  {batch, o.engine.max_num_batched_tokens});
  if (job)
    o.make_runner = [&](const EngineConfig& ec) -> Result<std::unique_ptr<ModelRunner>> {
      auto r = job->make_runner(m, pool, ec.max_num_batched_tokens, ec.kv_types);
      if (!r) return r.status();
      return std::unique_ptr<ModelRunner>(std::move(r.value()));
    };
  auto r = run_throughput_bench(m, pool, o);
  if (!r) return r.status();
  if (n_gen == 0)
    return EngineRowResult{static_cast<double>(batch) * n_prompt / r->first_tokens_seconds,
                           r->first_tokens_cpu_seconds, static_cast<double>(batch) * n_prompt};
  return EngineRowResult{r->decode_tokens_per_s, r->decode_cpu_seconds, static_cast<double>(r->decode_tokens)};
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  if (first < argc && std::string(argv[first]) == "latency") ++first;  // the default mode's explicit name
  if (first < argc && std::string(argv[first]) == "throughput") return bench_throughput(argc, argv, first + 1);
  if (first < argc && std::string(argv[first]) == "serve") return cmd_bench_serve(argc, argv, first + 1);
  ArgParser p("bench", "ember bench [latency|throughput|serve] [-m MODEL] [-p 512[,1024..]] [-n 128[,..]] "
                       "[-b 1[,8..]] [-d DEPTH] [-r 3] [-t T[,..]] [--kv-cache-dtype T] [--json FILE]");
  std::string model_path, p_arg = "512", n_arg = "128", t_arg = std::to_string(default_thread_count()), json_path;
  std::string b_arg = "1";
  int reps = 3, depth = 0;
  bool no_bw = false;
  KvOptions kv_opts;
  ParallelOptions par_opts;
  MoeOptions moe_opts;
  ActOptions act_opts;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.option("-p,--n-prompt", &p_arg, "N[,N..]", "prompt tokens for the pp tests (0: skip)");
  p.option("-n,--n-gen", &n_arg, "N[,N..]", "generated tokens for the tg tests (0: skip)");
  p.option("-r,--repetitions", &reps, "N", "repetitions of each test (after one warm-up)");
  p.option("-t,--threads", &t_arg, "N[,N..]", "thread counts");
  p.option("-b,--batch-size", &b_arg, "N[,N..]",
           "sequences run together (> 1: through the serving engine, aggregate tokens/s)");
  p.option("--json", &json_path, "FILE", "also write the results as JSON");
  p.flag("--no-bandwidth", &no_bw, "skip the memory-bandwidth measurement");
  p.option("-d,--n-depth", &depth, "D",
           "tg tests decode after D context tokens (prefilled untimed; with -b N, per sequence)");
  kv_opts.add_to(p);
  par_opts.add_to(p);
  moe_opts.add_to(p);
  LoadFlags load_flags;
  load_flags.add_to(p);
  act_opts.add_to(p);
  DeviceOptions dev;
  dev.add_to(p);
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (Status st = dev.resolve(); !st) return usage_error(p, st.message());
  std::vector<int> prompts, gens, thread_counts;
  if (Status st = parse_int_list("-p", p_arg, 0, 1 << 20, &prompts); !st) return usage_error(p, st.message());
  if (Status st = parse_int_list("-n", n_arg, 0, 1 << 20, &gens); !st) return usage_error(p, st.message());
  if (Status st = parse_int_list("-t", t_arg, 1, 512, &thread_counts); !st) return usage_error(p, st.message());
  std::vector<int> batches;
  if (Status st = parse_int_list("-b", b_arg, 1, 4096, &batches); !st) return usage_error(p, st.message());
  const int max_p = *std::max_element(prompts.begin(), prompts.end());
  const int max_n = *std::max_element(gens.begin(), gens.end());
  if (max_p == 0 && max_n == 0) return usage_error(p, "nothing to measure");
  if (reps < 1 || reps > 1000) return usage_error(p, "-r must be in [1, 1000]");
  std::string path = resolve_model_path(p, model_path);
  if (path.empty()) return kExitUsage;
  // Tensor / pipeline parallelism (under mpirun): every row through the
  // engine over rank 0's parallel runner; the other ranks only execute.
  std::unique_ptr<ParallelJob> job;
  if (par_opts.enabled() && thread_counts.size() != 1)
    return usage_error(p, "one thread count (-t N) per rank with tensor or pipeline parallelism");
  if (int rc = start_parallel_job(p, par_opts, path, SpecMethod::kNone, &job)) return rc;
  auto model = load_model(path, job ? job->shard() : ModelShard{}, load_flags);
  if (!model) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, model.status().message());
  }
  if (!dev.file_layout()) prepare_for_cpu(**model);
  if (Status st = act_opts.apply(model->get()); !st) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, st.message());
  }
  if (Status st = moe_opts.apply(model->get()); !st) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, st.message());
  }
  if (job && !job->leader()) return job->run_worker(**model, thread_counts[0], "bench");
  const Model& m = **model;
  const ModelConfig& c = m.config();
  if (depth < 0) return usage_error(p, "-d must be >= 0");
  if (std::max(max_p, depth + max_n) >= c.n_ctx_train)
    return usage_error(p, fmt::format("tests longer than the model's context ({})", c.n_ctx_train));
  auto kv_types = kv_opts.to_types(c);
  if (!kv_types) return usage_error(p, kv_types.status().message());
  if (Status st = dev.check(m, *kv_types, false, job != nullptr); !st) return usage_error(p, st.message());
  // On a device every row runs through the serving engine (its paged KV
  // pool lives in the device's memory); the backends share the weights.
  const BackendFactory backend = dev.factory();
  const bool engine_only = job || dev.cuda();

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, c.n_vocab - 1);
  std::printf("model: %s (%s, %.1f MiB, %.1f M params)\n", path.c_str(), c.arch.c_str(),
              m.weight_bytes() / 1048576.0, m.n_params() / 1e6);
  std::printf("cpu: %s; kernels: %s; KV cache %s (%lld bytes per token)%s\n", cpu_features().brand.c_str(),
              isa_name(active_isa()), kv_types_name(*kv_types).c_str(),
              static_cast<long long>(kv_bytes_per_token(kv_spec_from_config(c, *kv_types))),
              depth > 0 ? fmt::format("; tg at depth {}", depth).c_str() : "");
  if (job) std::printf("parallel: %s\n", job->describe().c_str());
  if (dev.cuda()) std::printf("device: cuda (every row through the engine)\n");
  if (!m.activation_thresholds().empty())
    std::printf("activation sparsity: thresholds on %zu block inputs; column copies %.1f MiB (--act-sparsity)\n",
                m.activation_thresholds().size(), m.activation_column_bytes() / 1048576.0);
  std::printf("%-8s %8s %14s %10s %-18s %7s %9s\n", "test", "tokens", "tok/s median", "spread", "(min - max)", "threads",
              "cpu-s/1k");

  std::vector<BenchRow> rows;
  const double bytes = static_cast<double>(decode_weight_bytes(m));
  // Progress: one unit per repetition (warm-ups included).
  long n_tests = 0;
  for (int np : prompts) n_tests += np > 0;
  for (int ng : gens) n_tests += ng > 0;
  const long units = n_tests * static_cast<long>(thread_counts.size() * batches.size()) * (reps + 1);
  long units_done = 0;
  const double t_start = now_s();
  ProgressLine progress;
  auto tick = [&](const std::string& test, int threads, int r) {
    ++units_done;
    progress.update(units_done, units, now_s() - t_start,
                    fmt::format("{} t={} {}", test, threads,
                                r == 0 ? std::string("warm-up") : fmt::format("rep {}/{}", r, reps)));
  };
  auto report = [&](const BenchRow& r) {
    progress.clear();
    Summary s = summarize(r.tps);
    std::printf("%-8s %8d %14.2f %9.2f%% (%.2f - %.2f) %7d %9.3f%s\n", r.test.c_str(), r.n_prompt + r.n_gen, s.median,
                100.0 * s.stdev / s.median, s.lo, s.hi, r.threads, r.cpu_per_1k(),
                r.batch > 1 ? fmt::format("   batch {} (aggregate)", r.batch).c_str() : "");
    std::fflush(stdout);
  };
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    Generator gen(m, pool, std::max(max_p, depth + max_n) + 1, std::max(1, std::min(std::max(max_p, depth), 512)),
                  *kv_types);
    // Batches > 1: through the serving engine.
    for (int b : batches) {
      if (b == 1 && !engine_only) continue;  // one sequence: the plain generator (below), unless parallel or a device
      for (int pass = 0; pass < 2; ++pass)
        for (int len : pass == 0 ? prompts : gens) {
          if (len <= 0) continue;
          const int np = pass == 0 ? len : 0, ng = pass == 0 ? 0 : len;
          const std::string at_depth = pass == 1 && depth > 0 ? "@d" + std::to_string(depth) : "";
          BenchRow row{(pass == 0 ? "pp" : "tg") + std::to_string(len) + at_depth, threads, np, ng, b, {}};
          for (int r = 0; r <= reps; ++r) {
            // tg rows decode after -d context tokens per sequence (llama-batched-bench's -npp).
            auto res = engine_row_tps(m, pool, b, pass == 0 ? np : depth, ng, 1000 + r, *kv_types, job.get(), backend);
            if (!res) {
              std::fprintf(stderr, "ember bench: %s\n", res.status().message().c_str());
              return kExitFailure;
            }
            if (r > 0) {
              // CPU time of the row's phase only (the prompts, or the decode steps).
              row.tps.push_back(res->tps);
              row.cpu_seconds += res->cpu_seconds;
              row.tokens += res->tokens;
            }
            tick(row.test + " b" + std::to_string(b), threads, r);
          }
          report(row);
          if (pass == 1 && dev.cuda())
            std::printf("  decode reads %.1f MiB of weights per token: %.2f GB/s at the median (x%d sequences)\n",
                        bytes / 1048576.0, bytes * summarize(row.tps).median / b / 1e9, b);
          rows.push_back(std::move(row));
        }
    }
    if (engine_only || std::find(batches.begin(), batches.end(), 1) == batches.end()) continue;
    for (int np : prompts) {
      if (np <= 0) continue;
      BenchRow row{"pp" + std::to_string(np), threads, np, 0, 1, {}};
      std::vector<int32_t> prompt(np);
      for (int r = 0; r <= reps; ++r) {  // r == 0: warm-up
        for (auto& t : prompt) t = tok(rng);
        const double t0 = now_s(), c0 = process_cpu_seconds();
        if (Status st = gen.prefill(prompt, 0, nullptr); !st) {
          std::fprintf(stderr, "ember bench: %s\n", st.message().c_str());
          return kExitFailure;
        }
        if (r > 0) {
          row.tps.push_back(np / (now_s() - t0));
          row.cpu_seconds += process_cpu_seconds() - c0;
          row.tokens += np;
        }
        tick(row.test, threads, r);
      }
      report(row);
      rows.push_back(std::move(row));
    }
    for (int ng : gens) {
      if (ng <= 0) continue;
      BenchRow row{"tg" + std::to_string(ng) + (depth > 0 ? "@d" + std::to_string(depth) : ""), threads, 0, ng, 1, {}};
      std::vector<float> logits(c.n_vocab);
      if (depth > 0) {  // the context the decode steps attend to (positions 0..depth-1)
        std::vector<int32_t> ctx(depth);
        for (auto& t : ctx) t = tok(rng);
        if (Status st = gen.prefill(ctx, 0, nullptr); !st) {
          std::fprintf(stderr, "ember bench: %s\n", st.message().c_str());
          return kExitFailure;
        }
      }
      for (int r = 0; r <= reps; ++r) {
        int32_t t = tok(rng);
        const double t0 = now_s(), c0 = process_cpu_seconds();
        for (int i = 0; i < ng; ++i) {
          if (Status st = gen.decode_one(t, depth + i, logits.data()); !st) {
            std::fprintf(stderr, "ember bench: %s\n", st.message().c_str());
            return kExitFailure;
          }
          t = tok(rng);
        }
        if (r > 0) {
          row.tps.push_back(ng / (now_s() - t0));
          row.cpu_seconds += process_cpu_seconds() - c0;
          row.tokens += ng;
        }
        tick(row.test, threads, r);
      }
      report(row);
      const double med = summarize(row.tps).median;
      std::printf("  decode reads %.1f MiB of weights per token: %.2f GB/s at the median", bytes / 1048576.0,
                  bytes * med / 1e9);
      if (!no_bw) {
        const double bw = measure_read_bandwidth(pool);
        std::printf(" = %.0f%% of the measured read bandwidth (%.2f GB/s, %d threads)", 100.0 * bytes * med / 1e9 / bw,
                    bw, threads);
      }
      std::printf("\n");
      rows.push_back(std::move(row));
    }
  }
  if (!json_path.empty()) {
    nlohmann::json out = {{"model", path}, {"arch", c.arch}, {"weight_bytes", m.weight_bytes()},
                          {"cpu", cpu_features().brand}, {"kernels", isa_name(active_isa())}, {"engine", "ember"}};
    nlohmann::json results = nlohmann::json::array();
    for (const BenchRow& r : rows) {
      const Summary s = summarize(r.tps);
      results.push_back({{"test", r.test}, {"threads", r.threads}, {"n_prompt", r.n_prompt}, {"n_gen", r.n_gen},
                         {"batch", r.batch},
                         {"median_tps", s.median}, {"stdev_tps", s.stdev}, {"min_tps", s.lo}, {"max_tps", s.hi},
                         {"samples_tps", r.tps}, {"cpu_seconds_per_1k_tokens", r.cpu_per_1k()}});
    }
    out["results"] = results;
    std::ofstream f(json_path);
    f << out.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "ember bench: cannot write '%s'\n", json_path.c_str());
      return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace ember::cli
