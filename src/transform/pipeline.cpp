// The compression pipeline of `ember quantize` and `ember prune`; see pipeline.h.
#include "transform/pipeline.h"

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/dtype_sparse.h"
#include "kernels/registry.h"
#include "model/act_sparsity.h"
#include "model/config.h"
#include "model/io/gguf.h"
#include "model/model.h"
#include "quant/quantize_imatrix.h"
#include "tokenizer/tokenizer.h"
#include "transform/awq_model.h"
#include "transform/gptq_model.h"
#include "transform/imatrix.h"
#include "transform/quantizer.h"
#include "transform/quarot.h"

namespace ember {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Result<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::errorf("cannot read {} '{}'", what, path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void clear_progress(const PipelineLog& log) {
  if (log.progress) log.progress(-1, -1, 0, "");
}

// Every tensor keeps its source type (a changed one is rounded back to it:
// `origin`, the type of the tensor it came from, when structured pruning
// sliced it; one whose rows no longer fit falls back as a plan does); the
// file type stays the source's. ember's sparse types (sq8 / sq4), which no
// quantizer writes, are copied as they are (thresholds or metadata added
// to a sparse file leave its matrices alone); one that a later stage
// changes is rounded to its dense export type (prune.cpp).
void keep_source_types(QuantPlan* plan, const std::map<std::string, DType>& origin) {
  for (QuantPlanEntry& e : plan->entries) {
    const auto it = origin.find(e.name);
    const DType was = it != origin.end() ? it->second : e.source;
    if (e.ne.size() == 2 && convertible_to(was)) e.target = fallback_row_type(was, e.ne[0]);
    if (e.ne.size() == 2 && dtype_is_sparse(was))
      e.target = e.source == was ? was : dtype_sparse_dense(was);
    e.requested.reset();
    const bool is_float = e.target == DType::kF32 || e.target == DType::kF16 || e.target == DType::kBF16;
    e.method = e.target == e.source && e.transform == TensorTransform::kNone ? QuantMethod::kCopy
               : is_float                                                    ? QuantMethod::kConvert
                                                                             : QuantMethod::kRtn;
  }
  std::erase_if(plan->metadata, [](const auto& kv) { return kv.first == "general.file_type"; });
}

// --target-bpw: per-tensor types by measured sensitivity (target_bpw.h).
// weights: column statistics for the error weights (computed from the
// calibration text when the method has none yet).
Status choose_target_bpw(const std::string& in, const ModelFile& src, QuantPlan* plan, TargetBpwOptions o,
                         std::map<std::string, std::vector<float>>* importance, bool imatrix_rounding,
                         const std::string& cal, int64_t probe_tokens, const std::string& report_path,
                         const PipelineLog& log, ThreadPool& pool) {
  auto model = Model::load(in);
  if (!model) return model.status();
  auto tok = Tokenizer::from_metadata((*model)->file().metadata);
  if (!tok) return tok.status().with_context("tokenizer");
  std::map<std::string, std::vector<float>> weights;
  if (importance->empty()) {
    auto im = calibrate_importance(**model, **tok, cal, 512, 4096, true, log, pool);
    if (!im) return im.status();
    for (const QuantPlanEntry& e : plan->entries)
      if (auto v = im->importance(e.name); v && static_cast<int64_t>(v->size()) == e.ne[0]) weights[e.name] = *v;
  }
  auto text = read_text(cal, "calibration text");
  if (!text) return text.status();
  if (probe_tokens > 0) {
    o.probe_tokens = (*tok)->encode(*text, {.add_bos = false});
    if (static_cast<int64_t>(o.probe_tokens.size()) > probe_tokens) o.probe_tokens.resize(probe_tokens);
    o.bos_id = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
  }
  model.value().reset();
  o.imatrix_rounding = imatrix_rounding;
  const auto t0 = Clock::now();
  o.progress = [&](int done, int total) {
    if (log.progress) log.progress(done, total, since(t0), "tensors probed");
  };
  const ImportanceFor imp = [&](const QuantPlanEntry& e) -> const float* {
    for (auto* m : {importance, &weights}) {
      auto it = m->find(e.name);
      if (it != m->end()) return it->second.data();
    }
    return nullptr;
  };
  auto rep = plan_target_bpw(src, plan, imp, o, pool);
  clear_progress(log);
  if (!rep) return rep.status();
  std::map<std::string, int> count;
  for (const TargetBpwTensor& t : rep->tensors) ++count[dtype_name(t.chosen)];
  std::string mix;
  for (const auto& [n, c] : count) mix += fmt::format(" {} {},", n, c);
  mix.pop_back();
  if (log.info)
    log.info(fmt::format("target-bpw {:.3f}: {:.3f} bpw reached;{}; predicted {} {:.5f} ({}, {:.0f} s)", o.target_bpw,
                         rep->bpw, mix, rep->probed ? "KL" : "weighted error", rep->predicted_kl,
                         rep->probed ? fmt::format("probe of {} tokens per tensor",
                                                   o.probe_tokens.size() / o.probe_ctx * o.probe_ctx)
                                     : std::string("no probe"),
                         since(t0)));
  if (!report_path.empty()) {
    std::ofstream f(report_path);
    if (!f) return Status::errorf("cannot write --bpw-report '{}'", report_path);
    f << "tensor\tchosen\tprobe_type\tprobe_kl\tsensitivity\tpredicted_damage\n";
    for (const TargetBpwTensor& t : rep->tensors)
      f << fmt::format("{}\t{}\t{}\t{:.6g}\t{:.6g}\t{:.6g}\n", t.name, dtype_name(t.chosen), dtype_name(t.probe),
                       t.probe_kl, t.sensitivity, t.damage);
  }
  return Status::ok();
}

// The calibration tokens of the layer-by-layer stages (the text without a
// BOS, the first max_tokens of it) and the BOS id that starts every window.
struct CalibTokens {
  std::vector<int32_t> tokens;
  int32_t bos = -1;
};
Result<CalibTokens> layerwise_tokens(const std::string& in, const std::string& cal, int64_t max_tokens) {
  auto src = Model::load(in);
  if (!src) return src.status();
  auto tok = Tokenizer::from_metadata((*src)->file().metadata);
  if (!tok) return Status::errorf("{}: tokenizer: {}", in, tok.status().message());
  auto text = read_text(cal, "calibration text");
  if (!text) return text.status();
  CalibTokens c;
  c.tokens = (*tok)->encode(*text, {.add_bos = false});
  if (max_tokens > 0 && static_cast<int64_t>(c.tokens.size()) > max_tokens) c.tokens.resize(max_tokens);
  c.bos = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
  return c;
}

Status run_layerwise_quant(const PipelineOptions& o, const std::string& cal, int64_t calib_tokens, QuantPlan* plan,
                           std::unique_ptr<ModelFile>* file, std::map<std::string, std::vector<float>>* importance,
                           const PipelineLog& log, ThreadPool& pool) {
  const bool gptq = o.method == QuantizeMethod::kGptq;
  const char* name = gptq ? "gptq" : "awq";
  int n = 0;
  for (QuantPlanEntry& e : plan->entries) {
    if (e.method != QuantMethod::kRtn || e.layer < 0) continue;
    if (gptq && gptq_supports(e.target)) e.method = QuantMethod::kGptq, ++n;
    if (!gptq && (o.awq.imatrix_rounding ? can_quantize_imatrix(e.target) : dtype_block_size(e.target) > 1))
      e.method = QuantMethod::kAwq, ++n;
  }
  if (n == 0) return Status::errorf("no tensor of the plan can be quantized by {}", name);
  auto ct = layerwise_tokens(o.in, cal, calib_tokens);
  if (!ct) return ct.status();
  constexpr int kChunk = 512;
  if (log.note)
    log.note(fmt::format("{}: {} tensors, calibration {}: {} tokens in chunks of {}", name, n, cal,
                         ct->tokens.size() / kChunk * kChunk, kChunk));
  const auto tg = Clock::now();
  auto on_progress = [&](int done, int total) {
    if (log.progress) log.progress(done, total, since(tg), gptq ? "blocks quantized" : "blocks scaled");
  };
  Result<std::unique_ptr<ModelFile>> done = Status::error("");
  std::vector<AwqGroupReport> report;
  if (gptq) {
    GptqRunOptions go;
    go.gptq = o.gptq;
    go.chunk_size = kChunk;
    go.bos_id = ct->bos;
    go.progress = on_progress;
    done = run_gptq(std::move(*file), plan, ct->tokens, go, pool);
  } else {
    AwqRunOptions ao;
    ao.search = o.awq;
    ao.chunk_size = kChunk;
    ao.bos_id = ct->bos;
    ao.progress = on_progress;
    done = run_awq(std::move(*file), plan, ct->tokens, ao, pool, importance, &report);
  }
  clear_progress(log);
  if (!done) return done.status();
  *file = std::move(done.value());
  if (report.empty() || !log.info) return Status::ok();
  double alpha = 0, gain = 0, clip_gain = 0;
  size_t n_groups = 0, n_clip = 0;
  int64_t blocks = 0, clipped = 0;
  for (const AwqGroupReport& r : report) {
    const double g = r.error_plain > 0 ? 1.0 - r.error / r.error_plain : 0.0;
    if (r.clip) {
      ++n_clip, clip_gain += g, blocks += r.blocks, clipped += r.clipped;
    } else {
      ++n_groups, alpha += r.alpha, gain += g;
    }
  }
  if (n_groups)
    log.info(fmt::format("awq: {} groups, mean alpha {:.2f}, layer output error {:.1f}% below plain rounding on average",
                         n_groups, alpha / n_groups, 100.0 * gain / n_groups));
  if (n_clip)
    log.info(fmt::format("awq clipping: {} matrices, {} of {} blocks clipped, block output error {:.1f}% below "
                         "unclipped on average",
                         n_clip, clipped, blocks, 100.0 * clip_gain / n_clip));
  log.info(fmt::format("awq: {:.0f} s", since(tg)));
  return Status::ok();
}

Status run_prune_stage(const PipelineOptions& o, const std::string& cal, int64_t calib_tokens, QuantPlan* plan,
                       std::unique_ptr<ModelFile>* file, PruneReport* rep, const PipelineLog& log,
                       ThreadPool& pool) {
  PruneOptions po = *o.prune;
  if (o.method == QuantizeMethod::kGptq)  // pruned and quantized in one pass
    for (QuantPlanEntry& e : plan->entries)
      if (e.method == QuantMethod::kRtn && e.layer >= 0 && e.ne.size() == 2) e.method = QuantMethod::kGptq;
  CalibTokens ct;
  const bool needs_text = po.method != PruneMethod::kMagnitude || po.layers != LayerSparsity::kUniform ||
                          o.method == QuantizeMethod::kGptq;
  if (needs_text) {
    auto c = layerwise_tokens(o.in, cal, calib_tokens);
    if (!c) return c.status();
    ct = std::move(*c);
    po.bos_id = ct.bos;
    if (log.note)
      log.note(fmt::format("prune {}: calibration {}: {} tokens in windows of {}", prune_method_name(po.method), cal,
                           ct.tokens.size() / po.window * po.window, po.window));
  }
  const auto t0 = Clock::now();
  po.progress = [&](int done, int total) {
    if (log.progress) log.progress(done, total, since(t0), "blocks pruned");
  };
  auto done = prune_model(std::move(*file), plan, ct.tokens, po, pool, rep);
  clear_progress(log);
  if (!done) return done.status();
  *file = std::move(done.value());
  if (log.info) {
    std::string layers;
    for (double s : rep->layer_sparsity) layers += fmt::format(" {:.3f}", s);
    if (!rep->outlier_ratio.empty()) {
      layers += fmt::format(" (OWL: lambda {:.3g}, M {:.3g}; outlier ratios", po.owl_lambda, po.owl_m);
      for (double r : rep->outlier_ratio) layers += fmt::format(" {:.4f}", r);
      layers += ")";
    }
    if (!rep->block_kl.empty()) {
      layers += fmt::format(" (kl: lambda {:.3g}; KL with only that block pruned", po.owl_lambda);
      for (double k : rep->block_kl) layers += fmt::format(" {:.4f}", k);
      layers += ")";
    }
    log.info(fmt::format("prune {} {} ({} layer sparsity): {} matrices, {} of {} weights zeroed ({:.2f}%){}; "
                         "layer sparsity:{}; {:.0f} s",
                         prune_method_name(po.method), prune_pattern_name(po.pattern),
                         layer_sparsity_name(po.layers),
                         rep->matrices, rep->pruned,
                         rep->weights, rep->weights ? 100.0 * rep->pruned / rep->weights : 0.0,
                         rep->joint ? fmt::format(", {} pruned and quantized in one pass", rep->joint) : "", layers,
                         since(t0)));
  }
  return Status::ok();
}

Status run_act_sparsity_stage(const PipelineOptions& o, const std::string& cal, int64_t calib_tokens,
                              std::unique_ptr<ModelFile>* file, ActSparsityReport* rep, const PipelineLog& log,
                              ThreadPool& pool) {
  auto ct = layerwise_tokens(o.in, cal, calib_tokens);
  if (!ct) return ct.status();
  ActSparsityOptions ao;
  ao.sparsity = *o.act_sparsity;
  ao.allocation = o.act_allocation;
  ao.bos_id = ct->bos;
  if (log.note)
    log.note(fmt::format("activation sparsity: calibration {}: {} tokens in windows of {}", cal,
                         ct->tokens.size() / ao.window * ao.window, ao.window));
  const auto t0 = Clock::now();
  ao.progress = [&](int done, int total) {
    if (log.progress) log.progress(done, total, since(t0), "blocks calibrated");
  };
  auto done = calibrate_act_sparsity(std::move(*file), ct->tokens, ao, pool, rep);
  clear_progress(log);
  if (!done) return done.status();
  *file = std::move(done.value());
  if (log.info) {
    double lo = 1, hi = 0, sum = 0;
    int n = 0;
    for (size_t i = 0; i < rep->zeroed.size(); ++i) {
      if (rep->thresholds[i] <= 0) continue;
      lo = std::min(lo, rep->zeroed[i]);
      hi = std::max(hi, rep->zeroed[i]);
      sum += rep->zeroed[i];
      ++n;
    }
    log.info(fmt::format("activation sparsity {:.2f} ({}): thresholds for {} of {} block inputs ({}) from {} "
                         "tokens; zeroed on the calibration text: mean {:.1f}% (min {:.1f}%, max {:.1f}%), "
                         "parameter-weighted {:.1f}%; {:.0f} s",
                         ao.sparsity, act_allocation_name(ao.allocation), n, rep->thresholds.size(),
                         kActSparsityThresholdsKey, rep->tokens, n ? 100.0 * sum / n : 0.0, n ? 100.0 * lo : 0.0,
                         100.0 * hi, 100.0 * rep->weighted_zeroed, since(t0)));
    if (ao.allocation == ActAllocation::kGreedy) {  // where the search put the sparsity
      std::string by;
      for (int i = 0; i < kActInputs; ++i) {
        double m = 0, a = 1, b = 0;
        int k = 0;
        for (size_t j = i; j < rep->zeroed.size(); j += kActInputs) {
          if (rep->params[j] <= 0) continue;
          m += rep->zeroed[j], a = std::min(a, rep->zeroed[j]), b = std::max(b, rep->zeroed[j]), ++k;
        }
        if (k)
          by += fmt::format("{}{} {:.1f}% ({:.1f}-{:.1f}%)", by.empty() ? "" : ", ",
                            act_input_name(static_cast<ActInput>(i)), 100.0 * m / k, 100.0 * a, 100.0 * b);
      }
      log.info(fmt::format("activation sparsity, greedy: zeroed by input, mean over blocks (min-max): {}; {} steps",
                           by, rep->steps.size()));
    }
  }
  return Status::ok();
}

}  // namespace

Result<Imatrix> calibrate_importance(const Model& model, const Tokenizer& tok, const std::string& text_path,
                                     int chunk_size, int64_t max_tokens, bool include_output, const PipelineLog& log,
                                     ThreadPool& pool) {
  auto text = read_text(text_path, "calibration text");
  if (!text) return text.status();
  // As llama-imatrix: the text tokenized with BOS first (when the model
  // wants it), then every chunk's first token replaced by BOS.
  const std::vector<int32_t> tokens = tok.encode(*text);
  CalibrationOptions o;
  o.chunk_size = chunk_size;
  o.max_tokens = max_tokens;
  o.include_output = include_output;
  o.bos_id = tok.add_bos() ? tok.bos_id() : -1;
  const int64_t used = (max_tokens > 0 ? std::min<int64_t>(max_tokens, tokens.size()) : tokens.size()) /
                       chunk_size * chunk_size;
  if (log.note)
    log.note(fmt::format("calibration: {}: {} tokens, using {} in chunks of {}", text_path, tokens.size(), used,
                         chunk_size));
  const auto t0 = Clock::now();
  o.progress = [&](int64_t done, int64_t total) {
    if (log.progress) log.progress(static_cast<long>(done), static_cast<long>(total), since(t0), "calibration chunks");
  };
  auto m = collect_importance(model, tokens, o, pool);
  clear_progress(log);
  if (!m) return m.status();
  m->datasets.push_back(text_path);
  return m;
}

Result<PipelineResult> run_pipeline(const PipelineOptions& o, const PipelineLog& log, ThreadPool& pool) {
  auto file = open_model_file(o.in);
  if (!file) return file.status();
  // A Hugging Face folder: bring its tokenizer into the GGUF.
  if (const std::string* dir = (*file)->metadata.get_string("ember.hf.dir");
      dir && !(*file)->metadata.find("tokenizer.ggml.tokens")) {
    if (Status st = metadata_from_hf_tokenizer(*dir, &(*file)->metadata); !st)
      return Status::errorf("{}: tokenizer: {}", o.in, st.message());
  }
  // Refuse files ember could not run afterwards.
  if (auto cfg = config_from_metadata((*file)->metadata); !cfg)
    return Status::errorf("{}: {}", o.in, cfg.status().message());
  if ((o.structured || o.prune) && (o.rotate || o.bpw.target_bpw > 0))
    return Status::error("pruning goes with neither rotations nor a bits-per-weight target yet");
  if (o.structured && !o.imatrix_path.empty())
    return Status::error("an importance matrix file describes the unpruned model; with structured pruning, calibrate "
                         "on the pruned one (--quant-method imatrix without --imatrix)");
  const bool layerwise =
      o.method == QuantizeMethod::kGptq || o.method == QuantizeMethod::kAwq || o.prune || o.act_sparsity;
  const int64_t calib_tokens = o.calib_tokens >= 0 ? o.calib_tokens : layerwise ? 4096 : 16384;
  const std::string& cal = o.calib_path;
  PipelineResult r;

  if (o.structured) {
    std::vector<int32_t> tokens;
    int32_t bos = -1;
    {
      auto tok = Tokenizer::from_metadata((*file)->metadata);
      if (!tok) return Status::errorf("{}: tokenizer: {}", o.in, tok.status().message());
      bos = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
      if (o.structured->needs_calibration()) {
        auto text = read_text(cal, "calibration text");
        if (!text) return text.status();
        tokens = (*tok)->encode(*text, {.add_bos = false});
        if (calib_tokens > 0 && static_cast<int64_t>(tokens.size()) > calib_tokens) tokens.resize(calib_tokens);
        if (log.note)
          log.note(fmt::format("structured pruning: calibration {}: {} tokens in windows of {}", cal,
                               tokens.size() / o.structured->window * o.structured->window, o.structured->window));
      }
    }
    StructuredPruneOptions so = *o.structured;
    so.bos_id = bos;
    const auto t0 = Clock::now();
    so.progress = [&](int done, int total) {
      if (log.progress) log.progress(done, total, since(t0), "calibration passes");
    };
    StructuredPruneReport rep;
    auto pruned = prune_structured(std::move(file.value()), tokens, so, pool, &rep);
    clear_progress(log);
    if (!pruned) return pruned.status();
    file = std::move(pruned);
    if (log.info)
      for (const std::string& line : rep.lines) log.info(line);
    r.structured = std::move(rep);
  }

  auto plan = plan_quantization(**file, o.convert);
  if (!plan) return plan.status();
  if (o.keep_types) keep_source_types(&*plan, r.structured ? r.structured->origin_type : std::map<std::string, DType>{});
  if (o.act_bits == 4)
    for (const QuantPlanEntry& e : plan->entries)
      if (e.layer >= 0 && e.ne.size() == 2 && !kernels(vec_dot_type(e.target)).quantize_row_int4)
        return Status::errorf("--act-bits 4: tensor '{}' would be {}, whose activations have no 4-bit form (use "
                              "Q4_0, Q5_0 or Q8_0 block matrices)",
                              e.name, dtype_name(e.target));
  if (o.rotate) {
    ModelRotation rot;
    QuarotOptions qo;
    qo.attn_out = o.rotate_attn_out;
    auto rotated = apply_quarot(std::move(file.value()), &*plan, qo, pool, &rot);
    if (!rotated) return rotated.status();
    file = std::move(rotated);
    if (log.info)
      log.info(fmt::format("quarot: online Hadamard of the attention input ({}), FFN input ({}), ffn_down input ({}) "
                           "and attention output ({}); V/O per head ({})",
                           rot.attn_in, rot.ffn_in, rot.ffn_down, rot.attn_out, rot.attn_v));
  }
  std::map<std::string, std::vector<float>> importance;
  if (o.method == QuantizeMethod::kImatrix) {
    Result<Imatrix> im = Status::error("");
    if (!o.imatrix_path.empty()) {
      im = read_imatrix(o.imatrix_path);
    } else if (o.structured) {  // calibrate the structurally pruned model
      auto src = Model::from_file(std::make_unique<ModelFile>(**file));
      if (!src) return src.status();
      auto tok = Tokenizer::from_metadata((*src)->file().metadata);
      if (!tok) return Status::errorf("{}: tokenizer: {}", o.in, tok.status().message());
      im = calibrate_importance(**src, **tok, cal, 512, calib_tokens, false, log, pool);
    } else {  // calibrate the source model here
      auto src = Model::load(o.in);
      if (!src) return src.status();
      auto tok = Tokenizer::from_metadata((*src)->file().metadata);
      if (!tok) return Status::errorf("{}: tokenizer: {}", o.in, tok.status().message());
      im = calibrate_importance(**src, **tok, cal, 512, calib_tokens, false, log, pool);
    }
    if (!im) return im.status();
    auto n = apply_imatrix(*im, &*plan, &importance);
    if (!n) return n.status();
    if (*n == 0) return Status::error("the importance matrix has no entry for any tensor of the model");
  }
  if (o.bpw.target_bpw > 0)
    EMBER_RETURN_IF_ERROR(choose_target_bpw(o.in, **file, &*plan, o.bpw, &importance,
                                            o.method == QuantizeMethod::kImatrix, cal, o.bpw_probe_tokens,
                                            o.bpw_report, log, pool));
  if (o.prune) {
    PruneReport rep;
    EMBER_RETURN_IF_ERROR(run_prune_stage(o, cal, calib_tokens, &*plan, &file.value(), &rep, log, pool));
    r.prune = std::move(rep);
  }
  const bool joint_done = o.prune && o.method == QuantizeMethod::kGptq;
  if ((o.method == QuantizeMethod::kGptq && !joint_done) || o.method == QuantizeMethod::kAwq)
    EMBER_RETURN_IF_ERROR(run_layerwise_quant(o, cal, calib_tokens, &*plan, &file.value(), &importance, log, pool));
  if (log.info) log.info(quant_plan_summary(*plan));
  RtnQuantizer rtn;
  ImatrixQuantizer imq;
  const QuantizerFor quantizer_for = [&](QuantMethod m) -> Quantizer* {
    return m == QuantMethod::kRtn ? static_cast<Quantizer*>(&rtn) : m == QuantMethod::kImatrix ? &imq : nullptr;
  };
  const ImportanceFor importance_for = [&](const QuantPlanEntry& e) -> const float* {
    auto it = importance.find(e.name);
    return it == importance.end() ? nullptr : it->second.data();
  };
  auto conv = execute_quant_plan(std::move(file.value()), *plan, quantizer_for, pool, importance_for);
  if (!conv) return conv.status();
  r.file = std::move(conv.value());
  if (o.act_sparsity) {
    ActSparsityReport rep;
    EMBER_RETURN_IF_ERROR(run_act_sparsity_stage(o, cal, calib_tokens, &r.file, &rep, log, pool));
    r.act = std::move(rep);
  }
  if (o.sparse_format) {
    auto sp = store_block_matrices_sparse(r.file.get(), pool);
    if (!sp) return sp.status();
    if (log.info)
      log.info(fmt::format("sparse format: {} matrices stored sparse{} ({:.1f} -> {:.1f} MiB, {:.2f}x fewer bytes){}",
                           sp->matrices + sp->matrices4,
                           sp->matrices4 ? fmt::format(" ({} int8, {} int4)", sp->matrices, sp->matrices4) : "",
                           sp->dense_bytes / 1048576.0, sp->sparse_bytes / 1048576.0,
                           sp->sparse_bytes ? static_cast<double>(sp->dense_bytes) / sp->sparse_bytes : 0.0,
                           sp->kept_dense ? fmt::format(", {} too dense to gain kept dense", sp->kept_dense) : ""));
    r.sparse = *sp;
  }
  r.plan = std::move(*plan);
  r.type_label = o.bpw.target_bpw > 0 ? fmt::format("target-bpw {}", o.bpw.target_bpw)
                 : o.keep_types       ? std::string("source types")
                 : o.convert.recipe   ? std::string(o.convert.recipe->name)
                                      : std::string(dtype_name(o.convert.type));
  return r;
}

Status write_pipeline_output(const PipelineResult& r, int act_bits, const std::string& path, size_t* bytes) {
  const ModelFile& out = *r.file;
  GgufWriter w;
  for (const auto& [k, v] : out.metadata.entries())
    if (k.rfind("ember.hf.", 0) != 0 && !(act_bits && k == kActBitsKey)) w.add(k, v);
  if (act_bits) w.add(kActBitsKey, Metadata::make_int(act_bits, GgufType::kUint32));
  *bytes = 0;
  for (const auto& [name, t] : out.tensors) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    EMBER_RETURN_IF_ERROR(w.add_tensor_ref(name, t.type, ne, t.data, t.nbytes));
    *bytes += t.nbytes;
  }
  return w.write(path);
}

}  // namespace ember
