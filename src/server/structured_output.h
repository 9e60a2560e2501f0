// Structured output for `ember serve`: compiles a request's output
// constraint (response_format json_object / json_schema, guided_regex,
// guided_grammar, guided_choice, guided_json) into a grammar over the
// model's vocabulary, caching compiled grammars by their text, and builds
// the engine's per-request LogitsProcessor that applies logit_bias and the
// grammar's token mask (end-of-generation tokens only where the grammar may
// end).
//
// Threading: StructuredOutput is called on HTTP handler threads (its cache
// is locked); the processors run on the engine's threads, one per sample
// (process() on any pool thread; a request's samples share one stack pool,
// locked by a mutex they share, so two samples may process() at once:
// each sample's next mask is computed ahead on the StructuredOutput's mask
// worker thread, grammar/mask_worker.h, while the forward pass runs).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/logits_processor.h"
#include "grammar/mask_worker.h"
#include "grammar/token_mask.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace ember {

class StructuredOutput {
 public:
  explicit StructuredOutput(const Tokenizer& tok);

  // The compiled constraint of a request (nullptr for none); `body_text` is
  // the raw request body (schemas are read from it in their key order).
  std::shared_ptr<const grammar::CompiledGrammar> compile(const OutputConstraint& c, const std::string& body_text,
                                                          ApiError* err);
  // The processor for one prompt, or nullptr when there is nothing to do;
  // `forced_jumps`: the grammar's forced continuations are appended
  // unsampled (LogitsProcessor::forced_tokens).
  // `trigger`: the grammar applies only once the output contains this text
  // (from the trigger on; ConstrainedLogits).
  std::shared_ptr<const LogitsProcessor> processor(std::shared_ptr<const grammar::CompiledGrammar> g,
                                                   const std::vector<std::pair<int32_t, float>>& logit_bias,
                                                   const std::vector<int32_t>& stop_ids, bool forced_jumps = true,
                                                   const std::string& trigger = {}) const;
  const grammar::TokenVocab& vocab() const { return *vocab_; }
  // A forced call (c.kind kToolCall) in the harmony format: the processor
  // for the call after its header (server/harmony_calls.h), or nullptr with
  // *err set.
  std::shared_ptr<const LogitsProcessor> harmony_call(const OutputConstraint& c, const std::string& body_text,
                                                      const std::vector<int32_t>& stop_ids, bool forced_jumps,
                                                      ApiError* err);

 private:
  std::optional<std::string> tool_call_grammar(const OutputConstraint& c, const std::string& body_text, ApiError* err);
  // GBNF text -> compiled grammar, through the cache.
  std::shared_ptr<const grammar::CompiledGrammar> compile_gbnf(const std::string& gbnf, const std::string& param,
                                                               ApiError* err);

  const Tokenizer& tok_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  std::shared_ptr<grammar::MaskWorker> worker_;  // masks ahead of use, for every request
  std::mutex mu_;
  // LRU cache of compiled grammars by GBNF text.
  std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> by_text_;
  static constexpr size_t kCacheSize = 64;
};

// Applies logit biases, then masks every token the grammar does not admit
// (exposed for tests). With a tokenizer (`jump_tok`), forced_tokens() gives
// the grammar's forced continuation (StackPool::forced_bytes, at most
// kMaxForcedBytes) tokenized canonically: the tokenizer's encoding of those
// bytes alone, less its last token unless the grammar is complete after
// them (the last token may merge with what the model writes next), cut at
// the first token the grammar would not admit. The tokenizer must outlive
// the processor (the server's does). With a worker, the mask of the state
// after each accept() is computed there ahead of process().
// With a `trigger`, the grammar is off (only the biases apply) until the
// accepted tokens' text contains the trigger; the grammar, whose text must
// begin with the trigger, then takes that text from the trigger on and
// applies from the next token (tool_choice "auto": free text, then calls
// that always parse once the model writes a call marker).
class ConstrainedLogits final : public LogitsProcessor {
 public:
  static constexpr size_t kMaxForcedBytes = 256;
  ConstrainedLogits(std::shared_ptr<const grammar::CompiledGrammar> g, std::vector<std::pair<int32_t, float>> bias,
                    std::vector<int32_t> stop_ids, const Tokenizer* jump_tok = nullptr,
                    std::shared_ptr<grammar::MaskWorker> worker = nullptr, std::string trigger = {});
  void process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits, int n_vocab) override;
  void accept(int32_t token) override;
  void forced_tokens(std::vector<int32_t>* out) override;
  std::unique_ptr<LogitsProcessor> clone() const override;

 private:
  void prefetch();
  const Tokenizer* jump_tok_ = nullptr;
  std::shared_ptr<grammar::MaskWorker> worker_;
  std::shared_ptr<std::mutex> pool_mu_;             // guards pool_ (shared with clones and mask jobs)
  std::unique_ptr<grammar::MaskPrefetch> prefetch_;  // with a worker
  std::shared_ptr<const grammar::CompiledGrammar> g_;
  std::vector<std::pair<int32_t, float>> bias_;
  std::vector<int32_t> stop_ids_;
  std::shared_ptr<grammar::StackPool> pool_;
  std::unique_ptr<grammar::GrammarMatcher> matcher_;
  std::vector<uint64_t> bits_;
  std::string trigger_;  // "" or the text that turns the grammar on
  bool armed_ = true;    // the grammar applies
  std::string seen_;     // before the trigger: the recent text
};

}  // namespace ember
