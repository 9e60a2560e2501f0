// Server metrics in the Prometheus text format (names like vLLM's `vllm:`
// metrics, prefixed `ember:`): request counts by finish reason, token
// counters, latency histograms (time to first token, time per output token,
// end-to-end, queue time), plus the engine's gauges (running / waiting
// requests, KV-cache usage, prefix-cache hits) read at scrape time, and the
// cost: process CPU seconds since the metrics were created (the server's
// start, after loading the model) per 1,000 generated tokens.
// Thread-safe: observe_* may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ember {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double x);
  // Appends "# TYPE" and the _bucket/_sum/_count lines for `name`.
  void render(const std::string& name, const std::string& help, std::string* out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative)
  double sum_ = 0;
  int64_t count_ = 0;
};

// What one finished request contributes.
struct RequestRecord {
  std::string finish_reason;  // "stop", "length", "abort", "error"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  double ttft = -1;           // seconds; < 0: no token produced
  double e2e = 0;             // seconds from arrival to the end
  double queue = -1;          // seconds waiting before first scheduled; < 0: unknown
};

class ServerMetrics {
 public:
  ServerMetrics();
  void observe_request(const RequestRecord& r);
  void observe_http(int status);
  // The whole /metrics page; `engine` is a snapshot of the engine counters.
  std::string render(const EngineStats& engine, const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> finished_;  // by finish reason
  std::map<int, int64_t> http_;              // by status code
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, tpot_, e2e_, queue_, prompt_len_, gen_len_;
  double cpu0_ = 0;  // process CPU seconds at construction
};

}  // namespace ember
