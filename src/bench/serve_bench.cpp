// Online serving benchmark: configuration checks, the request body, worker
// threads and per-request streaming measurement; see serve_bench.h for the
// metric definitions. Workloads and arrival schedules are in
// serve_bench_workload.cpp, statistics and reports in serve_bench_report.cpp.
#include "bench/serve_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "bench/http_client.h"
#include "bench/sse.h"
#include "core/cpu_time.h"

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Pulls generated text out of one streamed (or complete) response object.
std::string content_of(const nlohmann::json& j, bool* has_choices) {
  *has_choices = false;
  auto it = j.find("choices");
  if (it == j.end() || !it->is_array() || it->empty() || !(*it)[0].is_object()) return {};
  *has_choices = true;
  const nlohmann::json& c = (*it)[0];
  std::string out;
  auto add = [&](const nlohmann::json& obj, const char* key) {
    auto f = obj.find(key);
    if (f != obj.end() && f->is_string()) out += f->get<std::string>();
  };
  add(c, "text");  // completions
  for (const char* k : {"delta", "message"}) {  // chat: streamed / complete
    auto d = c.find(k);
    if (d != c.end() && d->is_object()) {
      add(*d, "content");
      add(*d, "reasoning_content");
    }
  }
  return out;
}

// Reads usage.{prompt,completion}_tokens; returns true when both are present.
bool usage_of(const nlohmann::json& j, int* prompt, int* completion) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return false;
  auto p = u->find("prompt_tokens"), c = u->find("completion_tokens");
  if (p == u->end() || c == u->end() || !p->is_number_integer() || !c->is_number_integer()) return false;
  const int64_t pv = p->get<int64_t>(), cv = c->get<int64_t>();
  if (pv < 0 || cv < 0 || pv > (1 << 30) || cv > (1 << 30)) return false;
  *prompt = static_cast<int>(pv);
  *completion = static_cast<int>(cv);
  return true;
}

std::string error_text(const nlohmann::json& j) {
  auto e = j.find("error");
  if (e == j.end()) return {};
  if (e->is_string()) return e->get<std::string>();
  if (e->is_object()) {
    auto m = e->find("message");
    if (m != e->end() && m->is_string()) return m->get<std::string>();
  }
  return e->dump();
}

std::string snippet(const std::string& s, size_t n = 200) {
  std::string out = s.substr(0, n);
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > n) out += "...";
  return out;
}

}  // namespace

Status validate_config(const ServeBenchConfig& c) {
  if (c.num_prompts < 1 || c.num_prompts > 10000000) return Status::error("--num-prompts must be in [1, 10000000]");
  if (!(c.request_rate > 0)) return Status::error("--request-rate must be > 0 (or inf)");
  if (c.num_warmups < 0 || c.num_warmups > 1000) return Status::error("--num-warmups must be in [0, 1000]");
  if (c.max_concurrency < 0) return Status::error("--max-concurrency must be >= 0 (0: unlimited)");
  if (c.server_pid < 0) return Status::error("--server-pid must be a process id (> 0)");
  if (c.endpoint.empty() || c.endpoint[0] != '/') return Status::errorf("--endpoint must start with '/', got '{}'", c.endpoint);
  if (!(c.timeout_s > 0) || !(c.connect_timeout_s > 0)) return Status::error("timeouts must be > 0");
  if (!(c.random_range_ratio >= 0 && c.random_range_ratio < 1))
    return Status::error("--random-range-ratio must be in [0, 1)");
  if (c.dataset_path.empty()) {
    if (c.random_input_len < 1 || c.random_input_len > (1 << 20))
      return Status::error("--random-input-len must be in [1, 1048576]");
    if (c.random_output_len < 1 || c.random_output_len > (1 << 20))
      return Status::error("--random-output-len must be in [1, 1048576]");
  }
  auto u = parse_http_url(c.base_url);
  if (!u) return u.status();
  return Status::ok();
}

nlohmann::json make_request_body(const ServeBenchConfig& cfg, const std::string& model, const ServeBenchRequest& r) {
  nlohmann::json b = {{"model", model},
                      {"max_tokens", r.output_len},
                      {"temperature", cfg.temperature},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}};
  const bool chat = cfg.endpoint.find("chat") != std::string::npos;
  if (chat) {
    b["messages"] = r.messages.is_null()
                        ? nlohmann::json::array({{{"role", "user"}, {"content", r.prompt}}})
                        : r.messages;
  } else {
    if (!r.messages.is_null()) {
      // A chat-style dataset line on the completions endpoint: plain join.
      std::string p;
      for (const auto& m : r.messages) {
        auto c = m.find("content");
        if (c != m.end() && c->is_string()) p += (p.empty() ? "" : "\n") + c->get<std::string>();
      }
      b["prompt"] = p;
    } else {
      b["prompt"] = r.prompt;
    }
  }
  if (cfg.ignore_eos) b["ignore_eos"] = true;
  return b;
}

