// Online serving benchmark (`ember bench serve`, in the spirit of vLLM's
// benchmark_serving.py): sends a bounded set of streaming requests to any
// OpenAI-compatible server (/v1/completions or /v1/chat/completions) with
// Poisson arrivals (or all at once) under an optional concurrency limit,
// timestamps every streamed chunk on arrival and reports throughput and
// TTFT / TPOT / ITL / end-to-end latency statistics, plus a JSON result with
// per-request arrays for plots (tools/plot_bench.py).
//
// Metric definitions (as in vLLM):
//   TTFT  first non-empty content chunk arrival - request start (the start is
//         taken just before connecting, so it includes connection setup)
//   ITL   gaps between successive non-empty content chunks of a request
//   TPOT  (e2e - TTFT) / (output_tokens - 1), requests with > 1 output token
//   E2E   last byte of the response - request start
// Output tokens come from the server's usage (stream_options.include_usage)
// and fall back to the number of content chunks when a server sends none.
// Percentiles interpolate linearly between order statistics (numpy's
// default): p-th of sorted x[0..n-1] = x at rank p/100 * (n-1).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ember {

struct ServeBenchConfig {
  std::string base_url = "http://127.0.0.1:8080";
  std::string endpoint = "/v1/completions";  // or "/v1/chat/completions"
  std::string model;                         // empty: first id from GET /v1/models
  std::string api_key;                       // sent as "Authorization: Bearer ..." when set
  std::string label;                         // server label for reports / plots
  int num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();  // req/s, Poisson; inf: all at once
  int max_concurrency = 0;                   // 0: unlimited (at most kServeBenchMaxWorkers threads,
                                             // and under the open-files limit)
  // Random workload (used when dataset_path is empty).
  int random_input_len = 128;
  int random_output_len = 128;
  double random_range_ratio = 0;             // lengths uniform in [L*(1-R), L*(1+R)]
  uint64_t seed = 0;
  std::string dataset_path;                  // JSONL: {"prompt"|"messages", "output_len"}
  bool ignore_eos = false;
  double temperature = 0;
  double timeout_s = 600;                    // per request
  double connect_timeout_s = 10;
  // Requests sent one at a time before the measured run (not counted; the
  // workload's first prompts, prefixed with "Warm up N. "); the run stops
  // with an error if the first of them fails.
  int num_warmups = 1;
  // Cost: the server's CPU time over the measured run, from /proc/PID/stat
  // when server_pid > 0 (any server on this machine, e.g. llama-server),
  // else from its /metrics `process_cpu_seconds_total` when it has one.
  int64_t server_pid = 0;
  // GET /metrics before and after the measured run for the server's
  // speculative-decoding counters (ServeBenchResult::spec).
  bool scrape_metrics = false;
};

constexpr int kServeBenchMaxWorkers = 1024;

// One request of the workload. Exactly one of prompt / messages is used:
// messages (a JSON array) when non-null, else prompt.
struct ServeBenchRequest {
  std::string prompt;
  nlohmann::json messages;   // null for plain prompts
  int approx_prompt_tokens = 0;  // client-side estimate (words); the server's usage wins
  int output_len = 0;        // max_tokens
};

struct ServeBenchRecord {
  bool ok = false;
  std::string error;
  double start_s = 0;        // request start, seconds after the benchmark start
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;
  int prompt_tokens = 0;
  int output_tokens = 0;
  int content_chunks = 0;
  bool usage_from_server = false;
};

struct ServeBenchStats {
  int count = 0;
  double mean = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0, stdev = 0;
};

struct ServeBenchSummary {
  int completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0;      // completed requests / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (input + output) tokens / duration
  int peak_concurrency = 0;
  bool usage_reported = true;         // every completed request carried server usage
  ServeBenchStats ttft_ms, tpot_ms, itl_ms, e2e_ms;
  // Server CPU seconds (user + system, all threads) over the run and per
  // 1,000 output tokens; < 0: unknown (no pid given and no /metrics value).
  double server_cpu_s = -1;
  double server_cpu_s_per_1k_output_tokens = -1;
  std::string server_cpu_source;  // "pid" or "metrics"
};

