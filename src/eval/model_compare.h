// How far a model (e.g. a quantized copy) is from a reference model on a
// token sequence: KL divergence of its next-token distributions from the
// reference's, top-1 agreement and the perplexity of both. `ember quantize`
// prints this for every file it writes, so a quantization that damages a
// model is visible at once instead of silently degrading its output.
//
// Per position p (predicting token p + 1), with P the reference's softmax
// and Q the model's, both computed in double from the f32 logits:
//   KL_p = sum_i P_i (log P_i - log Q_i)   (>= 0; 0 iff P == Q)
//   top-1 agreement: argmax P == argmax Q
//   perplexity = exp(mean_p -log softmax(logits_p)[token p + 1])
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace ember {

struct ModelComparison {
  int64_t n_positions = 0;  // scored positions (tokens - 1)
  double kl_mean = 0, kl_max = 0;
  double kl_p99 = 0;  // 99th percentile of the per-position KL (nearest rank)
  double top1_agreement = 0;  // fraction in [0, 1]
  double ppl_reference = 0, ppl_model = 0;
  // A model that cannot produce some tokens (logit -inf: a trimmed output
  // vocabulary): the mean reference probability of those tokens, and the
  // positions whose next token is one of them (left out of both
  // perplexities; the KL is over the model's support, renormalized).
  double lost_mass = 0;
  int64_t n_unreachable = 0;
  // Mean of KL(Q || P) = sum_i Q_i (log Q_i - log P_i) over the model's
  // support, computed at the positions where the model cannot produce some
  // tokens (0 elsewhere; so 0 for a model without a trimmed vocabulary).
  // Finite where the forward KL is not (a trimmed vocabulary puts Q_i = 0
  // where P_i > 0, so KL(P || Q) is infinite); for a pure trim (Q = P
  // renormalized over the kept tokens) it is -log(1 - lost) per position:
  // how far the trimmed model's output is from the source's, which the
  // renormalized kl_mean (0 for a pure trim) does not say.
  double kl_reverse_mean = 0;
  // Mixture-of-Experts models: distinct experts one MoE layer read per step,
  // averaged over the steps (ForwardContext::moe_stats; 0 without MoE).
  double experts_per_step_reference = 0, experts_per_step_model = 0;
};

// From logits rows [n, n_vocab] of both models for the same tokens[0..n):
// positions 0..n-2 are scored (row p predicts tokens[p + 1]). n >= 2.
ModelComparison compare_logits(const float* reference, const float* model, const int32_t* tokens, int64_t n,
                               int n_vocab);

// Runs both models over tokens (one window from an empty cache) and compares
// them. The vocabularies must match; 2 <= tokens.size() <= 4096.
Result<ModelComparison> compare_models(const Model& reference, const Model& model, const std::vector<int32_t>& tokens,
                                       ThreadPool& pool);

// Held-out evaluation over several windows: tokens[0..) cut into windows of
// n_ctx positions (the first replaced by bos_id when >= 0, as perplexity
// tools do), at most max_windows of them (0: all whole windows), each run
// from an empty cache in both models; the statistics pool every scored
// position of every window. Needs one whole window.
//
// Positions [score_from, n_ctx - 1) of each window are scored (0: all;
// llama-perplexity --kl-divergence scores from n_ctx / 2, the first half
// being context only). Each window runs in chunks of `chunk` positions that
// continue the cache, so only chunk x n_vocab logits of each side are held
// at once (a 4096-token window of a 262k vocabulary would be 4.3 GB per
// side); chunking does not change any bit (batch invariance).
struct WindowedCompareOptions {
  int64_t n_ctx = 512;
  int64_t max_windows = 0;
  int32_t bos_id = -1;
  int64_t score_from = 0;  // in [0, n_ctx - 1)
  int64_t chunk = 256;     // >= 1
  // KV cache formats of each side (kernels/kv_types.h, rotation included;
  // checked against the models): the KV-dtype quality table compares one
  // model with itself, f32 cache against a compressed one.
  KvTypes reference_kv, model_kv;
  // > 0: windows run `concurrency` at a time as concurrent sequences
  // decoding in lockstep, one token of each per step (teacher-forced:
  // each window's own tokens), on both sides: what a server's batched
  // decode computes, where batch-aware expert sharing (kernels/moe.h) sees
  // that many decode tokens per step. Exact routing gives the same bits
  // as the chunked run (batch invariance). 0: chunks of one window.
  int concurrency = 0;
};
Result<ModelComparison> compare_models_windows(const Model& reference, const Model& model,
                                               const std::vector<int32_t>& tokens, const WindowedCompareOptions& o,
                                               ThreadPool& pool);

// The same for several KV formats of MODEL at once (o.model_kv ignored):
// one reference pass per window, one result per entry of model_kvs, each
// equal to what compare_models_windows gives for that format alone.
Result<std::vector<ModelComparison>> compare_models_windows(const Model& reference, const Model& model,
                                                            const std::vector<int32_t>& tokens,
                                                            const WindowedCompareOptions& o,
                                                            const std::vector<KvTypes>& model_kvs, ThreadPool& pool);

}  // namespace ember
