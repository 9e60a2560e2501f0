// Flags and run shared by `ember quantize` and `ember prune`; see compress_options.h.
#include "cli/compress_options.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/progress.h"
#include "transform/quant_recipe.h"

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

}  // namespace

struct CliPipelineLog::State {
  std::optional<ProgressLine> line;
};

CliPipelineLog::CliPipelineLog(std::string tool) : s_(std::make_unique<State>()) {
  State* s = s_.get();
  log_.info = [s](const std::string& line) {
    if (s->line) s->line->clear();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  log_.note = [s, tool](const std::string& line) {
    if (s->line) s->line->clear();
    if (line.rfind("quality check skipped", 0) == 0) std::fprintf(stderr, "ember %s: %s\n", tool.c_str(), line.c_str());
    else std::fprintf(stderr, "%s\n", line.c_str());
  };
  log_.progress = [s](long done, long total, double secs, const char* unit) {
    if (done < 0) {
      if (s->line) s->line->clear();
      s->line.reset();
      return;
    }
    if (!s->line) s->line.emplace();
    s->line->update(done, total, secs, unit);
  };
}

CliPipelineLog::~CliPipelineLog() = default;

void add_compress_flags(ArgParser& p, CompressFlags* f, const char* method_flag, bool quantize_only) {
  f->threads = default_thread_count();
  p.option("--type", &f->type_name, "T",
           "llama.cpp mix (Q4_K_M, Q3_K_S, Q4_0, ...: llama-quantize's per-tensor types) or, with --pure or a type "
           "that is not a mix name (q4_k, q3_k and q5_k are the _M mixes, as in llama-quantize), one type for every "
           "matrix; mxfp4 is for the experts, the other matrices q8_0 (llama-quantize's MXFP4_MOE) unless --pure");
  p.flag("--pure", &f->pure, "every matrix in --type (no mix rules), as llama-quantize --pure");
  p.option("--tensor-type", &f->tensor_types_arg, "P=T[,P=T...]",
           "per-tensor overrides: tensors whose name matches the regex P get type T (first match wins), as "
           "llama-quantize --tensor-type");
  p.option("--tensor-type-file", &f->tensor_type_file, "FILE", "more P=T overrides, separated by spaces or newlines");
  p.option("-t,--threads", &f->threads, "N", "threads");
  p.flag("--no-fallback", &f->strict, "fail instead of falling back when rows do not fit the block size");
  p.option("--output-type", &f->output_type_name, "T",
           "type of the output head (token_embd when tied), e.g. q8_0 or q6_k (default: --type)");
  p.option("--token-embedding-type", &f->embd_type_name, "T", "type of the token embedding (default: --type)");
  p.flag("--no-check", &f->no_check, "skip the quality check (KL divergence, top-1, perplexity against IN)");
  p.option("--check-file", &f->check_file, "FILE",
           "held-out text of the quality check (default: data/persuasion.txt, else a built-in paragraph)");
  p.option("--check-chunks", &f->check_windows, "N", "windows of 512 tokens in the quality check (default 2)");
  p.option(method_flag, &f->method, "M",
           "rtn (default), imatrix (importance-weighted rounding), gptq (Hessian error feedback, layer by layer) or "
           "awq (activation-aware scales folded into the norms / preceding matrices, then rounding)");
  p.option("--awq-rounding", &f->awq_rounding, "R", "awq: rounding after the scales, imatrix (default) or rtn");
  p.option("--awq-grid", &f->awq_grid, "N", "awq: alphas searched per group (default 20)");
  p.flag("--awq-clip", &f->awq_clip, "awq: also search a clipping ratio per block (not Q/K), as AutoAWQ does");
  if (quantize_only) {
    p.flag("--rotate", &f->rotate,
           "fuse QuaRot rotations into the weights before quantizing (online Hadamard of the attention / FFN inputs "
           "and before ffn_down, V/O per head; recorded in the metadata); --method quarot: --rotate with rtn");
    p.flag("--rotate-attn-out", &f->rotate_attn_out,
           "--rotate: also an online Hadamard of the attention output across heads (QuaRot's, on top of V/O per "
           "head)");
    p.option("--act-bits", &f->act_bits, "B",
             "activation bits the file asks for (ember.activation_bits): 8 or 4 (4-bit levels per 32 values; needs "
             "Q4_0 / Q5_0 / Q8_0 block matrices)");
  }
  p.flag("--act-order", &f->act_order, "gptq: quantize columns by decreasing activation energy");
  p.option("--gptq-scales", &f->gptq_scales, "S",
           "gptq: when each block's scales are chosen: dynamic (default: when the pass reaches the block, from its "
           "error-updated values), static (before the pass, from the original weights; always with --act-order), "
           "refit (from what a first pass rounded, then a second pass)");
  p.option("--gptq-damp", &f->damp, "F", "gptq: dampening, fraction of the mean Hessian diagonal (default 0.01)");
  p.option("--imatrix", &f->imatrix_path, "FILE",
           "importance matrix from `ember imatrix` or llama-imatrix (GGUF or .dat); implies --method imatrix");
  p.option("--calib", &f->calib_path, "FILE",
           "calibration text (default: data/calibration.txt)");
  p.option("--calib-tokens", &f->calib_tokens, "N",
           "calibration tokens to use (default: 16384 for imatrix, 4096 for gptq, awq and pruning; 0: all)");
  if (quantize_only) {
    p.option("--target-bpw", &f->target_bpw, "B",
             "choose every matrix's type (except --output-type / --token-embedding-type / --tensor-type ones) so the "
             "file has at most B bits per weight and the least measured damage (--type then only names the start)");
    p.option("--bpw-types", &f->bpw_types, "T,T,...",
             "--target-bpw candidate types (default q2_K,q3_K,q4_0,q4_K,q5_0,q5_K,q6_K,q8_0)");
    p.option("--bpw-probe-tokens", &f->bpw_probe_tokens, "N",
             "--target-bpw: calibration tokens each tensor's sensitivity probe runs (default 256, windows of 128; "
             "0: no probe, raw activation-weighted errors)");
    p.option("--bpw-report", &f->bpw_report, "FILE", "--target-bpw: write the per-tensor choices as TSV");
  }
}

Status compress_options(const CompressFlags& f, bool type_required, PipelineOptions* o) {
  const std::string mflag = type_required ? "--method" : "--quant-method";
  std::string type_name = f.type_name, method = f.method;
  bool rotate = f.rotate;
  if (type_name.empty() && f.target_bpw > 0) type_name = "q8_0";
  if (type_name.empty() && type_required) return Status::error("--type is required");
  if (f.target_bpw < 0 || f.target_bpw > 32) return Status::error("--target-bpw must be in (0, 32]");
  if (f.bpw_probe_tokens < 0) return Status::error("--bpw-probe-tokens must be >= 0");
  if (f.target_bpw == 0 && (!f.bpw_types.empty() || !f.bpw_report.empty()))
    return Status::error("--bpw-types and --bpw-report go with --target-bpw");
  o->bpw.target_bpw = f.target_bpw;
  if (!f.bpw_types.empty()) {
    o->bpw.candidates.clear();
    std::istringstream bs(f.bpw_types);
    for (std::string w; std::getline(bs, w, ',');) {
      DType t;
      if (!dtype_from_name(w, &t) || !convertible_to(t) || dtype_block_size(t) <= 1)
        return Status::errorf("unsupported type '{}' in --bpw-types (block types only)", w);
      o->bpw.candidates.push_back(t);
    }
  }
  o->keep_types = type_name.empty();
  if (!type_name.empty()) {
    std::optional<QuantRecipeInfo> recipe = f.pure ? std::nullopt : find_quant_recipe(type_name);
    DType type;
    if (recipe) type = recipe->base;
    else if (!dtype_from_name(type_name, &type) || !convertible_to(type))
      return Status::errorf("unsupported --type '{}'", type_name);
    o->convert.type = type;
    o->convert.recipe = recipe;
    o->convert.pure = f.pure;
  } else if (f.pure || !f.tensor_types_arg.empty() || !f.tensor_type_file.empty() || !f.output_type_name.empty() ||
             !f.embd_type_name.empty()) {
    return Status::error("--pure, --tensor-type, --output-type and --token-embedding-type go with --type");
  }
  std::vector<std::string> tt_args;
  if (!f.tensor_types_arg.empty()) {
    std::istringstream ts(f.tensor_types_arg);
    for (std::string w; std::getline(ts, w, ',');) tt_args.push_back(w);
  }
  if (!f.tensor_type_file.empty()) {
    std::ifstream tf(f.tensor_type_file);
    if (!tf) return Status::errorf("cannot read --tensor-type-file '{}'", f.tensor_type_file);
    for (std::string w; tf >> w;) tt_args.push_back(w);
  }
  if (f.threads < 1 || f.threads > 512) return Status::error("-t must be in [1, 512]");
  if (!f.imatrix_path.empty()) {
    if (method != "rtn" && method != "imatrix") return Status::errorf("--imatrix goes with {} imatrix", mflag);
    method = "imatrix";
  }
  if (method == "quarot" && type_required) method = "rtn", rotate = true;
  if (method != "rtn" && method != "imatrix" && method != "gptq" && method != "awq")
    return Status::errorf("unsupported {} '{}' (rtn, imatrix, gptq, awq{})", mflag, method,
                          type_required ? ", quarot" : "");
  if (rotate && (method == "imatrix" || method == "awq" || f.target_bpw > 0))
    return Status::error("--rotate / --method quarot goes with --method rtn or gptq (not imatrix, awq, --target-bpw)");
  if (f.rotate_attn_out && !rotate) return Status::error("--rotate-attn-out goes with --rotate or --method quarot");
  if (f.act_bits != 0 && f.act_bits != 4 && f.act_bits != 8) return Status::error("--act-bits must be 4 or 8");
  if (f.awq_rounding != "imatrix" && f.awq_rounding != "rtn")
    return Status::errorf("unsupported --awq-rounding '{}' (imatrix, rtn)", f.awq_rounding);
  if (f.awq_grid < 1 || f.awq_grid > 1000) return Status::error("--awq-grid must be in [1, 1000]");
  if (f.awq_clip && method != "awq") return Status::errorf("--awq-clip goes with {} awq", mflag);
  const auto scales = gptq_scales_from_name(f.gptq_scales);
  if (!scales) return Status::errorf("unsupported --gptq-scales '{}' (dynamic, static, refit)", f.gptq_scales);
  if (!(f.damp >= 0 && f.damp < 10)) return Status::error("--gptq-damp must be in [0, 10)");
  if (type_required && method == "rtn" && f.target_bpw == 0 && (!f.calib_path.empty() || f.calib_tokens != -1))
    return Status::error("--calib and --calib-tokens need --method imatrix, gptq or awq");
  if (f.calib_tokens < -1 || f.check_windows < 0) return Status::error("--calib-tokens and --check-chunks must be >= 0");
  if (o->keep_types && method != "rtn")
    return Status::errorf("{} {} needs --type (the types to quantize to)", mflag, method);
  o->method = method == "imatrix" ? QuantizeMethod::kImatrix
              : method == "gptq"  ? QuantizeMethod::kGptq
              : method == "awq"   ? QuantizeMethod::kAwq
                                  : QuantizeMethod::kRtn;
  o->imatrix_path = f.imatrix_path;
  o->rotate = rotate;
  o->rotate_attn_out = f.rotate_attn_out;
  o->act_bits = f.act_bits;
  o->gptq.act_order = f.act_order;
  o->gptq.scales = *scales;
  o->gptq.damp = f.damp;
  o->awq.imatrix_rounding = f.awq_rounding == "imatrix";
  o->awq.n_grid = f.awq_grid;
  o->awq.clip = f.awq_clip;
  o->bpw_probe_tokens = f.bpw_probe_tokens;
  o->bpw_report = f.bpw_report;
  o->calib_path = f.calib_path.empty() ? default_calibration_path() : f.calib_path;
  o->calib_tokens = f.calib_tokens;
  ConvertOptions& opts = o->convert;
  opts.has_imatrix = method != "rtn";
  opts.allow_fallback = !f.strict;
  for (const std::string& a : tt_args) {
    auto ov = parse_tensor_type_override(a);
    if (!ov) return ov.status();
    if (!convertible_to(ov->type)) return Status::errorf("unsupported type in --tensor-type '{}'", a);
    opts.tensor_types.push_back(*ov);
  }
  for (auto [name, flag, dst] : {std::tuple{&f.output_type_name, "--output-type", &opts.output_type},
                                 std::tuple{&f.embd_type_name, "--token-embedding-type", &opts.token_embd_type}}) {
    if (name->empty()) continue;
    DType t;
    if (!dtype_from_name(*name, &t) || !convertible_to(t)) return Status::errorf("unsupported {} '{}'", flag, *name);
    *dst = t;
  }
  return Status::ok();
}

Result<std::string> check_text(const CompressFlags& f) {
  std::string path = f.check_file.empty() ? default_check_path() : f.check_file;
  if (path.empty()) return std::string(kCheckText);
  auto t = read_all(path);
  if (!t) return Status::errorf("cannot read --check-file '{}'", path);
  if (t->empty()) return Status::errorf("--check-file '{}' is empty", path);
  return *t;
}

int run_compress(const char* tool, const ArgParser& p, const CompressFlags& f, const PipelineOptions& o,
                 const std::string& out, ReportOptions report) {
  const auto t0 = std::chrono::steady_clock::now();
  CliPipelineLog cl(tool);
  ThreadPool pool(f.threads);
  auto r = run_pipeline(o, cl.log(), pool);
  if (!r) return usage_error(p, r.status().message());
  size_t bytes = 0;
  if (Status st = write_pipeline_output(*r, o.act_bits, out, &bytes); !st) {
    std::fprintf(stderr, "ember %s: %s\n", tool, st.message().c_str());
    return kExitFailure;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu tensors, %.1f MiB of weights, type %s (%.3f bpw), in %.1f s\n", out.c_str(),
              r->file->tensors.size(), bytes / 1048576.0, r->type_label.c_str(), plan_bits_per_weight(r->plan), dt);
  std::fflush(stdout);
  r->file.reset();
  if (!f.no_check) report_against_source(o.in, out, report, cl.log(), pool);
  return kExitOk;
}

}  // namespace ember::cli
