// Workloads of the serving benchmark (see serve_bench.h): the seeded
// arrival schedule, random prompts of common words, and JSONL datasets.
#include "bench/serve_bench.h"

#include <algorithm>
#include <cmath>
#include <fstream>

namespace ember {

namespace {

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

}  // namespace ember
