// Self-speculation by layer skipping: the draft model is the target itself
// with a subset of its transformer blocks left out (the residual stream
// passes a skipped block unchanged), run by a DraftProposer like any draft
// model. The skipped model shares the target's weights (same mapped file,
// no copy of any matrix) but has its own KV cache: the kept layers' inputs
// differ from the target's after the first skipped layer, so their K/V
// differ too and the target's KV cannot be reused (only the layers before
// the first skipped one would match). Exactness does not depend on the
// draft: the verifier checks every draft against the full target.
//
// The same function also truncates the output head of a draft (draft_head.h).
//
// Ownership: the returned Model borrows nothing from `target` (it holds its
// own references to the mapped file); it may outlive it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace ember {

// Layers to skip of an n_layer model, ascending. SPEC: "odd" (1, 3, 5 ...),
// "even" (0, 2, 4 ...), "last-third" / "last-half" (that many layers
// before the last one, which feeds the head and is kept), "middle-third",
// a comma list of indices and ranges ("4,6,8-11"), or "none" (an empty
// set: the draft is the target's whole stack, made cheaper only by a
// truncated head, draft_head.h). Errors: an unknown word, an index out of
// range, or a set that skips every layer (or, other than "none", none).
Result<std::vector<int>> parse_skip_layers(const std::string& spec, int n_layer);

// The target without the given layers (ascending, in range, not all).
Result<std::unique_ptr<Model>> make_layer_skip_model(const Model& target, const std::vector<int>& skip);

// A draft view of `model`: the layers in `skip` left out (may be empty) and,
// when head_tokens is not empty (ascending ids, draft_head.h), an output
// head that scores only those tokens: a copy of their rows of the output
// matrix (the only weights copied: head_tokens.size() rows of the head's
// type, owned by the returned Model), config().head_tokens set, logits rows
// head_tokens.size() wide. Everything else views the model's mapped file.
Result<std::unique_ptr<Model>> make_draft_view(const Model& model, const std::vector<int>& skip,
                                               const std::vector<int32_t>& head_tokens);

}  // namespace ember
