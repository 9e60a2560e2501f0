// Speculative-decoding flags; see spec_options.h.
#include "cli/spec_options.h"

namespace ember::cli {

void SpecOptions::add_to(ArgParser& p) {
  p.option("--speculative-method", &method, "M",
           "speculative decoding: ngram (prompt lookup) or none (default: off)");
  p.option("--num-speculative-tokens", &k, "K", "draft tokens per step and request (default 4)");
  p.option("--ngram-min", &ngram_min, "N", "n-gram lookup: shortest suffix matched (default 1)");
  p.option("--ngram-max", &ngram_max, "N", "n-gram lookup: longest suffix matched, tried first (default 4)");
  p.option("--speculative-max-running", &max_running, "N",
           "no speculation in steps with more running sequences than this, 0 = always (default 4)");
}

Result<SpecConfig> SpecOptions::to_config() const {
  SpecConfig c;
  if (method.empty()) return c;
  auto m = parse_spec_method(method);
  if (!m) return Status::errorf("--speculative-method: {}", m.status().message());
  c.method = m.value();
  if (c.method == SpecMethod::kNone) return c;
  c.num_speculative_tokens = k;
  c.ngram_min = ngram_min;
  c.ngram_max = ngram_max;
  c.max_running = max_running;
  EMBER_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace ember::cli
