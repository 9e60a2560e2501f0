// `ember quantize IN OUT --type T [--method rtn|imatrix|gptq|awq]`: writes IN (GGUF
// or Hugging Face) as a GGUF whose weight matrices are in type T, tokenizer
// included: round-to-nearest (bit-compatible with llama.cpp's reference
// quantizers), or importance-weighted rounding with an importance matrix
// (--imatrix FILE from `ember imatrix` or llama-imatrix, or computed here
// over calibration text: --method imatrix [--calib FILE]; bit-compatible with
// llama-quantize --imatrix), GPTQ error feedback (--method gptq) or AWQ
// scales folded into the model before rounding (--method awq; layer by
// layer over calibration text). Then runs both models over a held-out text and
// prints how far the new file is from IN (KL divergence mean / p99, top-1
// agreement, perplexity), so a damaging quantization shows. --rotate (or
// --method quarot = --rotate with round-to-nearest) fuses QuaRot's Hadamard
// rotations into the weights first (transform/quarot.h; composes with
// --method gptq, which then calibrates on the rotated model); --act-bits 4
// records 4-bit activations for the block linears (ember.activation_bits).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "cli/common.h"
#include "cli/progress.h"
#include "transform/awq_model.h"
#include "transform/gptq_model.h"
#include "transform/imatrix.h"
#include "eval/model_compare.h"
#include "model/io/gguf.h"
#include "transform/convert.h"
#include "transform/quantizer.h"
#include "transform/quarot.h"
#include "kernels/registry.h"
#include "transform/target_bpw.h"
#include "quant/quantize_imatrix.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {
namespace {

// The default text of the quality check: plain expository English.
constexpr const char* kCheckText =
    "The river rises in the hills to the north, where snow lingers on the high ground until late spring. For most "
    "of its length it runs through farmland: wheat and barley on the flat ground, orchards and sheep on the "
    "slopes. Small towns grew up wherever the water could be crossed, first by ford, later by stone bridges, and "
    "each market day the roads fill with carts and, these days, with delivery vans. The old mills have mostly "
    "been turned into houses or museums, although one still grinds flour for a bakery that has traded under the "
    "same name for two hundred years. In dry summers the level drops far enough to show the foundations of a "
    "Roman ferry landing, and local schools take their pupils to see it. Engineers have argued for decades about "
    "whether to build a reservoir upstream; supporters point to the floods of the last century, while opponents "
    "worry about the fish, the farms that would be lost, and the cost.";

// The held-out text of the quality check: data/persuasion.txt (disjoint from
// the calibration text), found like the calibration text; empty if absent.
std::string default_check_path() {
  std::string cal = default_calibration_path();
  const size_t slash = cal.rfind('/');
  std::string p = (slash == std::string::npos ? std::string() : cal.substr(0, slash + 1)) + "persuasion.txt";
  return std::ifstream(p).good() ? p : std::string();
}

// Loads IN and OUT as models and prints the comparison; false on failure
// (the file is written either way: this is a report, not a gate).
bool check_quality(const std::string& in, const std::string& out, const std::string& text, int64_t windows,
                   ThreadPool& pool) {
  auto ref = Model::load(in);
  auto mod = Model::load(out);
  if (!ref || !mod) {
    std::fprintf(stderr, "ember quantize: quality check skipped: %s\n",
                 (!ref ? ref.status() : mod.status()).message().c_str());
    return false;
  }
  auto tok = Tokenizer::from_metadata((*mod)->file().metadata);
  if (!tok) {
    std::fprintf(stderr, "ember quantize: quality check skipped: tokenizer: %s\n", tok.status().message().c_str());
    return false;
  }
  Result<ModelComparison> c = Status::error("no comparison");
  std::vector<int32_t> ids = (*tok)->encode(text, {.add_bos = false});
  if (static_cast<int64_t>(ids.size()) >= 512) {  // windows of 512 (BOS first), as `ember eval kl`
    WindowedCompareOptions o;
    o.max_windows = windows;
    o.bos_id = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
    c = compare_models_windows(**ref, **mod, ids, o, pool);
  } else {  // a short text: one window of all of it
    ids = (*tok)->encode(text);
    c = compare_models(**ref, **mod, ids, pool);
  }
  if (!c) {
    std::fprintf(stderr, "ember quantize: quality check skipped: %s\n", c.status().message().c_str());
    return false;
  }
  std::printf("quality vs %s over %lld tokens: KL divergence mean %.5f, max %.4f; top-1 agreement %.1f%%; "
              "perplexity %.3f -> %.3f (%+.2f%%); KL p99 %.4f\n",
              in.c_str(), static_cast<long long>(c->n_positions), c->kl_mean, c->kl_max, 100.0 * c->top1_agreement,
              c->ppl_reference, c->ppl_model, 100.0 * (c->ppl_model / c->ppl_reference - 1.0), c->kl_p99);
  return true;
}

// Reads a text file whole; empty optional when unreadable.
std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// --target-bpw: per-tensor types by measured sensitivity (transform/target_bpw.h).
// weights: column statistics for the error weights (computed from the
// calibration text when the method has none yet).
Status choose_target_bpw(const std::string& in, const ModelFile& src, QuantPlan* plan, TargetBpwOptions o,
                         std::map<std::string, std::vector<float>>* importance, bool imatrix_rounding,
                         const std::string& cal, int64_t probe_tokens, const std::string& report_path,
                         ThreadPool& pool) {
  auto model = Model::load(in);
  if (!model) return model.status();
  auto tok = Tokenizer::from_metadata((*model)->file().metadata);
  if (!tok) return tok.status().with_context("tokenizer");
  std::map<std::string, std::vector<float>> weights;
  if (importance->empty()) {
    auto im = calibrate_importance(**model, **tok, cal, 512, 4096, true, pool);
    if (!im) return im.status();
    for (const QuantPlanEntry& e : plan->entries)
      if (auto v = im->importance(e.name); v && static_cast<int64_t>(v->size()) == e.ne[0]) weights[e.name] = *v;
  }
  auto text = read_text(cal);
  if (!text) return Status::errorf("cannot read calibration text '{}'", cal);
  if (probe_tokens > 0) {
    o.probe_tokens = (*tok)->encode(*text, {.add_bos = false});
    if (static_cast<int64_t>(o.probe_tokens.size()) > probe_tokens) o.probe_tokens.resize(probe_tokens);
    o.bos_id = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
  }
  model.value().reset();
  o.imatrix_rounding = imatrix_rounding;
  ProgressLine progress;
  const auto t0 = std::chrono::steady_clock::now();
  o.progress = [&](int done, int total) {
    progress.update(done, total, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    "tensors probed");
  };
  const ImportanceFor imp = [&](const QuantPlanEntry& e) -> const float* {
    for (auto* m : {importance, &weights}) {
      auto it = m->find(e.name);
      if (it != m->end()) return it->second.data();
    }
    return nullptr;
  };
  auto rep = plan_target_bpw(src, plan, imp, o, pool);
  progress.clear();
  if (!rep) return rep.status();
  std::map<std::string, int> count;
  for (const TargetBpwTensor& t : rep->tensors) ++count[dtype_name(t.chosen)];
  std::string mix;
  for (const auto& [n, c] : count) mix += fmt::format(" {} {},", n, c);
  mix.pop_back();
  std::printf("target-bpw %.3f: %.3f bpw reached;%s; predicted %s %.5f (%s, %.0f s)\n", o.target_bpw, rep->bpw,
              mix.c_str(), rep->probed ? "KL" : "weighted error", rep->predicted_kl,
              rep->probed ? fmt::format("probe of {} tokens per tensor", o.probe_tokens.size() / o.probe_ctx * o.probe_ctx).c_str()
                          : "no probe",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
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

}  // namespace

int cmd_quantize(int argc, char** argv, int first) {
  ArgParser p("quantize", "ember quantize IN OUT --type Q4_K_M|Q4_K_S|Q5_K_M|Q5_K_S|Q6_K|Q3_K_M|Q3_K_S|Q3_K_L|Q2_K|"
                          "Q2_K_S|Q4_0|Q4_1|Q5_0|Q5_1|Q8_0|f16|bf16|f32 [--pure]");
  std::string type_name;
  int threads = default_thread_count();
  bool strict = false, no_check = false;
  std::string check_file, output_type_name, embd_type_name, method = "rtn", imatrix_path, calib_path;
  int64_t calib_tokens = -1, check_windows = 2;
  bool act_order = false, rotate = false, rotate_attn_out = false;
  std::string gptq_scales = "dynamic";
  int act_bits = 0;
  std::string awq_rounding = "imatrix";
  int awq_grid = 20;
  bool awq_clip = false;
  float damp = 0.01f;
  std::vector<std::string> pos;
  bool pure = false;
  std::string tensor_types_arg, tensor_type_file;
  float target_bpw = 0;
  std::string bpw_types, bpw_report;
  int64_t bpw_probe_tokens = 256;
  p.option("--type", &type_name, "T",
           "llama.cpp mix (Q4_K_M, Q3_K_S, Q4_0, ...: llama-quantize's per-tensor types) or, with --pure or a type "
           "that is not a mix name (q4_k, q3_k and q5_k are the _M mixes, as in llama-quantize), one type for every "
           "matrix");
  p.flag("--pure", &pure, "every matrix in --type (no mix rules), as llama-quantize --pure");
  p.option("--tensor-type", &tensor_types_arg, "P=T[,P=T...]",
           "per-tensor overrides: tensors whose name matches the regex P get type T (first match wins), as "
           "llama-quantize --tensor-type");
  p.option("--tensor-type-file", &tensor_type_file, "FILE", "more P=T overrides, separated by spaces or newlines");
  p.option("-t,--threads", &threads, "N", "threads");
  p.flag("--no-fallback", &strict, "fail instead of falling back when rows do not fit the block size");
  p.option("--output-type", &output_type_name, "T",
           "type of the output head (token_embd when tied), e.g. q8_0 or q6_k (default: --type)");
  p.option("--token-embedding-type", &embd_type_name, "T", "type of the token embedding (default: --type)");
  p.flag("--no-check", &no_check, "skip the quality check (KL divergence, top-1, perplexity against IN)");
  p.option("--check-file", &check_file, "FILE",
           "held-out text of the quality check (default: data/persuasion.txt, else a built-in paragraph)");
  p.option("--check-chunks", &check_windows, "N", "windows of 512 tokens in the quality check (default 2)");
  p.option("--method", &method, "M",
           "rtn (default), imatrix (importance-weighted rounding), gptq (Hessian error feedback, layer by layer) or "
           "awq (activation-aware scales folded into the norms / preceding matrices, then rounding)");
  p.option("--awq-rounding", &awq_rounding, "R", "awq: rounding after the scales, imatrix (default) or rtn");
  p.option("--awq-grid", &awq_grid, "N", "awq: alphas searched per group (default 20)");
  p.flag("--awq-clip", &awq_clip, "awq: also search a clipping ratio per block (not Q/K), as AutoAWQ does");
  p.flag("--rotate", &rotate,
         "fuse QuaRot rotations into the weights before quantizing (online Hadamard of the attention / FFN inputs "
         "and before ffn_down, V/O per head; recorded in the metadata); --method quarot: --rotate with rtn");
  p.flag("--rotate-attn-out", &rotate_attn_out,
         "--rotate: also an online Hadamard of the attention output across heads (QuaRot's, on top of V/O per head)");
  p.option("--act-bits", &act_bits, "B",
           "activation bits the file asks for (ember.activation_bits): 8 or 4 (4-bit levels per 32 values; needs "
           "Q4_0 / Q5_0 / Q8_0 block matrices)");
  p.flag("--act-order", &act_order, "gptq: quantize columns by decreasing activation energy");
  p.option("--gptq-scales", &gptq_scales, "S",
           "gptq: when each block's scales are chosen: dynamic (default: when the pass reaches the block, from its "
           "error-updated values), static (before the pass, from the original weights; always with --act-order), "
           "refit (from what a first pass rounded, then a second pass)");
  p.option("--gptq-damp", &damp, "F", "gptq: dampening, fraction of the mean Hessian diagonal (default 0.01)");
  p.option("--imatrix", &imatrix_path, "FILE",
           "importance matrix from `ember imatrix` or llama-imatrix (GGUF or .dat); implies --method imatrix");
  p.option("--calib", &calib_path, "FILE", "calibration text for --method imatrix without --imatrix "
                                           "(default: data/calibration.txt)");
  p.option("--calib-tokens", &calib_tokens, "N",
           "calibration tokens to use (default: 16384 for imatrix, 4096 for gptq and awq; 0: all)");
  p.option("--target-bpw", &target_bpw, "B",
           "choose every matrix's type (except --output-type / --token-embedding-type / --tensor-type ones) so the "
           "file has at most B bits per weight and the least measured damage (--type then only names the start)");
  p.option("--bpw-types", &bpw_types, "T,T,...",
           "--target-bpw candidate types (default q2_K,q3_K,q4_0,q4_K,q5_0,q5_K,q6_K,q8_0)");
  p.option("--bpw-probe-tokens", &bpw_probe_tokens, "N",
           "--target-bpw: calibration tokens each tensor's sensitivity probe runs (default 256, windows of 128; "
           "0: no probe, raw activation-weighted errors)");
  p.option("--bpw-report", &bpw_report, "FILE", "--target-bpw: write the per-tensor choices as TSV");
  p.positionals(&pos, "IN OUT");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() != 2) return usage_error(p, "expects IN and OUT");
  if (type_name.empty() && target_bpw > 0) type_name = "q8_0";
  if (type_name.empty()) return usage_error(p, "--type is required");
  if (target_bpw < 0 || target_bpw > 32) return usage_error(p, "--target-bpw must be in (0, 32]");
  if (bpw_probe_tokens < 0) return usage_error(p, "--bpw-probe-tokens must be >= 0");
  if (target_bpw == 0 && (!bpw_types.empty() || !bpw_report.empty()))
    return usage_error(p, "--bpw-types and --bpw-report go with --target-bpw");
  TargetBpwOptions bpw_opts;
  bpw_opts.target_bpw = target_bpw;
  if (!bpw_types.empty()) {
    bpw_opts.candidates.clear();
    std::istringstream bs(bpw_types);
    for (std::string w; std::getline(bs, w, ',');) {
      DType t;
      if (!dtype_from_name(w, &t) || !convertible_to(t) || dtype_block_size(t) <= 1)
        return usage_error(p, fmt::format("unsupported type '{}' in --bpw-types (block types only)", w));
      bpw_opts.candidates.push_back(t);
    }
  }
  DType type;
  std::optional<QuantRecipeInfo> recipe = pure ? std::nullopt : find_quant_recipe(type_name);
  if (recipe) type = recipe->base;
  else if (!dtype_from_name(type_name, &type) || !convertible_to(type))
    return usage_error(p, fmt::format("unsupported --type '{}'", type_name));
  std::vector<std::string> tt_args;
  if (!tensor_types_arg.empty()) {
    std::istringstream ts(tensor_types_arg);
    for (std::string w; std::getline(ts, w, ',');) tt_args.push_back(w);
  }
  if (!tensor_type_file.empty()) {
    std::ifstream tf(tensor_type_file);
    if (!tf) return usage_error(p, fmt::format("cannot read --tensor-type-file '{}'", tensor_type_file));
    for (std::string w; tf >> w;) tt_args.push_back(w);
  }
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (!imatrix_path.empty()) {
    if (method != "rtn" && method != "imatrix") return usage_error(p, "--imatrix goes with --method imatrix");
    method = "imatrix";
  }
  if (method == "quarot") method = "rtn", rotate = true;
  if (method != "rtn" && method != "imatrix" && method != "gptq" && method != "awq")
    return usage_error(p, fmt::format("unsupported --method '{}' (rtn, imatrix, gptq, awq, quarot)", method));
  if (rotate && (method == "imatrix" || method == "awq" || target_bpw > 0))
    return usage_error(p, "--rotate / --method quarot goes with --method rtn or gptq (not imatrix, awq, --target-bpw)");
  if (rotate_attn_out && !rotate) return usage_error(p, "--rotate-attn-out goes with --rotate or --method quarot");
  if (act_bits != 0 && act_bits != 4 && act_bits != 8) return usage_error(p, "--act-bits must be 4 or 8");
  if (awq_rounding != "imatrix" && awq_rounding != "rtn")
    return usage_error(p, fmt::format("unsupported --awq-rounding '{}' (imatrix, rtn)", awq_rounding));
  if (awq_grid < 1 || awq_grid > 1000) return usage_error(p, "--awq-grid must be in [1, 1000]");
  if (awq_clip && method != "awq") return usage_error(p, "--awq-clip goes with --method awq");
  if (!gptq_scales_from_name(gptq_scales))
    return usage_error(p, fmt::format("unsupported --gptq-scales '{}' (dynamic, static, refit)", gptq_scales));
  if (!(damp >= 0 && damp < 10)) return usage_error(p, "--gptq-damp must be in [0, 10)");
  if (method == "rtn" && target_bpw == 0 && (!calib_path.empty() || calib_tokens != -1))
    return usage_error(p, "--calib and --calib-tokens need --method imatrix, gptq or awq");
  if (calib_tokens < -1 || check_windows < 0) return usage_error(p, "--calib-tokens and --check-chunks must be >= 0");
  if (calib_tokens == -1) calib_tokens = method == "gptq" || method == "awq" ? 4096 : 16384;
  ConvertOptions opts;
  opts.type = type;
  opts.recipe = recipe;
  opts.has_imatrix = method != "rtn";
  opts.allow_fallback = !strict;
  for (const std::string& a : tt_args) {
    auto o = parse_tensor_type_override(a);
    if (!o) return usage_error(p, o.status().message());
    if (!convertible_to(o->type)) return usage_error(p, fmt::format("unsupported type in --tensor-type '{}'", a));
    opts.tensor_types.push_back(*o);
  }
  for (auto [name, flag, dst] : {std::tuple{&output_type_name, "--output-type", &opts.output_type},
                                 std::tuple{&embd_type_name, "--token-embedding-type", &opts.token_embd_type}}) {
    if (name->empty()) continue;
    DType t;
    if (!dtype_from_name(*name, &t) || !convertible_to(t))
      return usage_error(p, fmt::format("unsupported {} '{}'", flag, *name));
    *dst = t;
  }
  std::string in = resolve_model_path(p, pos[0]);
  if (in.empty()) return kExitUsage;
  std::string check_text = kCheckText;
  if (check_file.empty()) check_file = default_check_path();
  if (!check_file.empty()) {
    auto t = read_text(check_file);
    if (!t) return usage_error(p, fmt::format("cannot read --check-file '{}'", check_file));
    check_text = *t;
    if (check_text.empty()) return usage_error(p, fmt::format("--check-file '{}' is empty", check_file));
  }

  auto t0 = std::chrono::steady_clock::now();
  auto file = open_model_file(in);
  if (!file) return usage_error(p, file.status().message());
  // A Hugging Face folder: bring its tokenizer into the GGUF.
  if (const std::string* dir = (*file)->metadata.get_string("ember.hf.dir");
      dir && !(*file)->metadata.find("tokenizer.ggml.tokens")) {
    if (Status st = metadata_from_hf_tokenizer(*dir, &(*file)->metadata); !st)
      return usage_error(p, fmt::format("{}: tokenizer: {}", in, st.message()));
  }
  // Refuse files ember could not run afterwards.
  if (auto cfg = config_from_metadata((*file)->metadata); !cfg)
    return usage_error(p, fmt::format("{}: {}", in, cfg.status().message()));

  auto plan = plan_quantization(**file, opts);
  if (!plan) return usage_error(p, plan.status().message());
  if (act_bits == 4)
    for (const QuantPlanEntry& e : plan->entries)
      if (e.layer >= 0 && e.ne.size() == 2 && !kernels(vec_dot_type(e.target)).quantize_row_int4)
        return usage_error(p, fmt::format("--act-bits 4: tensor '{}' would be {}, whose activations have no 4-bit "
                                          "form (use Q4_0, Q5_0 or Q8_0 block matrices)",
                                          e.name, dtype_name(e.target)));
  ThreadPool pool(threads);
  if (rotate) {
    ModelRotation r;
    QuarotOptions qo;
    qo.attn_out = rotate_attn_out;
    auto rotated = apply_quarot(std::move(file.value()), &*plan, qo, pool, &r);
    if (!rotated) return usage_error(p, rotated.status().message());
    file = std::move(rotated);
    std::printf("quarot: online Hadamard of the attention input (%d), FFN input (%d), ffn_down input (%d) and "
                "attention output (%d); V/O per head (%d)\n",
                r.attn_in, r.ffn_in, r.ffn_down, r.attn_out, r.attn_v);
  }
  std::map<std::string, std::vector<float>> importance;
  if (method == "imatrix") {
    Result<Imatrix> im = Status::error("");
    if (!imatrix_path.empty()) {
      im = read_imatrix(imatrix_path);
    } else {  // calibrate the source model here
      auto src = Model::load(in);
      if (!src) return usage_error(p, src.status().message());
      auto tok = Tokenizer::from_metadata((*src)->file().metadata);
      if (!tok) return usage_error(p, fmt::format("{}: tokenizer: {}", in, tok.status().message()));
      im = calibrate_importance(**src, **tok, calib_path.empty() ? default_calibration_path() : calib_path, 512,
                                calib_tokens, false, pool);
    }
    if (!im) return usage_error(p, im.status().message());
    auto n = apply_imatrix(*im, &*plan, &importance);
    if (!n) return usage_error(p, n.status().message());
    if (*n == 0) return usage_error(p, "the importance matrix has no entry for any tensor of the model");
  }
  if (target_bpw > 0) {
    const std::string cal = calib_path.empty() ? default_calibration_path() : calib_path;
    if (Status st = choose_target_bpw(in, **file, &*plan, bpw_opts, &importance, method == "imatrix", cal,
                                      bpw_probe_tokens, bpw_report, pool);
        !st)
      return usage_error(p, st.message());
  }
  if (method == "gptq" || method == "awq") {
    const bool gptq = method == "gptq";
    const bool awq_imatrix = awq_rounding == "imatrix";
    int n = 0;
    for (QuantPlanEntry& e : plan->entries) {
      if (e.method != QuantMethod::kRtn || e.layer < 0) continue;
      if (gptq && gptq_supports(e.target)) e.method = QuantMethod::kGptq, ++n;
      if (!gptq && (awq_imatrix ? can_quantize_imatrix(e.target) : dtype_block_size(e.target) > 1))
        e.method = QuantMethod::kAwq, ++n;
    }
    if (n == 0) return usage_error(p, fmt::format("no tensor of the plan can be quantized by {}", method));
    auto src = Model::load(in);
    if (!src) return usage_error(p, src.status().message());
    auto tok = Tokenizer::from_metadata((*src)->file().metadata);
    if (!tok) return usage_error(p, fmt::format("{}: tokenizer: {}", in, tok.status().message()));
    const std::string cal = calib_path.empty() ? default_calibration_path() : calib_path;
    auto text = read_text(cal);
    if (!text) return usage_error(p, fmt::format("cannot read calibration text '{}'", cal));
    std::vector<int32_t> tokens = (*tok)->encode(*text, {.add_bos = false});
    if (calib_tokens > 0 && static_cast<int64_t>(tokens.size()) > calib_tokens) tokens.resize(calib_tokens);
    const int32_t bos = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
    constexpr int kChunk = 512;
    std::fprintf(stderr, "%s: %d tensors, calibration %s: %zu tokens in chunks of %d\n", method.c_str(), n,
                 cal.c_str(), tokens.size() / kChunk * kChunk, kChunk);
    ProgressLine progress;
    const auto tg = std::chrono::steady_clock::now();
    auto on_progress = [&](int done, int total) {
      progress.update(done, total, std::chrono::duration<double>(std::chrono::steady_clock::now() - tg).count(),
                      gptq ? "blocks quantized" : "blocks scaled");
    };
    src.value().reset();
    Result<std::unique_ptr<ModelFile>> done = Status::error("");
    std::vector<AwqGroupReport> report;
    if (gptq) {
      GptqRunOptions go;
      go.gptq.act_order = act_order;
      go.gptq.scales = *gptq_scales_from_name(gptq_scales);
      go.gptq.damp = damp;
      go.chunk_size = kChunk;
      go.bos_id = bos;
      go.progress = on_progress;
      done = run_gptq(std::move(file.value()), &*plan, tokens, go, pool);
    } else {
      AwqRunOptions ao;
      ao.search.imatrix_rounding = awq_imatrix;
      ao.search.n_grid = awq_grid;
      ao.search.clip = awq_clip;
      ao.chunk_size = kChunk;
      ao.bos_id = bos;
      ao.progress = on_progress;
      done = run_awq(std::move(file.value()), &*plan, tokens, ao, pool, &importance, &report);
    }
    progress.clear();
    if (!done) return usage_error(p, done.status().message());
    file = std::move(done);
    if (!report.empty()) {
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
        std::printf("awq: %zu groups, mean alpha %.2f, layer output error %.1f%% below plain rounding on average\n",
                    n_groups, alpha / n_groups, 100.0 * gain / n_groups);
      if (n_clip)
        std::printf("awq clipping: %zu matrices, %lld of %lld blocks clipped, block output error %.1f%% below "
                    "unclipped on average\n",
                    n_clip, static_cast<long long>(clipped), static_cast<long long>(blocks), 100.0 * clip_gain / n_clip);
      std::printf("awq: %.0f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - tg).count());
    }
  }
  std::printf("%s\n", quant_plan_summary(*plan).c_str());
  std::fflush(stdout);
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
  if (!conv) return usage_error(p, conv.status().message());
  const ModelFile& out = **conv;

  GgufWriter w;
  for (const auto& [k, v] : out.metadata.entries())
    if (k.rfind("ember.hf.", 0) != 0 && !(act_bits && k == kActBitsKey)) w.add(k, v);
  if (act_bits) w.add(kActBitsKey, Metadata::make_int(act_bits, GgufType::kUint32));
  size_t bytes = 0;
  for (const auto& [name, t] : out.tensors) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (Status st = w.add_tensor_ref(name, t.type, ne, t.data, t.nbytes); !st)
      return usage_error(p, st.message());
    bytes += t.nbytes;
  }
  if (Status st = w.write(pos[1]); !st) {
    std::fprintf(stderr, "ember quantize: %s\n", st.message().c_str());
    return kExitFailure;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu tensors, %.1f MiB of weights, type %s (%.3f bpw), in %.1f s\n", pos[1].c_str(),
              out.tensors.size(), bytes / 1048576.0,
              target_bpw > 0 ? fmt::format("target-bpw {}", target_bpw).c_str()
              : recipe      ? recipe->name
                            : dtype_name(type),
              plan_bits_per_weight(*plan), dt);
  std::fflush(stdout);
  if (!no_check) check_quality(in, pos[1], check_text, check_windows, pool);
  return kExitOk;
}

}  // namespace ember::cli