ServeBenchRecord run_one_request(const ServeBenchConfig& cfg, const std::string& model, const ServeBenchRequest& r) {
  ServeBenchRecord rec;
  auto url = parse_http_url(cfg.base_url);
  if (!url) {
    rec.error = url.status().message();
    return rec;
  }
  HttpClientRequest req;
  req.method = "POST";
  req.host = url->host;
  req.port = url->port;
  req.target = url->path + cfg.endpoint;
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!cfg.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + cfg.api_key);
  req.body = make_request_body(cfg, model, r).dump();
  req.timeout_s = cfg.timeout_s;
  req.connect_timeout_s = cfg.connect_timeout_s;

  SseParser parser;
  std::vector<SseEvent> events;
  std::string raw;  // first bytes of the body: error messages and non-SSE replies
  constexpr size_t kRawKeep = 1 << 20;
  bool saw_event = false, done = false;
  std::string stream_error;
  int usage_prompt = 0, usage_completion = 0;
  Clock::time_point start, last;
  Status parse_status;

  auto handle_events = [&](Clock::time_point t) {
    for (const SseEvent& e : events) {
      saw_event = true;
      if (e.data == "[DONE]") {
        done = true;
        continue;
      }
      auto j = nlohmann::json::parse(e.data, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        if (stream_error.empty()) stream_error = "bad JSON in stream: " + snippet(e.data, 80);
        continue;
      }
      std::string err = error_text(j);
      if (!err.empty() || e.event == "error") {
        if (stream_error.empty()) stream_error = "server error in stream: " + (err.empty() ? snippet(e.data) : err);
        continue;
      }
      bool has_choices = false;
      const std::string text = content_of(j, &has_choices);
      if (!text.empty()) {
        if (rec.content_chunks == 0) {
          rec.ttft_s = seconds_between(start, t);
        } else {
          rec.itl_s.push_back(seconds_between(last, t));
        }
        last = t;
        ++rec.content_chunks;
      }
      int p = 0, c = 0;
      if (usage_of(j, &p, &c)) {
        rec.usage_from_server = true;
        usage_prompt = p;
        usage_completion = c;
      }
    }
    events.clear();
  };

  start = Clock::now();
  auto resp = http_request(req, [&](int status, std::string_view data) {
    const Clock::time_point t = Clock::now();
    if (raw.size() < kRawKeep) raw.append(data.substr(0, kRawKeep - raw.size()));
    if (status != 200) return true;
    if (!parse_status) return true;
    parse_status = parser.feed(data, &events);
    handle_events(t);
    return true;
  });
  const Clock::time_point end = Clock::now();
  rec.e2e_s = seconds_between(start, end);
  if (!resp) {
    rec.error = rec.content_chunks > 0 ? fmt::format("stream cut off after {} content chunks: {}", rec.content_chunks,
                                                     resp.status().message())
                                       : resp.status().message();
    return rec;
  }
  if (resp->status != 200) {
    std::string msg;
    auto j = nlohmann::json::parse(raw, nullptr, false);
    if (!j.is_discarded() && j.is_object()) msg = error_text(j);
    rec.error = fmt::format("HTTP {}: {}", resp->status, msg.empty() ? snippet(raw) : snippet(msg));
    return rec;
  }
  if (!parse_status) {
    rec.error = parse_status.message();
    return rec;
  }
  parser.finish(&events);
  handle_events(end);
  if (!saw_event) {
    // Not an event stream: a server that ignored "stream": true.
    auto j = nlohmann::json::parse(raw, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      rec.error = "response is neither an event stream nor JSON: " + snippet(raw, 80);
      return rec;
    }
    events.push_back(SseEvent{"", raw, ""});
    handle_events(end);
  }
  if (!stream_error.empty()) {
    rec.error = stream_error;
    return rec;
  }
  (void)done;  // a missing [DONE] is tolerated: the HTTP body ended cleanly
  if (rec.usage_from_server) {
    rec.prompt_tokens = usage_prompt;
    rec.output_tokens = usage_completion;
  } else {
    rec.prompt_tokens = r.approx_prompt_tokens;
    rec.output_tokens = rec.content_chunks;
  }
  rec.ok = true;
  return rec;
}

