// Proposer: the draft side of speculative decoding. Given requests that are
// decoding, it proposes up to k continuation tokens for each (and, for a
// proposer that samples from a distribution, the draft distribution q each
// token was drawn from). The engine verifies the proposals with one target
// forward pass over the k+1 positions of every speculating request, mixed
// into the step's ragged batch (see docs/engine.md, "Speculative decoding").
//
// Proposals are made for many requests at once so that a model-based
// proposer can run one batched forward per draft step.
//
// Ownership and threading: owned by the Engine, called on the engine thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "engine/scheduler.h"

namespace ember {

// kDraft: a smaller model with the target's vocabulary (draft_proposer.h);
// kLayerSkip: the target itself with layers skipped (layerskip.h).
enum class SpecMethod { kNone, kNgram, kDraft, kLayerSkip };

// Parses "ngram" / "draft" / "layerskip" / "none" (the --speculative-method values ember knows).
Result<SpecMethod> parse_spec_method(const std::string& s);
const char* spec_method_name(SpecMethod m);

struct Proposal {
  std::vector<int32_t> tokens;  // [k] draft tokens, k <= the asked maximum
  // Empty: every draft token is a point mass (q(token) = 1, e.g. n-gram
  // lookup). Otherwise [k][n_vocab] draft probabilities, row j the
  // distribution tokens[j] was drawn from (rows sum to 1).
  std::vector<std::vector<float>> q;
};

struct ProposeItem {
  const Request* req = nullptr;  // decoding: every token but the last is in the KV cache
  int max_k = 0;                 // propose at most this many tokens (>= 1)
  Proposal* out = nullptr;       // filled by propose() (cleared first)
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual SpecMethod method() const = 0;
  // Fills items[i].out for every item (an empty proposal is allowed).
  virtual Status propose(const std::vector<ProposeItem>& items) = 0;
  // The request finished or was aborted (drop any per-request state).
  virtual void release(const Request& r) {}
  // Called after scheduling, before the target's forward: the verification
  // slices (n_spec > 0) hold their KV slots. A proposer whose draft steps
  // ran the target's own layers may write the K/V it computed into the
  // slices' pages and set ScheduledRequest::n_pre / pre_hidden so the
  // target computes only the positions after them.
  virtual void before_verify(std::vector<ScheduledRequest>& slices) {}
};

}  // namespace ember
