// Offline throughput benchmark; see throughput_bench.h.
#include "bench/throughput_bench.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "core/cpu_time.h"
#include "engine/cpu_model_runner.h"

namespace ember {

std::string ThroughputResult::summary() const {
  return fmt::format(
      "{:.2f} s, {:.2f} requests/s, {:.1f} tokens/s ({:.1f} output tokens/s, decode steps {:.1f} tokens/s), "
      "{} steps, {:.1f} tokens/step, {} preemptions, KV waste {:.1f}% (mean over decode steps), "
      "{:.2f} CPU-s per 1k output tokens",
      seconds, requests_per_s, tokens_per_s, output_tokens_per_s, decode_tokens_per_s, stats.n_steps,
      stats.n_steps > 0 ? static_cast<double>(stats.n_computed_tokens) / stats.n_steps : 0.0, stats.n_preemptions,
      100.0 * mean_kv_waste, cpu_seconds_per_1k_output_tokens) +
         (stats.spec.n_verifications > 0
              ? fmt::format("; speculative: {} drafts, {} accepted ({:.1f}%), mean accepted length {:.2f}",
                            stats.spec.n_draft_tokens, stats.spec.n_accepted_tokens,
                            100.0 * stats.spec.acceptance_rate(), stats.spec.mean_accepted_length())
              : std::string()) +
         (decode_experts_per_layer_step > 0
              ? fmt::format("; MoE: {:.2f} distinct experts read per layer and decode step",
                            decode_experts_per_layer_step)
              : std::string());
}

void StepBreakdown::add(const StepOutput& out) {
  const StepTimes& t = out.times;
  ++steps;
  seqs += out.n_seqs;
  step += out.seconds;
  schedule += t.schedule;
  inputs += t.inputs;
  forward += t.forward;
  sample += t.sample;
  copies += t.copies;
  model += std::min(t.model(), t.inputs + t.forward);
  device_measured = device_measured || t.device_measured;
}

void StepBreakdown::finalize() {
  if (steps == 0) return;
  const double n = static_cast<double>(steps);
  for (double* v : {&seqs, &step, &schedule, &inputs, &forward, &sample, &copies, &model}) *v /= n;
}

std::string StepBreakdown::describe() const {
  if (steps == 0) return "no pure-decode steps";
  const double ms = 1e3;
  return fmt::format(
      "{} steps of {:.1f} sequences, {:.3f} ms a step = scheduler {:.3f} + step inputs {:.3f} + forward {:.3f} + "
      "sampler {:.3f} + other {:.3f} ms; host<->device copies {:.3f} ms; model time {:.3f} ms ({}); CPU-side "
      "overhead {:.3f} ms a step ({:.1f}% of the step)",
      steps, seqs, step * ms, schedule * ms, inputs * ms, forward * ms, sample * ms, std::max(0.0, other()) * ms,
      copies * ms, model * ms, device_measured ? "device time" : "the forward pass on the host", cpu_overhead() * ms,
      step > 0 ? 100.0 * cpu_overhead() / step : 0.0);
}

namespace {

// The expert counters of the engine's runner (the CPU runner counts them;
// zero for another runner or a model without MoE layers).
MoeStats moe_stats_of(const Engine& e) {
  const auto* cpu = dynamic_cast<const CpuModelRunner*>(&e.runner());
  return cpu ? cpu->moe_stats() : MoeStats{};
}

}  // namespace

Result<ThroughputResult> run_throughput_bench(const Model& model, ThreadPool& pool, const ThroughputOptions& opt) {
  const bool given = !opt.requests.empty();
  if (!given && (opt.num_prompts < 1 || opt.input_len < 1 || opt.output_len < 1))
    return Status::error("throughput bench: num_prompts, input_len and output_len must be >= 1");
  if (!(opt.range_ratio >= 0 && opt.range_ratio < 1))
    return Status::errorf("throughput bench: range ratio must be in [0, 1), got {}", opt.range_ratio);
  auto er = [&]() -> Result<std::unique_ptr<Engine>> {
    if (!opt.make_runner) return Engine::create(model, pool, opt.engine);
    auto runner = opt.make_runner(opt.engine);
    if (!runner) return runner.status();
    return Engine::create(std::move(runner.value()), opt.engine, model, pool);
  }();
  if (!er) return er.status();
  Engine& e = *er.value();
  const int V = model.config().n_vocab;
  std::mt19937_64 rng(opt.seed);
  auto length = [&](int l) {
    const int lo = std::max(1, static_cast<int>(l * (1 - opt.range_ratio)));
    const int hi = std::max(lo, static_cast<int>(l * (1 + opt.range_ratio)));
    return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::vector<RequestParams> reqs = opt.requests;
  if (!given) {
    reqs.resize(opt.num_prompts);
    for (auto& r : reqs) {
      // Random ids, avoiding the first few (usually control tokens).
      const int lo = std::min(V - 1, 4);
      const int n_in = length(opt.input_len);
      for (int i = 0; i < n_in; ++i) r.prompt.push_back(lo + static_cast<int32_t>(rng() % (V - lo)));
      r.sampling.temperature = 0.f;
      r.max_tokens = length(opt.output_len);
    }
  }
  for (const auto& r : reqs)
    if (static_cast<int64_t>(r.prompt.size()) + r.max_tokens > e.max_seq_len())
      return Status::errorf("throughput bench: input + output of {} tokens exceed the maximum sequence length {}",
                            static_cast<int64_t>(r.prompt.size()) + r.max_tokens, e.max_seq_len());
  ThroughputResult res;
  double decode_s = 0;
  int64_t decode_tokens = 0;
  double waste_sum = 0;
  int64_t waste_steps = 0;
  MoeStats decode_experts;  // over the pure-decode steps
  std::vector<char> started(reqs.size(), 0);
  size_t n_started = 0;
  int n_finished = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  auto drain = [&]() -> Status {
    while (e.has_unfinished()) {
      const double step_cpu0 = process_cpu_seconds();
      const MoeStats experts0 = moe_stats_of(e);
      auto out = e.step();
      const double step_cpu = process_cpu_seconds() - step_cpu0;
      if (!out) return out.status();
      res.output_tokens += static_cast<int64_t>(out->tokens.size());
      n_finished += static_cast<int>(out->finished.size());
      if (opt.progress)
        opt.progress(n_finished, static_cast<int>(reqs.size()),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (const TokenEvent& t : out->tokens) {
        const size_t i = std::stoul(t.id.substr(6));  // "bench-<i>"
        if (i < started.size() && !started[i]) {
          started[i] = 1;
          if (++n_started == started.size()) {
            res.first_tokens_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            res.first_tokens_cpu_seconds = process_cpu_seconds() - cpu0;
          }
        }
      }
      // Pure decode steps: one known token per sequence (+ its drafts).
      if (out->n_seqs > 0 && out->n_batched_tokens == out->n_seqs + out->n_spec_tokens) {
        decode_s += out->seconds;
        res.decode_steps.add(*out);
        decode_tokens += static_cast<int64_t>(out->tokens.size());
        res.decode_cpu_seconds += step_cpu;
        waste_sum += e.stats().kv_waste();
        ++waste_steps;
        const MoeStats experts1 = moe_stats_of(e);
        decode_experts.layer_steps += experts1.layer_steps - experts0.layer_steps;
        decode_experts.experts_read += experts1.experts_read - experts0.experts_read;
      }
    }
    return Status::ok();
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    EMBER_RETURN_IF_ERROR(e.add_request(fmt::format("bench-{}", i), reqs[i]));
    if (opt.sequential) EMBER_RETURN_IF_ERROR(drain());
  }
  EMBER_RETURN_IF_ERROR(drain());
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.cpu_seconds = process_cpu_seconds() - cpu0;
  res.num_requests = static_cast<int>(reqs.size());
  for (const auto& r : reqs) res.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  res.requests_per_s = res.num_requests / res.seconds;
  res.tokens_per_s = (res.prompt_tokens + res.output_tokens) / res.seconds;
  res.output_tokens_per_s = res.output_tokens / res.seconds;
  res.decode_tokens_per_s = decode_s > 0 ? decode_tokens / decode_s : 0;
  res.decode_tokens = decode_tokens;
  res.decode_experts_per_layer_step = decode_experts.experts_per_layer_step();
  res.cpu_seconds_per_1k_output_tokens = cpu_seconds_per_1k(res.cpu_seconds, static_cast<double>(res.output_tokens));
  res.mean_kv_waste = waste_steps > 0 ? waste_sum / waste_steps : 0;
  res.decode_steps.finalize();
  res.stats = e.stats();
  return res;
}

}  // namespace ember