ServeSpecCounters parse_spec_counters(const std::string& text) {
  ServeSpecCounters c;
  int found_any = 0;
  auto value = [&](const char* suffix, double* out) {
    for (const char* prefix : {"ember:", "vllm:"}) {
      int found = 0;
      const std::string name = std::string(prefix) + suffix;
      size_t at = 0;
      while ((at = text.find(name, at)) != std::string::npos) {
        const bool line_start = at == 0 || text[at - 1] == '\n';
        const size_t after = at + name.size();
        at = after;
        if (!line_start || after >= text.size() || (text[after] != ' ' && text[after] != '{')) continue;
        const size_t sp = text.find(' ', text[after] == '{' ? text.find('}', after) : after);
        if (sp == std::string::npos) continue;
        *out += std::strtod(text.c_str() + sp + 1, nullptr);  // summed over label sets
        ++found;
      }
      found_any += found;
      if (found) return;
    }
  };
  value("spec_decode_num_drafts_total", &c.num_drafts);
  value("spec_decode_num_draft_tokens_total", &c.num_draft_tokens);
  value("spec_decode_num_accepted_tokens_total", &c.num_accepted_tokens);
  c.available = found_any > 0;
  return c;
}

namespace {
// GET {base}{path} with the benchmark's key and connect timeout; the body of
// a 200 reply, else an error naming the request.
Result<std::string> get_body(const ServeBenchConfig& cfg, const std::string& path, double timeout_s) {
  auto url = parse_http_url(cfg.base_url);
  if (!url) return url.status();
  HttpClientRequest req;
  req.host = url->host;
  req.port = url->port;
  req.target = url->path + path;
  if (!cfg.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + cfg.api_key);
  req.timeout_s = std::min(cfg.timeout_s, timeout_s);
  req.connect_timeout_s = cfg.connect_timeout_s;
  req.max_body_bytes = 16 << 20;
  auto resp = http_request(req);
  if (!resp) return resp.status().with_context("GET " + req.target);
  if (resp->status != 200) return Status::errorf("GET {}: HTTP {}: {}", req.target, resp->status, snippet(resp->body));
  return std::move(resp->body);
}
}  // namespace

Result<std::string> fetch_metrics_page(const ServeBenchConfig& cfg) { return get_body(cfg, "/metrics", 30.0); }

Result<std::string> discover_model(const ServeBenchConfig& cfg) {
  auto body = get_body(cfg, "/v1/models", 60.0);
  if (!body) return body.status();
  auto j = nlohmann::json::parse(*body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    auto d = j.find("data");
    if (d != j.end() && d->is_array() && !d->empty() && (*d)[0].is_object()) {
      auto id = (*d)[0].find("id");
      if (id != (*d)[0].end() && id->is_string() && !id->get<std::string>().empty()) return id->get<std::string>();
    }
  }
  return Status::errorf("GET /v1/models: no model id in the reply (use --model): {}", snippet(*body));
}

Result<double> prometheus_value(const std::string& page, const std::string& name) {
  for (size_t b = 0; b < page.size();) {
    size_t e = page.find('\n', b);
    if (e == std::string::npos) e = page.size();
    if (page.compare(b, name.size(), name) == 0 && b + name.size() < e && page[b + name.size()] == ' ') {
      const std::string v = page.substr(b + name.size() + 1, e - b - name.size() - 1);
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str()) return Status::errorf("metric {}: bad value '{}'", name, v);
      return x;
    }
    b = e + 1;
  }
  return Status::errorf("metric {} not found", name);
}

Result<double> server_cpu_seconds(const ServeBenchConfig& cfg, const std::string& metrics_page, std::string* source) {
  if (cfg.server_pid > 0) {
    *source = "pid";
    return process_cpu_seconds(cfg.server_pid);
  }
  *source = "metrics";
  if (metrics_page.empty()) return Status::error("no /metrics page");
  return prometheus_value(metrics_page, "process_cpu_seconds_total");
}

