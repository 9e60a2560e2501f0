// Speculative-decoding flags shared by `ember run`, `ember serve` and
// `ember bench` (vLLM's names where it has them): --speculative-method,
// --num-speculative-tokens, --ngram-min/--ngram-max (vLLM's
// prompt_lookup_min/max), --speculative-max-running (engine-wide switch-off).
#pragma once

#include <string>

#include "cli/args.h"
#include "engine/engine.h"

namespace ember::cli {

struct SpecOptions {
  std::string method;  // empty: not given
  int k = 4;
  int ngram_min = 1, ngram_max = 4;
  int max_running = kDefaultSpecMaxRunning;
  static constexpr int kDefaultSpecMaxRunning = 4;

  void add_to(ArgParser& p);
  bool given() const { return !method.empty(); }
  // The engine's SpecConfig; an error names the flag.
  Result<SpecConfig> to_config() const;
};

}  // namespace ember::cli
