// Structured output for `ember serve`: compiles a request's output
// constraint (response_format json_object / json_schema, guided_regex,
// guided_grammar, guided_choice, guided_json) into a grammar over the
// model's vocabulary, caching compiled grammars by their text, and builds
// the engine's per-request LogitsProcessor that applies logit_bias and the
// grammar's token mask (end-of-generation tokens only where the grammar may
// end).
//
// Threading: StructuredOutput is called on HTTP handler threads (its cache
// is locked); the processors run on the engine thread, one per sample (a
// request's samples share one stack pool, on that thread only).
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
  // The processor for one prompt, or nullptr when there is nothing to do.
  std::shared_ptr<const LogitsProcessor> processor(std::shared_ptr<const grammar::CompiledGrammar> g,
                                                   const std::vector<std::pair<int32_t, float>>& logit_bias,
                                                   const std::vector<int32_t>& stop_ids) const;
  const grammar::TokenVocab& vocab() const { return *vocab_; }

 private:
  std::optional<std::string> tool_call_grammar(const OutputConstraint& c, const std::string& body_text, ApiError* err);

  std::shared_ptr<const grammar::TokenVocab> vocab_;
  std::mutex mu_;
  // LRU cache of compiled grammars by GBNF text.
  std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> by_text_;
  static constexpr size_t kCacheSize = 64;
};

// Applies logit biases, then masks every token the grammar does not admit
// (exposed for tests).
class ConstrainedLogits final : public LogitsProcessor {
 public:
  ConstrainedLogits(std::shared_ptr<const grammar::CompiledGrammar> g, std::vector<std::pair<int32_t, float>> bias,
                    std::vector<int32_t> stop_ids);
  void process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits, int n_vocab) override;
  void accept(int32_t token) override;
  bool rollback(int k) override;
  std::unique_ptr<LogitsProcessor> clone() const override;

 private:
  std::shared_ptr<const grammar::CompiledGrammar> g_;
  std::vector<std::pair<int32_t, float>> bias_;
  std::vector<int32_t> stop_ids_;
  std::shared_ptr<grammar::StackPool> pool_;
  std::unique_ptr<grammar::GrammarMatcher> matcher_;
  std::vector<uint64_t> bits_;
};

}  // namespace ember