Result<ServeBenchResult> run_serve_bench_workload(const ServeBenchConfig& cfg, const std::string& model,
                                                  const std::vector<ServeBenchRequest>& workload,
                                                  const ServeBenchProgressFn& progress) {
  EMBER_RETURN_IF_ERROR(validate_config(cfg));
  const int n = static_cast<int>(workload.size());
  if (n == 0) return Status::error("empty workload");
  ServeBenchResult res;
  res.config = cfg;
  res.model = model;
  res.records.resize(n);
  const std::vector<double> schedule = poisson_schedule(n, cfg.request_rate, cfg.seed);
  const int limit = cfg.max_concurrency > 0 ? cfg.max_concurrency : kServeBenchMaxWorkers;
  int workers = std::min({n, limit, kServeBenchMaxWorkers});
  // Each request in flight holds a socket: stay under the open-files limit.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    workers = std::max(1, std::min<int>(workers, static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20)) - 64));
  res.workers = workers;

  std::atomic<int> next{0}, done{0}, failed{0}, in_flight{0}, peak{0};
  std::mutex mu;
  std::condition_variable cv;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (;;) {
        const int i = next.fetch_add(1);
        if (i >= n) return;
        // Request i arrives at t0 + schedule[i]; a worker taking it later
        // than that means the concurrency limit delayed it (as intended).
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(schedule[i])));
        const int now_in = in_flight.fetch_add(1) + 1;
        int p = peak.load();
        while (now_in > p && !peak.compare_exchange_weak(p, now_in)) {
        }
        const Clock::time_point ts = Clock::now();
        ServeBenchRecord rec = run_one_request(cfg, model, workload[i]);
        rec.start_s = seconds_between(t0, ts);
        in_flight.fetch_sub(1);
        if (!rec.ok) failed.fetch_add(1);
        res.records[i] = std::move(rec);
        {
          std::lock_guard<std::mutex> lk(mu);
          done.fetch_add(1);
        }
        cv.notify_all();
      }
    });
  }
  auto report = [&] {
    if (!progress) return;
    ServeBenchProgress p;
    p.done = done.load();
    p.failed = failed.load();
    p.total = n;
    p.in_flight = in_flight.load();
    p.elapsed_s = seconds_between(t0, Clock::now());
    progress(p);
  };
  {
    std::unique_lock<std::mutex> lk(mu);
    while (done.load() < n) {
      cv.wait_for(lk, std::chrono::milliseconds(200));
      lk.unlock();
      report();
      lk.lock();
    }
  }
  for (auto& t : threads) t.join();
  const double duration = seconds_between(t0, Clock::now());
  res.summary = summarize_records(res.records, duration);
  res.summary.peak_concurrency = peak.load();
  return res;
}

Result<ServeBenchResult> run_serve_bench(const ServeBenchConfig& cfg, const ServeBenchProgressFn& progress) {
  EMBER_RETURN_IF_ERROR(validate_config(cfg));
  std::string model = cfg.model;
  if (model.empty()) {
    auto m = discover_model(cfg);
    if (!m) return m.status();
    model = *m;
  }
  auto w = cfg.dataset_path.empty() ? make_random_workload(cfg) : load_jsonl_workload(cfg.dataset_path, cfg.num_prompts);
  if (!w) return w.status();
  for (int i = 0; i < cfg.num_warmups; ++i) {
    // A workload request with a different start, so that a server's prefix
    // cache does not make the measured copy of it artificially fast.
    ServeBenchRequest q = (*w)[i % w->size()];
    const std::string tag = fmt::format("Warm up {}. ", i);
    if (q.messages.is_array() && !q.messages.empty() && q.messages[0].is_object() &&
        q.messages[0].contains("content") && q.messages[0]["content"].is_string()) {
      q.messages[0]["content"] = tag + q.messages[0]["content"].get<std::string>();
    } else {
      q.prompt = tag + q.prompt;
    }
    ServeBenchRecord rec = run_one_request(cfg, model, q);
    if (!rec.ok && i == 0) return Status::errorf("warm-up request failed: {}", rec.error);
  }
  // The server's counters before and after the measured run: CPU time
  // (cost) and speculative-decoding counters.
  struct Snapshot {
    ServeSpecCounters spec;
    Result<double> cpu = Status::error("not read");
    std::string cpu_source;
  };
  auto snapshot = [&cfg] {
    Snapshot sn;
    std::string page;
    if (cfg.scrape_metrics)
      if (auto p = fetch_metrics_page(cfg)) page = std::move(p.value());
    if (!page.empty()) sn.spec = parse_spec_counters(page);
    sn.cpu = server_cpu_seconds(cfg, page, &sn.cpu_source);
    return sn;
  };
  Snapshot before = snapshot();
  if (!before.cpu && cfg.server_pid > 0) return before.cpu.status().with_context("--server-pid");
  auto res = run_serve_bench_workload(cfg, model, *w, progress);
  if (!res) return res;
  Snapshot after = snapshot();
  if (before.spec.available && after.spec.available) {
    res->spec.available = true;
    res->spec.num_drafts = after.spec.num_drafts - before.spec.num_drafts;
    res->spec.num_draft_tokens = after.spec.num_draft_tokens - before.spec.num_draft_tokens;
    res->spec.num_accepted_tokens = after.spec.num_accepted_tokens - before.spec.num_accepted_tokens;
  }
  if (before.cpu && after.cpu) {
    ServeBenchSummary& sum = res->summary;
    sum.server_cpu_s = *after.cpu - *before.cpu;
    sum.server_cpu_s_per_1k_output_tokens =
        cpu_seconds_per_1k(sum.server_cpu_s, static_cast<double>(sum.total_output_tokens));
    sum.server_cpu_source = after.cpu_source;
  }
  return res;
}

}  // namespace ember
