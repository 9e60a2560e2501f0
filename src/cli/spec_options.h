// Speculative-decoding flags shared by `ember run`, `ember serve` and
// `ember bench` (vLLM's names where it has them): --speculative-method,
// --num-speculative-tokens, --ngram-min/--ngram-max (vLLM's
// prompt_lookup_min/max), --speculative-max-running (engine-wide switch-off),
// --speculative-model PATH (draft), --skip-layers SPEC (layerskip),
// --speculative-adaptive and --speculative-verify-cost (adaptive k),
// --draft-vocab N / --draft-vocab-text FILE (truncated draft head).
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "engine/engine.h"

namespace ember::cli {

struct SpecOptions {
  std::string method;  // empty: not given
  int k = 4;
  int ngram_min = 1, ngram_max = 4;
  bool ngram_k_by_match = false;  // --ngram-k-by-match
  int ngram_first = 0;            // --ngram-first
  int draft_k = 0;                // --draft-k
  bool draft_recompute_kv = false;  // --draft-recompute-kv
  int draft_vocab_context = 2048;   // --draft-vocab-context
  int max_running = kDefaultSpecMaxRunning;
  std::string draft_model;  // --speculative-model
  std::string skip_layers = "last-third";  // --skip-layers
  int draft_vocab = 0;             // --draft-vocab: truncated draft head of this many tokens (0: full)
  std::string draft_vocab_text;    // --draft-vocab-text: frequencies counted over this file
  bool adaptive = false;     // --speculative-adaptive
  float verify_cost = -1.f;  // --speculative-verify-cost (< 0: measured)
  static constexpr int kDefaultSpecMaxRunning = 4;

  void add_to(ArgParser& p);
  bool given() const { return !method.empty(); }
  // The engine's SpecConfig; an error names the flag.
  Result<SpecConfig> to_config() const;
  // For draft / layerskip: loads the draft model (checking that its
  // vocabulary is the target's, tokenizer files of Hugging Face folders
  // included) or builds the layer-skipped target into *holder, and points
  // c->draft_model at it; with --draft-vocab N its head scores only the N
  // most frequent tokens (engine/speculative/draft_head.h). Nothing to do for other
  // methods.
  Status load_draft(const Model& target, std::unique_ptr<Model>* holder, SpecConfig* c) const;
};

}  // namespace ember::cli