// Speculative-decoding counters of the server (its /metrics, ember's
// ember:spec_decode_* or vLLM's vllm:spec_decode_* names), the difference
// over the measured run; available = the server reported them.
struct ServeSpecCounters {
  bool available = false;
  double num_drafts = 0;        // verifications
  double num_draft_tokens = 0;  // proposed
  double num_accepted_tokens = 0;
  double acceptance_rate() const { return num_draft_tokens > 0 ? num_accepted_tokens / num_draft_tokens : 0; }
  double mean_accepted_length() const { return num_drafts > 0 ? 1 + num_accepted_tokens / num_drafts : 0; }
};
// Reads the counters from a Prometheus text page (absent metrics: not available).
ServeSpecCounters parse_spec_counters(const std::string& metrics_text);

struct ServeBenchResult {
  ServeBenchConfig config;
  ServeSpecCounters spec;       // over the measured run
  std::string model;            // resolved model id
  std::vector<ServeBenchRecord> records;  // in workload order
  int workers = 0;              // client threads used (the effective concurrency cap)
  ServeBenchSummary summary;
};

// --- pieces, exposed for tests -------------------------------------------

// Percentile p in [0, 100] of sorted values (linear interpolation).
double percentile_sorted(const std::vector<double>& sorted, double p);
ServeBenchStats compute_stats(std::vector<double> values);

// Request start offsets (seconds from the start, non-decreasing) for n
// requests: exponential gaps with mean 1/rate from a seeded RNG; all zero
// when rate is infinite.
std::vector<double> poisson_schedule(int n, double rate, uint64_t seed);

// A prompt of `n_words` words from a fixed list of common English words
// (about one token per word for typical tokenizers).
std::string random_words_prompt(int n_words, uint64_t* rng_state);

Result<std::vector<ServeBenchRequest>> make_random_workload(const ServeBenchConfig& cfg);
// Reads up to `limit` requests from a JSONL file (cycled when shorter than
// limit); lines: {"prompt": "...", "output_len": N} or
// {"messages": [...], "output_len": N}. Blank lines are skipped.
Result<std::vector<ServeBenchRequest>> load_jsonl_workload(const std::string& path, int limit);

// The JSON body sent for one request.
nlohmann::json make_request_body(const ServeBenchConfig& cfg, const std::string& model,
                                 const ServeBenchRequest& r);

// Sends one streaming request and measures it. Never fails as a call: errors
// are recorded in the record.
ServeBenchRecord run_one_request(const ServeBenchConfig& cfg, const std::string& model,
                                 const ServeBenchRequest& r);

// The value of an unlabelled sample `name` in a Prometheus text page.
Result<double> prometheus_value(const std::string& page, const std::string& name);

// GET {base}/metrics: the server's Prometheus text page.
Result<std::string> fetch_metrics_page(const ServeBenchConfig& cfg);

// The server's CPU seconds so far: from /proc when cfg.server_pid > 0, else
// process_cpu_seconds_total of its /metrics page (empty: not read).
// `source` gets "pid" or "metrics".
Result<double> server_cpu_seconds(const ServeBenchConfig& cfg, const std::string& metrics_page, std::string* source);

// Fills the summary from records and the wall-clock duration.
ServeBenchSummary summarize_records(const std::vector<ServeBenchRecord>& records, double duration_s);

// GET {base}/v1/models and return the first id.
Result<std::string> discover_model(const ServeBenchConfig& cfg);

// --- the benchmark --------------------------------------------------------

struct ServeBenchProgress {
  int done = 0, failed = 0, total = 0, in_flight = 0;
  double elapsed_s = 0;
};
// Called from the thread that runs the benchmark roughly every 200 ms and
// once at the end.
using ServeBenchProgressFn = std::function<void(const ServeBenchProgress&)>;

// Validates cfg, resolves the model, builds the workload and runs it.
Result<ServeBenchResult> run_serve_bench(const ServeBenchConfig& cfg, const ServeBenchProgressFn& progress = nullptr);
// Runs an already built workload against a known model.
Result<ServeBenchResult> run_serve_bench_workload(const ServeBenchConfig& cfg, const std::string& model,
                                                  const std::vector<ServeBenchRequest>& workload,
                                                  const ServeBenchProgressFn& progress = nullptr);

Status validate_config(const ServeBenchConfig& cfg);

// "12/100 done (1 failed), 3.4 req/s, ETA 26 s" for progress lines.
std::string format_progress(const ServeBenchProgress& p);
// The human-readable result table ("Serving Benchmark Result").
std::string format_report(const ServeBenchResult& r, int max_errors_shown = 5);
// config + summary + per-request arrays.
nlohmann::json result_to_json(const ServeBenchResult& r);

}  // namespace ember
