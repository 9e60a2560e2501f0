// Measured cost of each layer of a model, for balancing pipeline stages by
// time rather than by weight bytes (`--pipeline-balance measured`,
// model/shard.h balance_stages): layers whose bytes say little about their
// time (a sliding window, Mixture-of-Experts routing, types whose kernels
// differ in speed, the output head on the last stage) are weighed as they
// run.
//
// Ownership: borrows the model and the pool for the call. Threading: the
// caller's thread (the pool parallelises inside ops).
#pragma once

#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace ember {

// Seconds each layer of `model` (a whole model, or a pipeline stage that
// embeds) takes on a step of `tokens` tokens of one sequence (a small
// batch, as a pipeline's micro-batches of decode tokens are), the median
// of `reps` timed passes after one untimed pass (which also pages the
// weights in). The output head's time (output norm and matmul of one row
// per token) is added to the last layer's: it runs on the last stage.
// Returns n_layer positive values. Errors: a model that does not embed
// (a later pipeline stage), tokens or reps out of [1, 64].
Result<std::vector<double>> measure_layer_seconds(const Model& model, ThreadPool& pool, int tokens = 4, int reps = 5);

}  // namespace ember
