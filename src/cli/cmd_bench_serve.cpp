// `ember bench serve`: load generator for any OpenAI-compatible server
// (ember serve, llama-server, vLLM, ...). Parses the options, shows progress
// (cli/progress.h: a live line on a terminal, periodic lines otherwise), prints
// the "Serving Benchmark Result" table and optionally writes a JSON result.
#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "cli/common.h"
#include "cli/progress.h"
#include "bench/serve_bench.h"

namespace ember::cli {

namespace {

// Parses a finite double >= lo, or "inf" when allow_inf.
Status parse_double(const std::string& name, const std::string& text, double lo, bool allow_inf, double* out) {
  if (allow_inf && (text == "inf" || text == "Inf" || text == "INF")) {
    *out = std::numeric_limits<double>::infinity();
    return Status::ok();
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno == ERANGE || !std::isfinite(v) || v < lo)
    return Status::errorf("{} expects a number >= {}{}, got '{}'", name, lo, allow_inf ? " or 'inf'" : "", text);
  *out = v;
  return Status::ok();
}


}  // namespace

int cmd_bench_serve(int argc, char** argv, int first) {
  ArgParser p("bench serve",
              "ember bench serve [--base-url http://127.0.0.1:8080] [--endpoint /v1/completions] [--model NAME] "
              "[--num-prompts 100] [--request-rate inf] [--max-concurrency N] [--random-input-len 128] "
              "[--random-output-len 128] [--random-range-ratio 0] [--seed 0] [--dataset FILE.jsonl] [--ignore-eos] "
              "[--num-warmups 1] [--timeout 600] [--label NAME] [--server-pid PID] [--json FILE]");
  ServeBenchConfig c;
  std::string rate = "inf", ratio = "0", timeout = "600", temperature = "0", json_path, host, port_s;
  bool quiet = false;
  p.option("--base-url", &c.base_url, "URL", "server address, http://host:port[/prefix] (default http://127.0.0.1:8080)");
  p.option("--host", &host, "HOST", "shorthand for --base-url http://HOST:PORT");
  p.option("--port", &port_s, "PORT", "shorthand for --base-url http://HOST:PORT (default host 127.0.0.1)");
  p.option("--endpoint", &c.endpoint, "PATH", "/v1/completions (default) or /v1/chat/completions");
  p.option("--model", &c.model, "NAME", "model name sent to the server (default: first id of GET /v1/models)");
  p.option("--api-key", &c.api_key, "KEY", "bearer token (default: $OPENAI_API_KEY)");
  p.option("--label", &c.label, "NAME", "server label for the report and plots");
  p.option("--server-pid", &c.server_pid, "PID",
           "server process on this machine whose CPU time to report (default: the server's /metrics "
           "process_cpu_seconds_total, when it has one)");
  p.option("--num-prompts", &c.num_prompts, "N", "number of requests (default 100)");
  p.option("--request-rate", &rate, "R", "requests per second with Poisson arrivals, or inf: all at once (default)");
  p.option("--max-concurrency", &c.max_concurrency, "N", "requests in flight at most (default: unlimited)");
  p.option("--random-input-len", &c.random_input_len, "N", "prompt length in words (~tokens) (default 128)");
  p.option("--random-output-len", &c.random_output_len, "N", "max_tokens per request (default 128)");
  p.option("--random-range-ratio", &ratio, "R", "lengths uniform in [L*(1-R), L*(1+R)] (default 0)");
  p.option("--seed", &c.seed, "N", "seed for the workload and the arrival times (default 0)");
  p.option("--dataset", &c.dataset_path, "FILE", "JSONL requests: {\"prompt\"|\"messages\", \"output_len\"}");
  p.flag("--ignore-eos", &c.ignore_eos, "send ignore_eos: true (generate exactly max_tokens where supported)");
  p.option("--temperature", &temperature, "T", "sampling temperature sent to the server (default 0)");
  p.option("--num-warmups", &c.num_warmups, "N", "unmeasured requests sent first, one at a time (default 1)");
  p.option("--timeout", &timeout, "S", "per-request timeout in seconds (default 600)");
  p.option("--json", &json_path, "FILE", "write config, summary and per-request arrays as JSON");
  p.flag("-q,--quiet", &quiet, "no progress lines");
  bool no_metrics = false;
  p.flag("--no-metrics", &no_metrics, "do not read the server's /metrics (speculative-decoding counters)");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  c.scrape_metrics = !no_metrics;
  if (Status st = parse_double("--request-rate", rate, 0, true, &c.request_rate); !st) return usage_error(p, st.message());
  if (Status st = parse_double("--random-range-ratio", ratio, 0, false, &c.random_range_ratio); !st)
    return usage_error(p, st.message());
  if (Status st = parse_double("--timeout", timeout, 0.001, false, &c.timeout_s); !st) return usage_error(p, st.message());
  if (Status st = parse_double("--temperature", temperature, 0, false, &c.temperature); !st)
    return usage_error(p, st.message());
  if (!host.empty() || !port_s.empty())
    c.base_url = "http://" + (host.empty() ? std::string("127.0.0.1") : host) + ":" + (port_s.empty() ? "8080" : port_s);
  if (c.api_key.empty()) {
    if (const char* k = std::getenv("OPENAI_API_KEY")) c.api_key = k;
  }
  if (Status st = validate_config(c); !st) return usage_error(p, st.message());

  std::fprintf(stderr, "ember bench serve: %d requests to %s%s, rate %s, max concurrency %s\n", c.num_prompts,
               c.base_url.c_str(), c.endpoint.c_str(),
               std::isinf(c.request_rate) ? "inf" : fmt::format("{:.2f}/s", c.request_rate).c_str(),
               c.max_concurrency > 0 ? std::to_string(c.max_concurrency).c_str() : "unlimited");
  // Every request in flight needs a socket: lift the soft open-files limit.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  ProgressLine progress;
  auto r = run_serve_bench(c, [&](const ServeBenchProgress& pr) {
    if (quiet) return;
    std::string what = fmt::format("{} in flight, {:.2f} req/s", pr.in_flight,
                                   pr.elapsed_s > 0 ? pr.done / pr.elapsed_s : 0.0);
    if (pr.failed) what += fmt::format(", {} failed", pr.failed);
    progress.update(pr.done, pr.total, pr.elapsed_s, what);
  });
  progress.clear();
  if (!r) {
    std::fprintf(stderr, "ember bench serve: %s\n", r.status().message().c_str());
    return kExitFailure;
  }
  std::fputs(format_report(*r).c_str(), stdout);
  std::fflush(stdout);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << result_to_json(*r).dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "ember bench serve: cannot write %s\n", json_path.c_str());
      return kExitFailure;
    }
    std::fprintf(stderr, "wrote %s\n", json_path.c_str());
  }
  // Every request failing is a failed run; partial failures are reported.
  return r->summary.completed > 0 ? kExitOk : kExitFailure;
}

}  // namespace ember::cli
