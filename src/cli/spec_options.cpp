// Speculative-decoding flags; see spec_options.h.
#include "cli/spec_options.h"

#include "cli/common.h"

#include "engine/speculative/draft_head.h"
#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/layerskip.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {

void SpecOptions::add_to(ArgParser& p) {
  p.option("--speculative-method", &method, "M",
           "speculative decoding: ngram (prompt lookup), draft (--speculative-model), layerskip (the target with "
           "--skip-layers skipped) or none (default: off)");
  p.option("--num-speculative-tokens", &k, "K", "draft tokens per step and request (default 4)");
  p.option("--ngram-min", &ngram_min, "N", "n-gram lookup: shortest suffix matched (default 1)");
  p.option("--ngram-max", &ngram_max, "N", "n-gram lookup: longest suffix matched, tried first (default 4)");
  p.flag("--ngram-k-by-match", &ngram_k_by_match,
         "n-gram lookup: a match of n tokens proposes at most 2^(n-1) drafts (1, 2, 4, 8; at most K)");
  p.option("--ngram-first", &ngram_first, "N",
           "draft / layerskip: n-gram lookup first; a match of at least N tokens proposes its continuation (free), "
           "the draft model drafts only for the other requests (default 0: the draft model only)");
  p.option("--draft-k", &draft_k, "K",
           "with --ngram-first: the draft model's proposals are at most K tokens (default: --num-speculative-tokens)");
  p.flag("--draft-recompute-kv", &draft_recompute_kv,
         "layerskip: the draft runs every token itself, even where its layers are the target's first ones and it "
         "could copy the target's K/V (for comparison)");
  p.option("--speculative-max-running", &max_running, "N",
           "no speculation in steps with more running sequences than this, 0 = always (default 4)");
  p.option("--speculative-model", &draft_model, "PATH",
           "draft model for --speculative-method draft (same tokenizer as the target)");
  p.option("--skip-layers", &skip_layers, "SPEC",
           "layers the layerskip draft skips: odd, even, last-third, last-half, middle-third, a list like 4,6,8-11, "
           "or none (every layer kept; with --draft-vocab the draft is the target with a truncated head) "
           "(default last-third)");
  p.option("--draft-vocab", &draft_vocab, "N",
           "draft / layerskip: the draft's output head scores only the N most frequent tokens (default 0: all)");
  p.option("--draft-vocab-context", &draft_vocab_context, "N",
           "--draft-vocab with a view of the target (layerskip): the draft also scores up to N tokens of each "
           "request's own prompt and output that its head lacks (default 2048; 0: the head's tokens only)");
  p.option("--draft-vocab-text", &draft_vocab_text, "FILE",
           "--draft-vocab: count token frequencies over this text (default: the tokenizer's scores rank them)");
  p.flag("--speculative-adaptive", &adaptive,
         "adaptive k: per request and step 0..K drafts from its acceptance and the measured draft cost");
  p.option("--speculative-verify-cost", &verify_cost, "C",
           "adaptive k: cost of one more verified position, as a fraction of a decode step (default -1: measured "
           "from the step times)");
}

namespace {
// The vocabulary keys of a model file's metadata, from the tokenizer files
// of a Hugging Face folder when the metadata has none.
Metadata vocabulary_metadata(const Model& m) {
  Metadata md = m.file().metadata;
  if (const std::string* dir = md.get_string("ember.hf.dir"); dir && !md.find("tokenizer.ggml.tokens"))
    (void)metadata_from_hf_tokenizer(*dir, &md);  // no tokenizer files: compared by size only
  return md;
}

// The --draft-vocab head tokens: ranked by their counts in --draft-vocab-text
// (tokenized with the target's tokenizer), then the tokenizer's scores.
Result<std::vector<int32_t>> head_tokens(const Model& target, int n, const std::string& text_path) {
  const Metadata md = vocabulary_metadata(target);
  std::vector<int32_t> text;
  if (!text_path.empty()) {
    auto txt = read_all(text_path);
    if (!txt) return Status::errorf("--draft-vocab-text: {}", txt.status().message());
    auto tk = Tokenizer::from_metadata(md);
    if (!tk) return Status::errorf("--draft-vocab-text: the target's tokenizer: {}", tk.status().message());
    text = tk.value()->encode(txt.value());
  }
  auto r = rank_head_tokens(md, target.config().n_vocab, text, n);
  if (!r) return Status::errorf("--draft-vocab: {}", r.status().message());
  return r;
}
}  // namespace

Status SpecOptions::load_draft(const Model& target, std::unique_ptr<Model>* holder, SpecConfig* c) const {
  if (draft_vocab != 0 && c->method != SpecMethod::kLayerSkip && c->method != SpecMethod::kDraft)
    return Status::error("--draft-vocab is for --speculative-method draft or layerskip");
  if (draft_vocab < 0) return Status::errorf("--draft-vocab must be >= 0 (got {})", draft_vocab);
  std::vector<int32_t> head;
  if (draft_vocab > 0) {
    auto h = head_tokens(target, draft_vocab, draft_vocab_text);
    if (!h) return h.status();
    head = std::move(h.value());
  }
  if (c->method == SpecMethod::kLayerSkip) {
    auto skip = parse_skip_layers(skip_layers, target.config().n_layer);
    if (!skip) return Status::errorf("--skip-layers: {}", skip.status().message());
    if (skip.value().empty() && head.empty())
      return Status::error("--skip-layers none needs --draft-vocab N: without a truncated head the draft would be "
                           "the target itself");
    auto d = make_draft_view(target, skip.value(), head);
    if (!d) return d.status();
    *holder = std::move(d.value());
  } else if (c->method == SpecMethod::kDraft) {
    if (draft_model.empty()) return Status::error("--speculative-method draft needs --speculative-model PATH");
    auto d = Model::load(draft_model);
    if (!d) return Status::errorf("--speculative-model: {}", d.status().message());
    const Metadata tv = vocabulary_metadata(target), dv = vocabulary_metadata(*d.value());
    if (Status st = check_same_vocabulary(tv, target.config().n_vocab, dv, d.value()->config().n_vocab); !st)
      return Status::errorf("--speculative-model {}: {}", draft_model, st.message());
    if (!head.empty()) {
      auto v = make_draft_view(*d.value(), {}, head);
      if (!v) return v.status().with_context("--draft-vocab");
      d = std::move(v);
    }
    prepare_for_cpu(*d.value());
    *holder = std::move(d.value());
  } else {
    return Status::ok();
  }
  c->draft_model = holder->get();
  return Status::ok();
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
  c.ngram_k_by_match = ngram_k_by_match;
  c.ngram_first = ngram_first;
  c.draft_k = draft_k;
  c.share_kv = !draft_recompute_kv;
  c.draft_context_tokens = draft_vocab_context;
  c.max_running = max_running;
  c.adaptive = adaptive;
  c.verify_cost = verify_cost;
  if (c.method == SpecMethod::kDraft && draft_model.empty())
    return Status::error("--speculative-method draft needs --speculative-model PATH");
  if (c.method != SpecMethod::kDraft && !draft_model.empty())
    return Status::error("--speculative-model is for --speculative-method draft");
  if (c.method == SpecMethod::kDraft || c.method == SpecMethod::kLayerSkip) return c;  // validated with the model
  EMBER_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace ember::cli
