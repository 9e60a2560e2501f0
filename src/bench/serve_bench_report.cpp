// Results of the serving benchmark (see serve_bench.h): percentiles and
// statistics, the summary of a run's records, the progress line, the
// human-readable report and the JSON result.
#include "bench/serve_bench.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace ember {

namespace {

std::string fmt_num(double v, int prec) { return fmt::format("{:.{}f}", v, prec); }

nlohmann::json stats_json(const ServeBenchStats& s) {
  return {{"count", s.count}, {"mean", s.mean},   {"median", s.median}, {"p90", s.p90},
          {"p99", s.p99},     {"min", s.min},     {"max", s.max},       {"stdev", s.stdev}};
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

double percentile_sorted(const std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  p = std::clamp(p, 0.0, 100.0);
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

ServeBenchStats compute_stats(std::vector<double> v) {
  ServeBenchStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.count = static_cast<int>(v.size());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stdev = v.size() > 1 ? std::sqrt(ss / (v.size() - 1)) : 0;
  s.median = percentile_sorted(v, 50);
  s.p90 = percentile_sorted(v, 90);
  s.p99 = percentile_sorted(v, 99);
  s.min = v.front();
  s.max = v.back();
  return s;
}

ServeBenchSummary summarize_records(const std::vector<ServeBenchRecord>& records, double duration_s) {
  ServeBenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : records) {
    if (!r.ok) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    if (!r.usage_from_server) s.usage_reported = false;
    if (r.content_chunks > 0) ttft.push_back(r.ttft_s * 1e3);
    if (r.content_chunks > 0 && r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / (r.output_tokens - 1) * 1e3);
    for (double x : r.itl_s) itl.push_back(x * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
  }
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = s.total_output_tokens / duration_s;
    s.total_token_throughput = (s.total_input_tokens + s.total_output_tokens) / duration_s;
  }
  s.ttft_ms = compute_stats(std::move(ttft));
  s.tpot_ms = compute_stats(std::move(tpot));
  s.itl_ms = compute_stats(std::move(itl));
  s.e2e_ms = compute_stats(std::move(e2e));
  return s;
}

std::string format_progress(const ServeBenchProgress& p) {
  const double rate = p.elapsed_s > 0 ? p.done / p.elapsed_s : 0;
  std::string s = fmt::format("{}/{} done", p.done, p.total);
  if (p.failed) s += fmt::format(" ({} failed)", p.failed);
  s += fmt::format(", {} in flight, {:.2f} req/s, {:.0f} s elapsed", p.in_flight, rate, p.elapsed_s);
  if (p.done >= p.total) {
    s += ", finished";
  } else if (rate > 0) {
    s += fmt::format(", ETA {:.0f} s", (p.total - p.done) / rate);
  } else {
    s += ", ETA ?";
  }
  return s;
}

std::string format_report(const ServeBenchResult& r, int max_errors_shown) {
  const ServeBenchSummary& s = r.summary;
  const ServeBenchConfig& c = r.config;
  std::string o;
  auto line = [&](const std::string& k, const std::string& v) { o += fmt::format("{:<40} {}\n", k, v); };
  auto title = [&](const std::string& t, char fill) {
    const int w = 50, pad = std::max(0, w - static_cast<int>(t.size()));
    o += std::string(pad / 2, fill) + t + std::string(pad - pad / 2, fill) + "\n";
  };
  title(" Serving Benchmark Result ", '=');
  if (!c.label.empty()) line("Server:", c.label);
  line("Model:", r.model);
  line("Endpoint:", c.endpoint);
  line("Successful requests:", std::to_string(s.completed));
  line("Failed requests:", std::to_string(s.failed));
  line("Request rate (req/s):", std::isinf(c.request_rate) ? "inf" : fmt_num(c.request_rate, 2));
  line("Maximum request concurrency:", c.max_concurrency > 0 ? std::to_string(c.max_concurrency) : "unlimited");
  line("Peak concurrent requests:", std::to_string(s.peak_concurrency));
  if (c.max_concurrency > r.workers || (c.max_concurrency == 0 && r.workers < c.num_prompts))
    line("Client worker threads (cap):", std::to_string(r.workers));
  line("Benchmark duration (s):", fmt_num(s.duration_s, 2));
  line(s.usage_reported ? "Total input tokens:" : "Total input tokens (estimated):", std::to_string(s.total_input_tokens));
  line(s.usage_reported ? "Total generated tokens:" : "Total generated tokens (chunks):",
       std::to_string(s.total_output_tokens));
  line("Request throughput (req/s):", fmt_num(s.request_throughput, 2));
  line("Output token throughput (tok/s):", fmt_num(s.output_throughput, 2));
  line("Total token throughput (tok/s):", fmt_num(s.total_token_throughput, 2));
  if (s.server_cpu_s >= 0) {
    line("Server CPU time (s):", fmt_num(s.server_cpu_s, 2) + " (" + s.server_cpu_source + ")");
    line("Server CPU-s per 1k output tokens:", fmt_num(s.server_cpu_s_per_1k_output_tokens, 3));
  }
  auto block = [&](const std::string& head, const std::string& name, const ServeBenchStats& st) {
    title(head, '-');
    line("Mean " + name + " (ms):", fmt_num(st.mean, 2));
    line("Median " + name + " (ms):", fmt_num(st.median, 2));
    line("P90 " + name + " (ms):", fmt_num(st.p90, 2));
    line("P99 " + name + " (ms):", fmt_num(st.p99, 2));
  };
  if (r.spec.available && r.spec.num_draft_tokens > 0) {
    title(" Speculative Decoding (server /metrics) ", '-');
    line("Draft tokens proposed:", fmt_num(r.spec.num_draft_tokens, 0));
    line("Draft tokens accepted:", fmt_num(r.spec.num_accepted_tokens, 0));
    line("Acceptance rate (%):", fmt_num(100 * r.spec.acceptance_rate(), 1));
    line("Mean accepted length:", fmt_num(r.spec.mean_accepted_length(), 2));
  }
  block("Time to First Token", "TTFT", s.ttft_ms);
  block("Time per Output Token (excl. 1st token)", "TPOT", s.tpot_ms);
  block("Inter-token Latency", "ITL", s.itl_ms);
  block("End-to-end Latency", "E2EL", s.e2e_ms);
  title("", '=');
  o += "(percentiles: linear interpolation between order statistics)\n";
  if (!s.usage_reported && s.completed > 0)
    o += "note: the server sent no usage; input tokens are client-side word counts and output tokens are content "
         "chunks\n";
  int shown = 0;
  for (size_t i = 0; i < r.records.size() && shown < max_errors_shown; ++i) {
    if (r.records[i].ok) continue;
    if (shown == 0) o += "First errors:\n";
    o += fmt::format("  request {}: {}\n", i, r.records[i].error);
    ++shown;
  }
  return o;
}

nlohmann::json result_to_json(const ServeBenchResult& r) {
  const ServeBenchConfig& c = r.config;
  const ServeBenchSummary& s = r.summary;
  nlohmann::json cfg = {{"base_url", c.base_url},
                        {"endpoint", c.endpoint},
                        {"num_prompts", c.num_prompts},
                        {"request_rate", std::isinf(c.request_rate) ? nlohmann::json("inf") : nlohmann::json(c.request_rate)},
                        {"max_concurrency", c.max_concurrency},
                        {"random_input_len", c.random_input_len},
                        {"random_output_len", c.random_output_len},
                        {"random_range_ratio", c.random_range_ratio},
                        {"seed", c.seed},
                        {"dataset", c.dataset_path},
                        {"ignore_eos", c.ignore_eos},
                        {"temperature", c.temperature},
                        {"timeout_s", c.timeout_s},
                        {"num_warmups", c.num_warmups},
                        {"server_pid", c.server_pid}};
  nlohmann::json sum = {{"completed", s.completed},
                        {"failed", s.failed},
                        {"duration_s", s.duration_s},
                        {"total_input_tokens", s.total_input_tokens},
                        {"total_output_tokens", s.total_output_tokens},
                        {"request_throughput", s.request_throughput},
                        {"output_throughput", s.output_throughput},
                        {"total_token_throughput", s.total_token_throughput},
                        {"peak_concurrency", s.peak_concurrency},
                        {"client_workers", r.workers},
                        {"usage_reported", s.usage_reported},
                        {"ttft_ms", stats_json(s.ttft_ms)},
                        {"tpot_ms", stats_json(s.tpot_ms)},
                        {"itl_ms", stats_json(s.itl_ms)},
                        {"e2e_ms", stats_json(s.e2e_ms)},
                        {"server_cpu_s", s.server_cpu_s >= 0 ? nlohmann::json(s.server_cpu_s) : nlohmann::json()},
                        {"server_cpu_s_per_1k_output_tokens",
                         s.server_cpu_s >= 0 ? nlohmann::json(s.server_cpu_s_per_1k_output_tokens) : nlohmann::json()},
                        {"server_cpu_source", s.server_cpu_source}};
  nlohmann::json ok = nlohmann::json::array(), err = nlohmann::json::array(), start = nlohmann::json::array(),
                 ttft = nlohmann::json::array(), tpot = nlohmann::json::array(), e2e = nlohmann::json::array(),
                 itl = nlohmann::json::array(), pt = nlohmann::json::array(), ot = nlohmann::json::array();
  for (const auto& rec : r.records) {
    ok.push_back(rec.ok);
    err.push_back(rec.error);
    start.push_back(rec.start_s * 1e3);
    const bool has_tok = rec.ok && rec.content_chunks > 0;
    ttft.push_back(has_tok ? nlohmann::json(rec.ttft_s * 1e3) : nlohmann::json());
    tpot.push_back(has_tok && rec.output_tokens > 1
                       ? nlohmann::json((rec.e2e_s - rec.ttft_s) / (rec.output_tokens - 1) * 1e3)
                       : nlohmann::json());
    e2e.push_back(rec.ok ? nlohmann::json(rec.e2e_s * 1e3) : nlohmann::json());
    nlohmann::json gaps = nlohmann::json::array();
    for (double g : rec.itl_s) gaps.push_back(g * 1e3);
    itl.push_back(std::move(gaps));
    pt.push_back(rec.prompt_tokens);
    ot.push_back(rec.output_tokens);
  }
  return {{"kind", "ember_bench_serve"},
          {"version", 1},
          {"label", c.label},
          {"date", utc_now_iso()},
          {"model", r.model},
          {"config", std::move(cfg)},
          {"summary", std::move(sum)},
          {"requests",
           {{"ok", ok}, {"error", err}, {"start_ms", start}, {"ttft_ms", ttft}, {"tpot_ms", tpot},
            {"e2e_ms", e2e}, {"itl_ms", itl}, {"prompt_tokens", pt}, {"output_tokens", ot}}}};
}

}  // namespace ember
