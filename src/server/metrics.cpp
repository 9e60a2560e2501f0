// Prometheus metrics; see metrics.h.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/cpu_time.h"

namespace ember {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin();  // first bound >= x
  ++counts_[i];
  sum_ += x;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string* out) const {
  *out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  *out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

namespace {
std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}
void counter(std::string* out, const std::string& name, const std::string& help, double v) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
}
void gauge(std::string* out, const std::string& name, const std::string& help, double v) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
}
}  // namespace

ServerMetrics::ServerMetrics()
    : ttft_(latency_buckets()),
      tpot_({0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_(latency_buckets()),
      queue_(latency_buckets()),
      prompt_len_(token_buckets()),
      gen_len_(token_buckets()),
      cpu0_(process_cpu_seconds()) {}

void ServerMetrics::observe_request(const RequestRecord& r) {
  std::lock_guard<std::mutex> lk(mu_);
  ++finished_[r.finish_reason];
  prompt_tokens_ += r.prompt_tokens;
  generation_tokens_ += r.generation_tokens;
  if (r.ttft >= 0) ttft_.observe(r.ttft);
  if (r.generation_tokens > 1 && r.ttft >= 0) tpot_.observe((r.e2e - r.ttft) / static_cast<double>(r.generation_tokens - 1));
  e2e_.observe(r.e2e);
  if (r.queue >= 0) queue_.observe(r.queue);
  prompt_len_.observe(static_cast<double>(r.prompt_tokens));
  gen_len_.observe(static_cast<double>(r.generation_tokens));
}

void ServerMetrics::observe_http(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[status];
}

// Speculative decoding (vLLM's spec_decode_* names): drafts proposed and
// accepted, the acceptance rate, the mean accepted length, and per
// verification the number of accepted drafts (a histogram with one bucket
// per count; le="+Inf" is every verification).
static void render_spec(const SpecCounters& s, std::string* out) {
  counter(out, "ember:spec_decode_num_drafts_total", "Speculative verifications (a request with drafts in a step).",
          static_cast<double>(s.n_verifications));
  counter(out, "ember:spec_decode_num_draft_tokens_total", "Draft tokens proposed and verified.",
          static_cast<double>(s.n_draft_tokens));
  counter(out, "ember:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          static_cast<double>(s.n_accepted_tokens));
  gauge(out, "ember:spec_decode_draft_acceptance_rate", "Accepted / proposed draft tokens.", s.acceptance_rate());
  gauge(out, "ember:spec_decode_mean_accepted_length",
        "Tokens emitted per verification (accepted drafts + the target's token).", s.mean_accepted_length());
  *out += "# HELP ember:spec_decode_accepted_per_draft Accepted draft tokens per verification.\n"
          "# TYPE ember:spec_decode_accepted_per_draft histogram\n";
  size_t last = 0;
  for (size_t i = 0; i < s.accepted_hist.size(); ++i)
    if (s.accepted_hist[i] > 0) last = i;
  int64_t cum = 0;
  for (size_t i = 0; i <= last; ++i) {
    cum += s.accepted_hist[i];
    *out += fmt::format("ember:spec_decode_accepted_per_draft_bucket{{le=\"{}\"}} {}\n", i, cum);
  }
  *out += fmt::format("ember:spec_decode_accepted_per_draft_bucket{{le=\"+Inf\"}} {}\n", s.n_verifications);
  *out += fmt::format("ember:spec_decode_accepted_per_draft_sum {}\n", s.n_accepted_tokens);
  *out += fmt::format("ember:spec_decode_accepted_per_draft_count {}\n", s.n_verifications);
}

std::string ServerMetrics::render(const EngineStats& e, const std::string& model_name) const {
  std::string out;
  gauge(&out, "ember:num_requests_running", "Requests in the running batch.", e.n_running);
  gauge(&out, "ember:num_requests_waiting", "Requests waiting to be scheduled.", e.n_waiting);
  gauge(&out, "ember:num_requests_swapped", "Requests swapped to host memory.", e.n_swapped);
  gauge(&out, "ember:swap_space_used_bytes", "Host memory holding swapped-out KV pages.",
        static_cast<double>(e.swap_bytes_used));
  counter(&out, "ember:num_swap_outs_total", "Sequences whose KV pages were swapped out.",
          static_cast<double>(e.n_swap_outs));
  gauge(&out, "ember:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0..1).",
        e.blocks_total > 0 ? static_cast<double>(e.blocks_used) / e.blocks_total : 0.0);
  gauge(&out, "ember:kv_cache_blocks_total", "KV-cache blocks in the pool.", e.blocks_total);
  gauge(&out, "ember:kv_cache_blocks_used", "KV-cache blocks referenced by requests.", e.blocks_used);
  gauge(&out, "ember:kv_cache_blocks_free", "KV-cache blocks free (including cached ones).", e.blocks_free);
  gauge(&out, "ember:kv_cache_waste_perc", "Allocated but unfilled KV slots of running requests (0..1).", e.kv_waste());
  gauge(&out, "ember:kv_cache_bytes_per_token",
        "KV-cache bytes per token position (all layers, K + V, its dtype; with the dtype's tails reserve, if any, "
        "spread over the pool's positions).",
        static_cast<double>(e.kv_bytes_per_token_with_tails()));
  gauge(&out, "ember:kv_cache_tails_reserve_bytes",
        "KV budget reserved for the tails of unfinished token groups (a token-group key dtype; 0: others).",
        static_cast<double>(e.kv_tail_reserve_bytes));
  gauge(&out, "ember:kv_cache_tails_bytes", "Bytes of token-group tails held now (at most the reserve).",
        static_cast<double>(e.kv_tail_bytes));
  gauge(&out, "ember:kv_cache_tokens_total", "Token positions the KV-cache pool holds (every layer).",
        static_cast<double>(e.kv_tokens_total));
  counter(&out, "ember:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(e.prefix.query_tokens));
  counter(&out, "ember:prefix_cache_hits_total", "Prompt tokens served by the prefix cache.",
          static_cast<double>(e.prefix.hit_tokens));
  gauge(&out, "ember:prefix_cache_hit_rate", "Prefix-cache hit tokens / queried tokens.",
        e.prefix.query_tokens > 0 ? static_cast<double>(e.prefix.hit_tokens) / e.prefix.query_tokens : 0.0);
  counter(&out, "ember:num_preemptions_total", "Sequences preempted (recomputed later).",
          static_cast<double>(e.n_preemptions));
  counter(&out, "ember:engine_steps_total", "Engine iterations.", static_cast<double>(e.n_steps));
  render_spec(e.spec, &out);
  counter(&out, "ember:engine_step_seconds_total", "Time spent in engine iterations.", e.total_step_seconds);
  // Cost: CPU time (all threads, user + system), not wall time.
  const double cpu = process_cpu_seconds();
  counter(&out, "process_cpu_seconds_total", "CPU seconds used by the server process (user + system).", cpu);
  counter(&out, "ember:serving_cpu_seconds_total", "CPU seconds used by the server since it started serving.",
          cpu - cpu0_);
  counter(&out, "ember:engine_generated_tokens_total", "Tokens generated by the engine (unfinished requests too).",
          static_cast<double>(e.n_generated_tokens));
  counter(&out, "ember:forced_tokens_total",
          "Generated tokens appended by forced-token jumps of structured output (not sampled).",
          static_cast<double>(e.n_forced_tokens));
  gauge(&out, "ember:cpu_seconds_per_1k_generation_tokens",
        "Serving CPU seconds per 1,000 generated tokens since the server started (0 before the first token).",
        cpu_seconds_per_1k(cpu - cpu0_, static_cast<double>(e.n_generated_tokens)));
  std::lock_guard<std::mutex> lk(mu_);
  out += "# HELP ember:request_success_total Finished requests by finish reason.\n"
         "# TYPE ember:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished_.find(reason);
    out += fmt::format("ember:request_success_total{{finished_reason=\"{}\",model_name=\"{}\"}} {}\n", reason,
                       model_name, it == finished_.end() ? 0 : it->second);
  }
  counter(&out, "ember:prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
  counter(&out, "ember:generation_tokens_total", "Generated tokens of finished requests.",
          static_cast<double>(generation_tokens_));
  out += "# HELP ember:http_requests_total HTTP responses by status code.\n# TYPE ember:http_requests_total counter\n";
  for (const auto& [status, n] : http_) out += fmt::format("ember:http_requests_total{{status=\"{}\"}} {}\n", status, n);
  ttft_.render("ember:time_to_first_token_seconds", "Time from request arrival to its first token.", &out);
  tpot_.render("ember:time_per_output_token_seconds", "Mean time per output token after the first, per request.", &out);
  e2e_.render("ember:e2e_request_latency_seconds", "Time from request arrival to its end.", &out);
  queue_.render("ember:request_queue_time_seconds", "Time a request waited before first scheduled.", &out);
  prompt_len_.render("ember:request_prompt_tokens", "Prompt tokens per request.", &out);
  gen_len_.render("ember:request_generation_tokens", "Generated tokens per request.", &out);
  return out;
}

}  // namespace ember
