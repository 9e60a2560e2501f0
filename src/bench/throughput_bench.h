// Offline throughput benchmark (like `vllm bench throughput`): N random
// prompts of input_len tokens (or lengths uniform in [L(1-R), L(1+R)], or
// given requests) submitted at once, each generating exactly its output
// length (no stop tokens), run to completion on an Engine.
// `ember bench throughput` prints the result; the engine tests use it too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace ember {

struct ThroughputOptions {
  int num_prompts = 16;
  int input_len = 64;
  int output_len = 64;
  double range_ratio = 0;   // input/output lengths uniform in [L*(1-R), L*(1+R)]
  uint64_t seed = 1;        // prompt tokens and lengths
  // Explicit requests (e.g. tokenized prompts from a dataset); when set,
  // num_prompts / input_len / output_len / range_ratio are not used.
  std::vector<RequestParams> requests;
  EngineConfig engine;      // block size, KV budget, batch limits
  // Called after every engine step: requests finished, total, seconds so far.
  std::function<void(int, int, double)> progress;
  bool sequential = false;  // one request at a time (baseline)
  // Another model runner than the CPU one over `model` (tensor / pipeline
  // parallelism: rank 0's ParallelRunner over its shard of the model),
  // made once per run; null: the CPU runner. A draft model runs in this
  // process (Engine::create(runner, cfg, model, pool)).
  std::function<Result<std::unique_ptr<ModelRunner>>(const EngineConfig&)> make_runner;
};

// The mean breakdown of a set of engine steps (StepOutput::times), in
// seconds per step: where a step's wall time went, and the model's time
// (the device's where the backend measures it, else the forward pass less
// its copies) against the CPU-side overhead around it (the rest of the
// step: scheduler, step inputs, copies, sampler, other host work).
// schedule + inputs + forward + sample + other() == step.
struct StepBreakdown {
  int64_t steps = 0;
  double seqs = 0;  // sequences per step
  double step = 0;
  double schedule = 0, inputs = 0, forward = 0, sample = 0;
  double copies = 0;  // part of inputs + forward (host <-> backend memory)
  double model = 0;   // part of inputs + forward
  bool device_measured = false;
  void add(const StepOutput& out);  // one step (call, then finalize)
  void finalize();                  // sums -> means
  double other() const { return step - schedule - inputs - forward - sample; }
  double cpu_overhead() const { return step - model; }
  std::string describe() const;  // one line, in milliseconds
};

struct ThroughputResult {
  double seconds = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double requests_per_s = 0;
  double tokens_per_s = 0;         // prompt + output
  double output_tokens_per_s = 0;
  double decode_tokens_per_s = 0;  // over pure-decode steps only
  double mean_kv_waste = 0;        // allocated-but-unfilled KV slots / allocated, mean over decode steps
  double first_tokens_seconds = 0; // until every request had its first token (all prompts computed)
  int num_requests = 0;
  double cpu_seconds = 0;                     // process CPU time (all threads) of the run
  double cpu_seconds_per_1k_output_tokens = 0;
  double first_tokens_cpu_seconds = 0;  // process CPU time until every request had its first token
  double decode_cpu_seconds = 0;        // process CPU time of the pure-decode steps
  int64_t decode_tokens = 0;            // tokens those steps produced
  // Mixture-of-Experts models: distinct experts one MoE layer read per
  // pure-decode step, averaged over those steps and layers (0 without MoE).
  double decode_experts_per_layer_step = 0;
  StepBreakdown decode_steps;  // the pure-decode steps' mean breakdown
  EngineStats stats;
  // One-line summary.
  std::string summary() const;
};

Result<ThroughputResult> run_throughput_bench(const Model& model, ThreadPool& pool, const ThroughputOptions& opt);

}  // namespace ember
