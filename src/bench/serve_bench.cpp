// Online serving benchmark: workload generation, arrival schedule, worker
// threads, per-request streaming measurement and statistics; see
// serve_bench.h for the metric definitions.
#include "bench/serve_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "bench/http_client.h"
#include "bench/sse.h"

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// splitmix64: small, fast and identical on every platform (unlike the
// standard distributions), so a seed means the same workload everywhere.
uint64_t next_u64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double next_unit(uint64_t* s) {  // [0, 1)
  return static_cast<double>(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

int uniform_int(uint64_t* s, int lo, int hi) {  // inclusive
  if (hi <= lo) return lo;
  return lo + static_cast<int>(next_u64(s) % static_cast<uint64_t>(hi - lo + 1));
}

// Common English words that are single tokens in typical BPE/SentencePiece
// vocabularies (when preceded by a space).
constexpr const char* kWords[] = {
    "the",    "of",     "and",    "to",     "in",     "is",     "was",    "for",    "on",     "that",   "with",
    "as",     "by",     "at",     "from",   "his",    "her",    "an",     "were",   "are",    "which",  "this",
    "be",     "or",     "had",    "not",    "but",    "first",  "one",    "their",  "also",   "its",    "new",
    "after",  "who",    "they",   "have",   "two",    "has",    "been",   "she",    "other",  "when",   "time",
    "all",    "during", "into",   "there",  "would",  "more",   "school", "may",    "years",  "over",   "only",
    "year",   "most",   "later",  "city",   "about",  "three",  "world",  "some",   "where",  "made",   "out",
    "state",  "up",     "between","many",   "such",   "then",   "film",   "these",  "work",   "used",   "while",
    "under",  "known",  "part",   "being",  "both",   "several","team",   "game",   "second", "war",    "early",
    "through","well",   "became", "each",   "before", "until",  "music",  "life",   "name",   "own",    "last",
    "family", "high",   "since",  "south",  "north",  "season", "house",  "same",   "people", "great",  "long",
    "could",  "place",  "number", "small",  "back",   "around", "home",   "area",   "book",   "day",    "water",
    "church", "local",  "end",    "four",   "line",   "group",  "called", "common", "main",   "river",  "against",
    "large",  "public", "named",  "old",    "general","won",    "down",   "left",   "took",   "did",    "near",
    "body",   "village","like",   "power",  "band",   "party",  "good",   "light",  "right",  "land",   "side",
    "found",  "set",    "point",  "game",   "open",   "road",   "green",  "water",  "field",  "story",  "order",
    "table",  "tree",   "king",   "road",   "ship",   "stone",  "paper",  "money",  "bird",   "horse",  "window",
};
constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);

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

int count_words(const std::string& s) {
  int n = 0;
  bool in = false;
  for (char c : s) {
    const bool sp = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!sp && !in) ++n;
    in = !sp;
  }
  return n;
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

std::vector<double> poisson_schedule(int n, double rate, uint64_t seed) {
  std::vector<double> t(std::max(0, n), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return t;
  uint64_t s = seed ^ 0x5EEDF00Dull;
  double acc = 0;
  for (int i = 0; i < n; ++i) {
    // The first request goes out at once; then exponential gaps.
    if (i > 0) acc += -std::log1p(-next_unit(&s)) / rate;
    t[i] = acc;
  }
  return t;
}

std::string random_words_prompt(int n_words, uint64_t* rng) {
  std::string out;
  out.reserve(static_cast<size_t>(std::max(0, n_words)) * 6);
  for (int i = 0; i < n_words; ++i) {
    if (i) out += ' ';
    out += kWords[next_u64(rng) % kNumWords];
  }
  return out;
}

Status validate_config(const ServeBenchConfig& c) {
  if (c.num_prompts < 1 || c.num_prompts > 10000000) return Status::error("--num-prompts must be in [1, 10000000]");
  if (!(c.request_rate > 0)) return Status::error("--request-rate must be > 0 (or inf)");
  if (c.num_warmups < 0 || c.num_warmups > 1000) return Status::error("--num-warmups must be in [0, 1000]");
  if (c.max_concurrency < 0) return Status::error("--max-concurrency must be >= 0 (0: unlimited)");
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

Result<std::vector<ServeBenchRequest>> make_random_workload(const ServeBenchConfig& cfg) {
  EMBER_RETURN_IF_ERROR(validate_config(cfg));
  uint64_t s = cfg.seed;
  const double r = cfg.random_range_ratio;
  const int in_lo = std::max(1, static_cast<int>(cfg.random_input_len * (1 - r)));
  const int in_hi = std::max(in_lo, static_cast<int>(cfg.random_input_len * (1 + r)));
  const int out_lo = std::max(1, static_cast<int>(cfg.random_output_len * (1 - r)));
  const int out_hi = std::max(out_lo, static_cast<int>(cfg.random_output_len * (1 + r)));
  const bool chat = cfg.endpoint.find("chat") != std::string::npos;
  std::vector<ServeBenchRequest> w(cfg.num_prompts);
  for (auto& q : w) {
    const int in = uniform_int(&s, in_lo, in_hi);
    q.output_len = uniform_int(&s, out_lo, out_hi);
    q.prompt = random_words_prompt(in, &s);
    q.approx_prompt_tokens = in;
    if (chat) q.messages = nlohmann::json::array({{{"role", "user"}, {"content", q.prompt}}});
  }
  return w;
}

Result<std::vector<ServeBenchRequest>> load_jsonl_workload(const std::string& path, int limit) {
  std::ifstream f(path);
  if (!f) return Status::errorf("cannot open dataset '{}'", path);
  std::vector<ServeBenchRequest> all;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Status::errorf("{}:{}: not a JSON object", path, lineno);
    ServeBenchRequest q;
    auto ol = j.find("output_len");
    if (ol == j.end() || !ol->is_number_integer() || ol->get<int64_t>() < 1 || ol->get<int64_t>() > (1 << 20))
      return Status::errorf("{}:{}: \"output_len\" must be an integer in [1, 1048576]", path, lineno);
    q.output_len = static_cast<int>(ol->get<int64_t>());
    auto p = j.find("prompt");
    auto m = j.find("messages");
    if (p != j.end() && p->is_string()) {
      q.prompt = p->get<std::string>();
      q.approx_prompt_tokens = count_words(q.prompt);
    } else if (m != j.end() && m->is_array() && !m->empty()) {
      for (const auto& msg : *m) {
        if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
          return Status::errorf("{}:{}: each message needs a string \"role\"", path, lineno);
        auto c = msg.find("content");
        if (c != msg.end() && c->is_string()) q.approx_prompt_tokens += count_words(c->get<std::string>());
      }
      q.messages = *m;
    } else {
      return Status::errorf("{}:{}: needs a string \"prompt\" or a non-empty \"messages\" array", path, lineno);
    }
    all.push_back(std::move(q));
  }
  if (all.empty()) return Status::errorf("dataset '{}' has no requests", path);
  std::vector<ServeBenchRequest> w;
  w.reserve(limit);
  for (int i = 0; i < limit; ++i) w.push_back(all[i % all.size()]);
  return w;
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

Result<std::string> discover_model(const ServeBenchConfig& cfg) {
  auto url = parse_http_url(cfg.base_url);
  if (!url) return url.status();
  HttpClientRequest req;
  req.host = url->host;
  req.port = url->port;
  req.target = url->path + "/v1/models";
  if (!cfg.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + cfg.api_key);
  req.timeout_s = std::min(cfg.timeout_s, 60.0);
  req.connect_timeout_s = cfg.connect_timeout_s;
  req.max_body_bytes = 16 << 20;
  auto resp = http_request(req);
  if (!resp) return resp.status().with_context("GET " + req.target);
  if (resp->status != 200) return Status::errorf("GET {}: HTTP {}: {}", req.target, resp->status, snippet(resp->body));
  auto j = nlohmann::json::parse(resp->body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    auto d = j.find("data");
    if (d != j.end() && d->is_array() && !d->empty() && (*d)[0].is_object()) {
      auto id = (*d)[0].find("id");
      if (id != (*d)[0].end() && id->is_string() && !id->get<std::string>().empty()) return id->get<std::string>();
    }
  }
  return Status::errorf("GET {}: no model id in the reply (use --model): {}", req.target, snippet(resp->body));
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
  return run_serve_bench_workload(cfg, model, *w, progress);
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
  auto block = [&](const std::string& head, const std::string& name, const ServeBenchStats& st) {
    title(head, '-');
    line("Mean " + name + " (ms):", fmt_num(st.mean, 2));
    line("Median " + name + " (ms):", fmt_num(st.median, 2));
    line("P90 " + name + " (ms):", fmt_num(st.p90, 2));
    line("P99 " + name + " (ms):", fmt_num(st.p99, 2));
  };
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
                        {"num_warmups", c.num_warmups}};
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
                        {"e2e_ms", stats_json(s.e2e_ms)}};
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
