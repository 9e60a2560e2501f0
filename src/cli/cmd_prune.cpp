// `ember prune IN OUT`: removes weights from a model and writes a GGUF in
// standard dense types, then reports it against IN on held-out text (KL,
// top-1, perplexity), with parameters, bytes and decode speed before and
// after.
//   unstructured / N:M: --method magnitude|wanda|sparsegpt --sparsity S
//     [--pattern unstructured|2:4|4:8] [--layer-sparsity uniform|owl|kl]
//     (transform/prune.h); with --type T the pruned model is quantized in the
//     same run (--quant-method rtn|imatrix|gptq|awq; gptq prunes and rounds
//     in one pass, keeping the zeros);
//   structured (transform/prune_structured.h): --ffn F, --heads F,
//     --kv-groups F, --drop-layers N [--layer-metric bi|kl], --vocab N
//     [--vocab-text FILE]: a smaller dense model;
//   activation sparsity (transform/act_sparsity.h): --activations S
//     [--act-allocation uniform|greedy],
//     thresholds on the block matrices' inputs in the metadata.
// Without --type every tensor keeps its source type. The stages are the
// pipeline `ember quantize` runs (transform/pipeline.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/compress_options.h"
#include "engine/speculative/draft_head.h"
#include "model/io/model_file.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {
namespace {

// The n output tokens to keep: the tokens the model must be able to end a
// turn with (end-of-sequence ids and every control token its chat template
// names, e.g. Gemma's <end_of_turn>), then the most frequent in the text
// (draft_head.h's ranking: counts, then the tokenizer's scores).
Result<std::vector<int32_t>> choose_output_tokens(const Metadata& md, int n_vocab, const std::vector<int32_t>& text,
                                                  int n) {
  std::set<int32_t> extra;
  const GgufValue* toks = md.find("tokenizer.ggml.tokens");
  const GgufValue* types = md.find("tokenizer.ggml.token_type");
  const std::string* tmpl = md.get_string("tokenizer.chat_template");
  if (toks && types && tmpl && types->ints.size() == toks->strings.size())
    for (size_t i = 0; i < toks->strings.size() && i < static_cast<size_t>(n_vocab); ++i)
      if (types->ints[i] == 3 && toks->strings[i].size() > 1 && tmpl->find(toks->strings[i]) != std::string::npos)
        extra.insert(static_cast<int32_t>(i));
  if (n < 1 || n > n_vocab) return Status::errorf("--vocab {} out of range [1, {}]", n, n_vocab);
  if (static_cast<int>(extra.size()) >= n)
    return Status::errorf("--vocab {} cannot hold the {} control tokens of the chat template", n, extra.size());
  int k = n - static_cast<int>(extra.size());
  std::vector<int32_t> out;
  for (int tries = 0; tries < 8; ++tries) {
    auto r = rank_head_tokens(md, n_vocab, text, k);
    if (!r) return r.status();
    std::set<int32_t> u(r->begin(), r->end());
    u.insert(extra.begin(), extra.end());
    out.assign(u.begin(), u.end());
    if (static_cast<int>(out.size()) >= n || k >= n) break;
    k += n - static_cast<int>(out.size());
  }
  if (static_cast<int>(out.size()) > n) out.resize(static_cast<size_t>(n));  // cannot happen: extra ⊂ u, k <= n
  return out;
}

}  // namespace

