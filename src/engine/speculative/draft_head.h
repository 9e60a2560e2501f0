// Truncated draft head: which tokens a draft's output head scores when it
// scores only the most frequent part of the vocabulary (--draft-vocab N).
// Gemma 3's head has 262k rows of 640 (168M of its 270M parameters), so a
// draft step that scores every token reads most of a target step's bytes;
// a head of the N most frequent tokens reads N / n_vocab of that. The
// draft then proposes only those tokens (q = 0 elsewhere); exactness does
// not depend on it, the verifier scores the full vocabulary.
//
// Frequency: counted once over a text tokenized with the target's tokenizer
// (the CLI's --draft-vocab-text FILE), ties and the rest ranked by a proxy
// the file carries: the tokenizer's scores (tokenizer.ggml.scores:
// SentencePiece's unigram log-probabilities or negated merge ranks, higher
// = more frequent), then the id (byte-level BPE ids follow merge order).
// Control and unused tokens (token types 3 and 5) are left out, except the
// end-of-sequence / end-of-turn ids, which are always kept.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/metadata.h"
#include "core/status.h"

namespace ember {

// The n head tokens (ascending ids) for a vocabulary of n_vocab tokens
// described by `md` (the target's metadata; keys it lacks are treated as
// all-normal tokens with score 0), counting frequencies over `text` (token
// ids; may be empty). Errors: n out of [1, n_vocab], a text id out of range.
Result<std::vector<int32_t>> rank_head_tokens(const Metadata& md, int n_vocab, const std::vector<int32_t>& text,
                                              int n);

}  // namespace ember
