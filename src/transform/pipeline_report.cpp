// The report of a written file against its source (KL / top-1 / perplexity,
// sizes, decode speed); see pipeline.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "eval/model_compare.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "tokenizer/tokenizer.h"
#include "transform/pipeline.h"

namespace ember {
namespace {

// Parameters of a model: every tensor element; nonzero: of the 2-D weights
// (dequantized), the rest counted whole.
struct Sizes {
  int64_t params = 0, nonzero = 0;
  uintmax_t file_bytes = 0;
};

Sizes model_sizes(const Model& m, const std::string& path) {
  Sizes s;
  std::error_code ec;
  s.file_bytes = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  std::vector<float> row;
  for (const auto& [name, t] : m.file().tensors) {
    s.params += t.nelements();
    if (t.n_dims != 2) {
      s.nonzero += t.nelements();
      continue;
    }
    const int64_t n_in = t.ne[0];
    row.resize(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < t.nrows(); ++r) {
      if (t.type == DType::kF32) std::copy_n(reinterpret_cast<const float*>(t.row(r)), n_in, row.begin());
      else dequantize_row_ref(t.type, t.row(r), row.data(), n_in);
      for (float x : row) s.nonzero += x != 0.0f;
    }
  }
  return s;
}

// Tokens per second of single-token decode steps after a short prompt.
Result<double> decode_speed(const Model& m, const std::vector<int32_t>& tokens, int n_decode, ThreadPool& pool) {
  constexpr int kPrompt = 32;
  if (static_cast<int>(tokens.size()) < kPrompt + n_decode) return Status::error("speed text too short");
  ForwardContext ctx(m, pool, kPrompt);
  ContiguousKvCache cache(m.config(), kPrompt + n_decode);
  EMBER_RETURN_IF_ERROR(ctx.forward(tokens.data(), kPrompt, 0, cache, nullptr));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_decode; ++i)
    EMBER_RETURN_IF_ERROR(ctx.forward(tokens.data() + kPrompt + i, 1, kPrompt + i, cache, nullptr));
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return n_decode / dt;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string millions(int64_t n) { return fmt::format("{:.2f} M", n / 1e6); }

}  // namespace

bool report_against_source(const std::string& in, const std::string& out, const ReportOptions& o,
                           const PipelineLog& log, ThreadPool& pool) {
  auto skipped = [&](const std::string& why) {
    if (log.note) log.note("quality check skipped: " + why);
    return false;
  };
  auto ref = Model::load(in);
  auto mod = Model::load(out);
  if (!ref || !mod) return skipped((!ref ? ref.status() : mod.status()).message());
  auto tok = Tokenizer::from_metadata((*mod)->file().metadata);
  if (!tok) return skipped("tokenizer: " + tok.status().message());
  Result<ModelComparison> c = Status::error("no comparison");
  std::vector<int32_t> ids = (*tok)->encode(o.text, {.add_bos = false});
  if (static_cast<int64_t>(ids.size()) >= 512) {  // windows of 512 (BOS first), as `ember eval kl`
    WindowedCompareOptions w;
    w.max_windows = o.windows;
    w.bos_id = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
    c = compare_models_windows(**ref, **mod, ids, w, pool);
  } else {  // a short text: one window of all of it
    ids = (*tok)->encode(o.text);
    c = compare_models(**ref, **mod, ids, pool);
  }
  if (!c) return skipped(c.status().message());
  if (log.info) {
    log.info(fmt::format("quality vs {} over {} tokens: KL divergence mean {:.5f}, max {:.4f}; top-1 agreement "
                         "{:.1f}%; perplexity {:.3f} -> {:.3f} ({:+.2f}%); KL p99 {:.4f}",
                         in, c->n_positions, c->kl_mean, c->kl_max, 100.0 * c->top1_agreement, c->ppl_reference,
                         c->ppl_model, 100.0 * (c->ppl_model / c->ppl_reference - 1.0), c->kl_p99));
    if (c->lost_mass > 0 || c->n_unreachable > 0)
      log.info(fmt::format("trimmed vocabulary: {:.3f}% of the source's probability on tokens the output cannot "
                           "produce (mean); {} of {} next tokens unreachable (left out of both perplexities; KL "
                           "over the kept tokens); KL(output || source) mean {:.5f}",
                           100.0 * c->lost_mass, c->n_unreachable, c->n_positions, c->kl_reverse_mean));
  }
  if (o.sizes && log.info) {
    const Sizes a = model_sizes(**ref, in), b = model_sizes(**mod, out);
    log.info(fmt::format("size: parameters {} -> {} ({:+.1f}%), nonzero {} -> {} ({:+.1f}%); file {:.1f} MiB -> "
                         "{:.1f} MiB ({:+.1f}%)",
                         millions(a.params), millions(b.params), 100.0 * (double(b.params) / a.params - 1),
                         millions(a.nonzero), millions(b.nonzero), 100.0 * (double(b.nonzero) / a.nonzero - 1),
                         a.file_bytes / 1048576.0, b.file_bytes / 1048576.0,
                         a.file_bytes ? 100.0 * (double(b.file_bytes) / a.file_bytes - 1) : 0.0));
  }
  if (o.speed_tokens > 0 && log.info) {
    (*ref)->interleave_weights(pool.size());
    (*mod)->interleave_weights(pool.size());
    (*ref)->build_activation_columns(pool.size());  // activation sparsity: the column copies decode reads
    (*mod)->build_activation_columns(pool.size());
    std::vector<double> sa, sb;
    for (int run = 0; run < std::max(1, o.speed_runs); ++run)  // alternating, medians
      for (int side = 0; side < 2; ++side) {
        auto s = decode_speed(side ? **mod : **ref, ids, o.speed_tokens, pool);
        if (!s) return skipped("decode speed: " + s.status().message());
        (side ? sb : sa).push_back(*s);
      }
    const double a = median(sa), b = median(sb);
    log.info(fmt::format("decode speed: {:.1f} -> {:.1f} tokens/s ({:.2f}x; median of {} alternating runs of {} "
                         "tokens after a 32-token prompt, {} threads)",
                         a, b, b / a, sa.size(), o.speed_tokens, pool.size()));
  }
  return true;
}

}  // namespace ember