int cmd_prune(int argc, char** argv, int first) {
  ArgParser p("prune",
              "ember prune IN OUT [--method magnitude|wanda|sparsegpt --sparsity S [--pattern unstructured|2:4|4:8] "
              "[--layer-sparsity uniform|owl|kl]] [--activations S [--act-allocation uniform|greedy]] [--ffn F] [--heads F] [--kv-groups F] [--drop-layers N] [--vocab N] "
              "[--type T [--quant-method M]]");
  CompressFlags f;
  std::vector<std::string> pos;
  std::string method, pattern = "unstructured", layer_sparsity = "uniform", layer_metric = "bi", vocab_text;
  float activations = -1;
  std::string act_allocation;
  float sparsity = -1, owl_lambda = 0.08f, owl_m = 5.0f, ffn = 0, heads = 0, kv_groups = 0;
  int drop_layers = 0, vocab = 0, ffn_multiple = 0, speed_tokens = 64, sparse_bits = 0;
  bool global_ffn = false, dense = false;
  std::string format = "dense";
  p.option("--method", &method, "M",
           "unstructured pruning: magnitude (smallest |W| per matrix), wanda (|W| * ||X|| within each output row) "
           "or sparsegpt (Hessian-based masks with error feedback)");
  p.option("--sparsity", &sparsity, "S", "fraction of each block matrix's weights removed (unstructured), in [0, 1)");
  p.option("--pattern", &pattern, "P", "unstructured (default) or N:M (2:4, 4:8: N of every M consecutive inputs)");
  p.option("--layer-sparsity", &layer_sparsity, "L",
           "uniform (default), owl (per-layer sparsity by outlier ratio, a span of 2 lambda around S) or kl (by the "
           "KL of pruning each layer alone)");
  p.option("--owl-lambda", &owl_lambda, "F", "owl, kl: half the span of the layers' sparsities (default 0.08)");
  p.option("--owl-m", &owl_m, "F", "owl: outliers are scores above M times the layer's mean (default 5)");
  std::string quota;
  p.option("--quota", &quota, "Q",
           "magnitude / sparsegpt: matrix (default: one quota per matrix, sparsegpt: per batch of columns, as "
           "published) or row (every output row loses the same count, as wanda's rows do; use it with --format "
           "sparse, whose rows all take the densest row's bytes)");
  p.option("--ffn", &ffn, "F", "structured: fraction of FFN channels removed (lowest ||W_down col||^2 * E[x^2])");
  p.option("--heads", &heads, "F", "structured: fraction of query heads removed from every KV group");
  p.option("--kv-groups", &kv_groups, "F", "structured: fraction of KV groups removed with their query heads");
  p.option("--drop-layers", &drop_layers, "N", "structured: remove the N blocks that change the model least");
  p.option("--layer-metric", &layer_metric, "M",
           "--drop-layers ranking: bi (block influence, 1 - cos(in, out); default) or kl (KL when skipped)");
  p.flag("--global-ffn", &global_ffn,
         "--ffn: rank channels across layers (per-layer widths: ember only) instead of the same width everywhere");
  p.option("--ffn-multiple", &ffn_multiple, "N", "--ffn: kept widths a multiple of N (default 256 if n_ff is, else 32)");
  p.option("--vocab", &vocab, "N",
           "structured: the output head keeps N tokens (the most frequent in --vocab-text, end-of-turn tokens "
           "always); the tokenizer and input embedding stay whole; other tokens get probability 0");
  p.option("--vocab-text", &vocab_text, "FILE", "--vocab: the text whose tokens are counted (default: --calib)");
  p.option("--activations", &activations, "S",
           "activation sparsity (TEAL): thresholds that zero the fraction S in (0, 1) of each block matrix's inputs "
           "on the calibration text, written into the metadata; decode skips the zeroed inputs' weights");
  p.option("--act-allocation", &act_allocation, "A",
           "--activations: greedy (default; TEAL's block-wise greedy search: per-input levels whose "
           "parameter-weighted mean per block is S, each step given to the input whose step changes the block's "
           "output least; about 100x the calibration time of uniform) or uniform (S for every block input)");
  p.option("--speed-tokens", &speed_tokens, "N", "decode steps of the speed report (default 64; 0: no speed report)");
  p.flag("--dense", &dense, "write the pruned weights in standard dense types, which llama.cpp loads (the default; "
                            "= --format dense)");
  p.option("--format", &format, "F",
           "dense (default: standard types, llama.cpp loads them) or sparse (the pruned block matrices as ember's "
           "sparse types: mask + kept values, fewer bytes and faster decode; Q8_0 matrices become sparse int8, "
           "Q4_0 ones sparse int4: a source in those types, --type, or --sparse-bits)");
  p.option("--sparse-bits", &sparse_bits, "B",
           "--format sparse: 8 (int8 values, the matrices Q8_0) or 4 (4-bit values, the matrices Q4_0); sets "
           "--type q8_0 / q4_0 when --type is not given");
  add_compress_flags(p, &f, "--quant-method", false);
  p.positionals(&pos, "IN OUT");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (pos.size() != 2) return usage_error(p, "expects IN and OUT");
  if (sparse_bits != 0) {
    if (format != "sparse") return usage_error(p, "--sparse-bits goes with --format sparse");
    if (sparse_bits != 4 && sparse_bits != 8) return usage_error(p, "--sparse-bits must be 4 or 8");
    const std::string want = sparse_bits == 4 ? "q4_0" : "q8_0";
    std::string given = f.type_name;
    for (char& c : given) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (given.empty())
      f.type_name = want;
    else if (given != want)
      return usage_error(p, fmt::format("--sparse-bits {} stores {} matrices: --type {} contradicts it", sparse_bits,
                                        want, f.type_name));
  }
  PipelineOptions o;
  if (Status st = compress_options(f, false, &o); !st) return usage_error(p, st.message());
  if (format != "dense" && format != "sparse")
    return usage_error(p, fmt::format("unsupported --format '{}' (dense, sparse)", format));
  if (dense && format == "sparse") return usage_error(p, "--dense contradicts --format sparse");
  if (format == "sparse" && method.empty())
    return usage_error(p, "--format sparse stores what --method prunes: give --method and --sparsity");
  o.sparse_format = format == "sparse";
  const bool structured = ffn > 0 || heads > 0 || kv_groups > 0 || drop_layers > 0 || vocab > 0;
  if (activations != -1) {
    if (!(activations > 0 && activations < 1))
      return usage_error(p, fmt::format("--activations must be in (0, 1), got {}", activations));
    o.act_sparsity = activations;
  }
  if (!act_allocation.empty()) {
    if (activations == -1) return usage_error(p, "--act-allocation goes with --activations");
    auto a = act_allocation_from_name(act_allocation);
    if (!a) return usage_error(p, "--act-allocation: " + a.status().message());
    o.act_allocation = *a;
  }
  if (method.empty() && !structured && !o.act_sparsity)
    return usage_error(p, "nothing to prune: give --method and --sparsity, --activations, or --ffn, --heads, "
                          "--kv-groups, --drop-layers or --vocab");
  if (!method.empty()) {
    PruneOptions po;
    auto m = prune_method_from_name(method);
    if (!m) return usage_error(p, fmt::format("unsupported --method '{}' (magnitude, wanda, sparsegpt)", method));
    po.method = *m;
    auto pat = parse_prune_pattern(pattern);
    if (!pat) return usage_error(p, "--pattern: " + pat.status().message());
    po.pattern = *pat;
    if (po.pattern.unstructured()) {
      if (!(sparsity >= 0 && sparsity < 1)) return usage_error(p, "--sparsity must be given, in [0, 1)");
      po.sparsity = sparsity;
    } else if (sparsity >= 0 && std::abs(sparsity - po.pattern.sparsity()) > 1e-6) {
      return usage_error(p, fmt::format("--sparsity {} contradicts --pattern {} ({})", sparsity, pattern,
                                        po.pattern.sparsity()));
    }
    const auto ls = layer_sparsity_from_name(layer_sparsity);
    if (!ls) return usage_error(p, fmt::format("unsupported --layer-sparsity '{}' (uniform, owl, kl)", layer_sparsity));
    po.layers = *ls;
    if (po.layers != LayerSparsity::kUniform && !po.pattern.unstructured())
      return usage_error(p, fmt::format("--layer-sparsity {} goes with unstructured pruning (N:M fixes every layer's "
                                        "sparsity)", layer_sparsity));
    if (!(owl_lambda >= 0 && owl_lambda < 1) || !(owl_m > 0))
      return usage_error(p, "--owl-lambda must be in [0, 1) and --owl-m > 0");
    po.owl_lambda = owl_lambda, po.owl_m = owl_m;
    if (!quota.empty() && quota != "row" && quota != "matrix")
      return usage_error(p, fmt::format("unsupported --quota '{}' (row, matrix)", quota));
    if (!quota.empty() && (po.method == PruneMethod::kWanda || !po.pattern.unstructured()))
      return usage_error(p, "--quota goes with unstructured magnitude or sparsegpt (wanda and N:M always count per "
                            "row)");
    po.per_row = quota == "row";
    if (o.sparse_format && quota.empty() && po.method != PruneMethod::kWanda && po.pattern.unstructured())
      std::fprintf(stderr,
                   "ember prune: note: in --format sparse every row of a matrix takes its densest row's bytes, and "
                   "%s counts one quota per matrix: add --quota row for the smallest file (docs/pruning.md: "
                   "SparseGPT 50%% is 7.94 bits per weight without it, 5.50 with it)\n",
                   method.c_str());
    po.damp = f.damp;
    o.prune = po;
  } else if (sparsity >= 0 || pattern != "unstructured" || layer_sparsity != "uniform" || !quota.empty()) {
    return usage_error(p, "--sparsity, --pattern, --layer-sparsity and --quota go with --method");
  }
  if (structured) {
    StructuredPruneOptions so;
    for (auto [v, name] : {std::pair{ffn, "--ffn"}, {heads, "--heads"}, {kv_groups, "--kv-groups"}})
      if (!(v >= 0 && v < 1)) return usage_error(p, fmt::format("{} must be in [0, 1)", name));
    if (drop_layers < 0) return usage_error(p, "--drop-layers must be >= 0");
    if (layer_metric != "bi" && layer_metric != "kl")
      return usage_error(p, fmt::format("unsupported --layer-metric '{}' (bi, kl)", layer_metric));
    if (ffn_multiple < 0) return usage_error(p, "--ffn-multiple must be >= 0");
    if ((global_ffn || ffn_multiple) && ffn == 0) return usage_error(p, "--global-ffn and --ffn-multiple go with --ffn");
    if (!vocab_text.empty() && vocab == 0) return usage_error(p, "--vocab-text goes with --vocab");
    so.ffn = ffn, so.heads = heads, so.kv_groups = kv_groups, so.drop_layers = drop_layers;
    so.layer_metric = layer_metric == "kl" ? LayerMetric::kKl : LayerMetric::kBlockInfluence;
    so.global = global_ffn;
    so.ffn_multiple = ffn_multiple;
    o.structured = so;
  }
  if (vocab < 0) return usage_error(p, "--vocab must be >= 0");
  if (speed_tokens < 0 || speed_tokens > 4096) return usage_error(p, "--speed-tokens must be in [0, 4096]");
  o.in = resolve_model_path(p, pos[0]);
  if (o.in.empty()) return kExitUsage;
  if (vocab > 0) {  // choose the kept output tokens with the model's tokenizer
    auto file = open_model_file(o.in);
    if (!file) return usage_error(p, file.status().message());
    Metadata md = (*file)->metadata;
    if (const std::string* dir = md.get_string("ember.hf.dir"); dir && !md.find("tokenizer.ggml.tokens"))
      if (Status st = metadata_from_hf_tokenizer(*dir, &md); !st) return usage_error(p, "tokenizer: " + st.message());
    auto tok = Tokenizer::from_metadata(md);
    if (!tok) return usage_error(p, "tokenizer: " + tok.status().message());
    const std::string path = vocab_text.empty() ? o.calib_path : vocab_text;
    auto text = read_all(path);
    if (!text) return usage_error(p, fmt::format("cannot read --vocab-text '{}'", path));
    const std::vector<int32_t> ids = (*tok)->encode(*text, {.add_bos = false});
    const int n_vocab = (*tok)->n_vocab();
    auto kept = choose_output_tokens(md, n_vocab, ids, vocab);
    if (!kept) return usage_error(p, kept.status().message());
    int64_t covered = 0;
    for (int32_t t : ids) covered += std::binary_search(kept->begin(), kept->end(), t);
    std::printf("vocabulary: keeping %zu of %d output tokens, which cover %.2f%% of the %zu tokens of %s\n",
                kept->size(), n_vocab, ids.empty() ? 0.0 : 100.0 * covered / ids.size(), ids.size(), path.c_str());
    o.structured->vocab = std::move(*kept);
  }
  ReportOptions report;
  auto text = check_text(f);
  if (!text) return usage_error(p, text.status().message());
  report.text = *text;
  report.windows = f.check_windows;
  report.sizes = true;
  report.speed_tokens = speed_tokens;
  return run_compress("prune", p, f, o, pos[1], report);
}

}  // namespace ember::cli
