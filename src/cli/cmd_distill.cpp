// `ember distill`: trains a student model to reproduce a teacher's
// next-token distributions (forward KL at temperature tau, optionally plus
// cross-entropy on the text and a hidden-state loss) on the CPU, and writes
// it as GGUF (train/distill.h for the loss and loop, train/teacher.h for
// the live teacher and the sampled-token cache).
//
// The student: a model file (e.g. from `ember prune`), or a layer / FFN
// width subset of the teacher (--keep-layers, --drop-layers, --keep-ffn), or
// a fresh random model of a given shape (--student-config). The data: text
// files and JSONL files ({"text": ...} per line), tokenized with the
// teacher's tokenizer, documents joined by EOS, cut into windows of
// --seq-len (BOS first when the model uses one); the last --eval-windows
// windows (or --eval-data) are held out for the periodic evaluation.
// Checkpoints (--checkpoint, every --checkpoint-every steps, and on
// Ctrl-C) hold everything to continue with --resume to the same bits.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "engine/generator.h"
#include "transform/gen_model.h"
#include "train/distill.h"
#include "train/rng.h"

namespace ember::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // a second Ctrl-C: leave at once (the last checkpoint stays)
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool parse_int_list(const std::string& s, std::vector<int>* out) {
  for (const std::string& p : split(s, ',')) {
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 1000000) return false;
    out->push_back(static_cast<int>(v));
  }
  return !out->empty();
}

// The documents of a text file (one) or a JSONL file (the "text" of each line).
Result<std::vector<std::string>> read_documents(const std::string& path) {
  auto all = read_all(path);
  if (!all) return all.status();
  std::vector<std::string> docs;
  const bool jsonl = path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  if (!jsonl) {
    docs.push_back(std::move(*all));
    return docs;
  }
  std::stringstream ss(*all);
  std::string line;
  int n = 0;
  while (std::getline(ss, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      return Status::errorf("{}:{}: expected a JSON object with a string \"text\"", path, n);
    docs.push_back(j["text"].get<std::string>());
  }
  return docs;
}

// Every document's tokens, joined by EOS (when the tokenizer has one).
Result<std::vector<int32_t>> tokenize_files(const std::vector<std::string>& paths, const Tokenizer& tok) {
  std::vector<int32_t> out;
  for (const std::string& p : paths) {
    auto docs = read_documents(p);
    if (!docs) return docs.status();
    for (const std::string& d : *docs) {
      const std::vector<int32_t> t = tok.encode(d, {.add_bos = false});
      out.insert(out.end(), t.begin(), t.end());
      if (tok.eos_id() >= 0) out.push_back(tok.eos_id());
    }
  }
  return out;
}

// `n` layers to drop, spread evenly over the middle of the stack: never the
// first or the last, and never a global-attention layer of a model whose
// other layers use a sliding window.
Result<std::vector<int>> layers_after_drop(const ModelConfig& c, int n) {
  bool any_window = false;
  for (const LayerConfig& l : c.layers) any_window |= l.sliding_window > 0;
  std::vector<int> cand;
  for (int l = 1; l + 1 < c.n_layer; ++l)
    if (!any_window || c.layers[l].sliding_window > 0) cand.push_back(l);
  if (n < 1 || n > static_cast<int>(cand.size()))
    return Status::errorf("--drop-layers {}: between 1 and {} layers of this model can be dropped", n, cand.size());
  std::vector<bool> drop(static_cast<size_t>(c.n_layer), false);
  for (int i = 0; i < n; ++i)
    drop[static_cast<size_t>(cand[static_cast<size_t>((2 * i + 1) * cand.size() / (2 * n))])] = true;
  std::vector<int> keep;
  for (int l = 0; l < c.n_layer; ++l)
    if (!drop[static_cast<size_t>(l)]) keep.push_back(l);
  return keep;
}

// FFN channels kept per layer by a data-free magnitude score ||down[:, j]||
// * ||gate[j]|| * ||up[j]|| (`ember prune --ffn` scores with calibration
// activations and is the better tool); the count a multiple of 32.
std::vector<std::vector<int>> ffn_channels_by_magnitude(const TrainModel& m, double keep_frac) {
  std::vector<std::vector<int>> keep;
  for (int l = 0; l < m.config().n_layer; ++l) {
    const int F = m.config().layers[l].n_ff;
    int k = static_cast<int>(std::lround(F * keep_frac));
    if (k >= 32) k = k / 32 * 32;
    k = std::clamp(k, 1, F);
    const TrainTensor *g = m.find(TensorRole::kFfnGate, l), *u = m.find(TensorRole::kFfnUp, l),
                      *d = m.find(TensorRole::kFfnDown, l);
    std::vector<double> score(static_cast<size_t>(F));
    for (int j = 0; j < F; ++j) {
      double sg = 0, su = 0, sd = 0;
      for (int64_t i = 0; i < g->cols; ++i) {
        sg += std::pow(m.param(g)[j * g->cols + i], 2);
        su += std::pow(m.param(u)[j * u->cols + i], 2);
      }
      for (int64_t r = 0; r < d->rows; ++r) sd += std::pow(m.param(d)[r * d->cols + j], 2);
      score[static_cast<size_t>(j)] = std::sqrt(sg * su * sd);
    }
    std::vector<int> idx(static_cast<size_t>(F));
    for (int j = 0; j < F; ++j) idx[static_cast<size_t>(j)] = j;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
    idx.resize(static_cast<size_t>(k));
    std::sort(idx.begin(), idx.end());
    keep.push_back(idx);
  }
  return keep;
}

// "layers=L,embd=E,ff=F,heads=H,kv=K[,head_dim=D]" on the teacher's architecture.
Result<GenModelShape> parse_student_config(const std::string& s, const ModelConfig& teacher) {
  auto shape = gen_model_arch_defaults(teacher.arch);
  if (!shape) return shape.status();
  GenModelShape g = *shape;
  g.name = "distill-student";
  g.head_dim = teacher.head_dim;
  g.n_ctx = teacher.n_ctx_train;
  g.norm_eps = teacher.norm_eps;
  for (const std::string& kv : split(s, ',')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return Status::errorf("--student-config: '{}' is not key=value", kv);
    const std::string k = kv.substr(0, eq);
    char* end = nullptr;
    const long v = std::strtol(kv.c_str() + eq + 1, &end, 10);
    if (*end != '\0' || v < 1 || v > 1 << 20) return Status::errorf("--student-config: bad value in '{}'", kv);
    int* dst = k == "layers" ? &g.n_layer : k == "embd" ? &g.n_embd : k == "ff" ? &g.n_ff : k == "heads" ? &g.n_head
             : k == "kv" ? &g.n_head_kv : k == "head_dim" ? &g.head_dim : nullptr;
    if (!dst) return Status::errorf("--student-config: unknown key '{}' (layers, embd, ff, heads, kv, head_dim)", k);
    *dst = static_cast<int>(v);
  }
  EMBER_RETURN_IF_ERROR(validate_gen_model_shape(g));
  return g;
}

// --generate: n tokens of text sampled from the teacher (temperature 1, no
// truncation: its own distribution), in pieces of up to seq_len tokens, each
// prompted by 16 tokens from a random place of the data (BOS alone without
// data), joined by EOS.
Result<std::vector<int32_t>> generate_text(const Model& teacher, const Tokenizer& tok, const std::vector<int32_t>& data,
                                           int64_t n, int64_t seq_len, uint64_t seed, ThreadPool& pool) {
  std::vector<int32_t> out;
  Rng rng(seed ^ 0x6e6572617465ull);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = seed;
  Sampler sampler(sp);
  Generator gen(teacher, pool, seq_len + 17, 64);
  ProgressLine line;
  const auto t0 = std::chrono::steady_clock::now();
  while (static_cast<int64_t>(out.size()) < n) {
    std::vector<int32_t> prompt;
    if (tok.add_bos() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    if (data.size() > 16) {
      const size_t at = static_cast<size_t>(rng.below(data.size() - 16));
      prompt.insert(prompt.end(), data.begin() + static_cast<int64_t>(at), data.begin() + static_cast<int64_t>(at) + 16);
    }
    const size_t first = out.size();
    out.insert(out.end(), prompt.begin() + (tok.add_bos() && tok.bos_id() >= 0 ? 1 : 0), prompt.end());
    sampler.reset();
    GenerationStats st;
    EMBER_RETURN_IF_ERROR(gen.generate(prompt, static_cast<int>(seq_len), sampler, [&](int32_t t) {
      out.push_back(t);
      return !tok.is_eog(t) && static_cast<int64_t>(out.size()) < n;
    }, &st));
    if (tok.eos_id() >= 0 && out.size() > first && out.back() != tok.eos_id()) out.push_back(tok.eos_id());
    line.update(static_cast<long>(std::min<int64_t>(n, static_cast<int64_t>(out.size()))), static_cast<long>(n),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), "generated tokens");
    if (g_stop.load()) return Status::error("--generate: interrupted");
  }
  line.clear();
  return out;
}

class Progress {
 public:
  void update(const DistillProgress& p) {
    const std::string what = fmt::format("loss {:.4f}  kl {:.4f}{}  lr {:.2e}  |g| {:.3f}  {:.0f} tok/s", p.loss, p.kl,
                                         p.ce > 0 ? fmt::format("  ce {:.3f}", p.ce) : std::string(), p.lr,
                                         p.grad_norm, p.tokens_per_s);
    const double elapsed = p.tokens_per_s > 0 ? static_cast<double>(p.tokens) / p.tokens_per_s : 0;
    line_.update(static_cast<long>(p.step), static_cast<long>(p.steps), elapsed, what);
  }
  void print_eval(const DistillEval& e) {
    line_.clear();
    std::fprintf(stderr, "eval at step %lld (%lld positions): KL %.5f, top-1 %.2f%%, perplexity %.3f (teacher %.3f)\n",
                 static_cast<long long>(e.step), static_cast<long long>(e.rows), e.kl, 100 * e.top1, e.ppl,
                 e.ppl_teacher);
  }
  void clear() { line_.clear(); }

 private:
  ProgressLine line_;
};

void print_times(const DistillTimes& t, int64_t steps, int64_t tokens_per_step, double step_flops) {
  if (steps <= 0 || t.total() <= 0) return;
  const double n = static_cast<double>(steps);
  std::fprintf(stderr,
               "per step: teacher %.2f s, student forward %.2f s, head and loss %.2f s, backward %.2f s, optimizer "
               "%.2f s; %.1f tokens/s, %.1f GFLOP/s (student model FLOPs)\n",
               t.teacher / n, t.forward / n, t.head / n, t.backward / n, t.optimizer / n,
               static_cast<double>(tokens_per_step) * n / t.total(), step_flops * n / t.total() * 1e-9);
}

// --bench-steps: cross-entropy steps without a teacher, timed one by one.
int bench_training(TrainModel& student, const TokenWindows& data, DistillOptions o, int64_t steps, double step_flops,
                   ThreadPool& pool) {
  o.loss.w_kl = 0.f;
  o.loss.w_ce = 1.f;
  o.hidden_weight = 0.f;
  o.checkpoint_path.clear();
  o.steps = steps;
  Distiller d(student, nullptr, nullptr, data, o, pool);
  std::vector<double> secs;
  auto last = std::chrono::steady_clock::now();
  auto r = d.run([&](const DistillProgress&) {
    const auto now = std::chrono::steady_clock::now();
    secs.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  }, nullptr, nullptr);
  if (!r) {
    std::fprintf(stderr, "ember distill: %s\n", r.status().message().c_str());
    return kExitFailure;
  }
  // The first step (allocation, first touch of the weights and the
  // optimizer state) is a warm-up: the median is over the others.
  std::vector<double> sorted(secs.size() > 1 ? secs.begin() + 1 : secs.begin(), secs.end());
  std::sort(sorted.begin(), sorted.end());
  const double med = sorted[sorted.size() / 2];
  std::printf("bench: %lld steps of %lld tokens (%lld trained parameters): median step %.3f s (min %.3f, max %.3f; "
              "the first, a warm-up, not counted), %.1f tokens/s, %.1f GFLOP/s\n",
              static_cast<long long>(steps), static_cast<long long>(o.batch * o.accum * data.seq_len()),
              static_cast<long long>(student.n_trainable()), med, sorted.front(), sorted.back(),
              static_cast<double>(o.batch * o.accum * data.seq_len()) / med, step_flops / med * 1e-9);
  std::printf("step seconds:");
  for (double x : secs) std::printf(" %.3f", x);
  std::printf("\n");
  print_times(d.times(), d.step(), o.batch * o.accum * data.seq_len(), step_flops);
  return kExitOk;
}

}  // namespace

int cmd_distill(int argc, char** argv, int first) {
  ArgParser p("distill",
              "ember distill --teacher T (--student S | --keep-layers L,.. | --drop-layers N | --keep-ffn F | "
              "--student-config ..) --data FILE... [--tokens N] [--seq-len L] [--batch B] [--lr LR] "
              "[--temperature T] [--alpha-ce A] [--hidden-loss W] [--train layers|ffn|all|lora:R] -o OUT.gguf");
  std::string teacher_path, student_path, out_path, data_arg, eval_data, keep_layers, student_cfg, train_mode = "layers";
  std::string cache_path, ckpt_path, out_type = "f32";
  int64_t tokens = 100000, seq_len = 256, batch = 4, accum = 1, warmup = -1, eval_windows = 16, eval_every = 0;
  int64_t ckpt_every = 50;
  int drop_layers = 0, cache_samples = 12;
  float lr = 1e-4f, min_lr = 0.1f, wd = 0.0f, clip = 1.0f, tau = 1.0f, alpha_ce = 0.0f, hidden = 0.0f, keep_ffn = 0;
  float cache_beta = 1.0f;
  uint64_t seed = 0;
  bool resume = false, grad_ckpt = false, bf16 = false;
  int64_t bench_steps = 0, generate = 0;
  int threads = default_thread_count();
  std::vector<std::string> extra;
  p.option("--teacher", &teacher_path, "T", "teacher model (default: the default model)");
  p.option("--student", &student_path, "S", "student model file (e.g. from ember prune)");
  p.option("--keep-layers", &keep_layers, "L,..", "student = these layers of the teacher");
  p.option("--drop-layers", &drop_layers, "N", "student = the teacher without N middle layers");
  p.option("--keep-ffn", &keep_ffn, "F", "keep this fraction of each layer's FFN channels (by weight magnitude)");
  p.option("--student-config", &student_cfg, "K=V,..", "fresh random student: layers=,embd=,ff=,heads=,kv=[,head_dim=]");
  p.option("--data", &data_arg, "FILE[,FILE..]", "training text (.txt) or JSONL ({\"text\": ..} per line); more "
                                                  "files as arguments");
  p.option("--generate", &generate, "N", "add N tokens of teacher-generated text to the training data");
  p.option("--eval-data", &eval_data, "FILE", "held-out text (default: the last --eval-windows windows of --data)");
  p.option("--tokens", &tokens, "N", "training tokens (default 100000)");
  p.option("--seq-len", &seq_len, "L", "tokens per window (default 256)");
  p.option("--batch", &batch, "B", "windows per micro-batch (default 4)");
  p.option("--accum", &accum, "A", "micro-batches per optimizer step (default 1)");
  p.option("--lr", &lr, "LR", "peak learning rate (default 1e-4)");
  p.option("--min-lr-ratio", &min_lr, "R", "final learning rate / peak (cosine; default 0.1)");
  p.option("--warmup", &warmup, "STEPS", "linear warm-up steps (default: 5% of the steps)");
  p.option("--weight-decay", &wd, "W", "AdamW weight decay on matrices (default 0)");
  p.option("--clip", &clip, "C", "gradient-norm clipping (default 1; 0: off)");
  p.option("--temperature", &tau, "T", "distillation temperature (default 1)");
  p.option("--alpha-ce", &alpha_ce, "A", "weight of the cross-entropy on the text (default 0)");
  p.option("--hidden-loss", &hidden, "W", "weight of the hidden-state loss (default 0; needs the live teacher)");
  p.option("--train", &train_mode, "MODE", "layers (default), ffn, all or lora:R");
  p.option("--teacher-cache", &cache_path, "FILE", "sampled-token teacher cache (built if absent, then reused)");
  p.option("--cache-samples", &cache_samples, "K", "samples per position in the cache (default 12)");
  p.option("--cache-beta", &cache_beta, "B", "cache proposal ~ p^B (default 1: p itself)");
  p.option("--checkpoint", &ckpt_path, "FILE", "checkpoint file (default OUT.ckpt)");
  p.option("--checkpoint-every", &ckpt_every, "STEPS", "steps between checkpoints (default 50; 0: only on stop)");
  p.flag("--resume", &resume, "continue from the checkpoint");
  p.option("--eval-windows", &eval_windows, "N", "held-out windows (default 16)");
  p.option("--eval-every", &eval_every, "STEPS", "steps between evaluations (default: start and end only)");
  p.flag("--grad-checkpointing", &grad_ckpt, "recompute each block in the backward (less memory)");
  p.flag("--bf16", &bf16, "matrix products in bf16 with f32 accumulation (AVX512_BF16 CPUs; about twice as fast)");
  p.option("--bench-steps", &bench_steps, "N", "time N training steps on cross-entropy alone (no teacher), print the "
                                                "per-step times and FLOP rate, write nothing");
  p.option("--seed", &seed, "S", "seed of the data order and adapters (default 0)");
  p.option("--out-type", &out_type, "f32|bf16", "type of the written matrices (default f32)");
  p.option("-o,--output", &out_path, "OUT.gguf", "the distilled student");
  p.option("-t,--threads", &threads, "N", "threads");
  p.positionals(&extra, "FILE");
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  std::vector<std::string> data_files = split(data_arg, ',');
  data_files.insert(data_files.end(), extra.begin(), extra.end());
  const int n_student_sources = !student_path.empty() + !keep_layers.empty() + (drop_layers > 0) + !student_cfg.empty();
  if (bench_steps < 0) return usage_error(p, "--bench-steps must be >= 0");
  if (out_path.empty() && bench_steps == 0) return usage_error(p, "an output file is required (-o OUT.gguf)");
  if (bench_steps > 0 && out_path.empty()) out_path = "bench";
  if (generate < 0 || generate > (int64_t{1} << 32)) return usage_error(p, "--generate must be in [0, 2^32]");
  if (data_files.empty() && generate == 0) return usage_error(p, "training data is required (--data FILE or --generate N)");
  if (n_student_sources > 1) return usage_error(p, "give one of --student, --keep-layers, --drop-layers, --student-config");
  if (n_student_sources == 0 && !(keep_ffn > 0)) return usage_error(p, "a student is required (--student, --keep-layers, "
                                                                       "--drop-layers, --keep-ffn or --student-config)");
  if (keep_ffn != 0 && !(keep_ffn > 0 && keep_ffn < 1)) return usage_error(p, "--keep-ffn must be in (0, 1)");
  if (seq_len < 2 || seq_len > 1 << 16) return usage_error(p, "--seq-len must be in [2, 65536]");
  if (batch < 1 || accum < 1 || tokens < 1) return usage_error(p, "--batch, --accum and --tokens must be >= 1");
  if (!(lr > 0) || !(tau > 0) || alpha_ce < 0 || hidden < 0 || wd < 0 || clip < 0 || !(min_lr >= 0 && min_lr <= 1))
    return usage_error(p, "--lr and --temperature must be > 0; --alpha-ce, --hidden-loss, --weight-decay, --clip >= 0; "
                          "--min-lr-ratio in [0, 1]");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (out_type != "f32" && out_type != "bf16") return usage_error(p, "--out-type must be f32 or bf16");
  if (cache_samples < 1 || cache_samples > 4096 || !(cache_beta > 0))
    return usage_error(p, "--cache-samples must be in [1, 4096] and --cache-beta > 0");
  if (ckpt_path.empty()) ckpt_path = out_path + ".ckpt";
  if (resume && !std::ifstream(ckpt_path)) return usage_error(p, fmt::format("--resume: no checkpoint '{}'", ckpt_path));

  // The teacher (its rows are read by the student before they are repacked).
  const std::string tpath = resolve_model_path(p, teacher_path);
  if (tpath.empty()) return kExitUsage;
  auto teacher = Model::load(tpath);
  if (!teacher) return usage_error(p, teacher.status().message());
  auto tok = Tokenizer::from_metadata((*teacher)->file().metadata);
  if (!tok) return usage_error(p, fmt::format("{}: tokenizer: {}", tpath, tok.status().message()));
  const ModelConfig& tc = (*teacher)->config();

  // The student.
  std::unique_ptr<Model> student_file;
  std::unique_ptr<TrainModel> student;
  const Metadata* base_meta = &(*teacher)->file().metadata;
  std::vector<int> kept_layers;
  if (!student_path.empty() || !student_cfg.empty()) {
    std::string spath = student_path;
    if (!student_cfg.empty()) {
      auto shape = parse_student_config(student_cfg, tc);
      if (!shape) return usage_error(p, shape.status().message());
      spath = out_path + ".init.gguf";
      GenModelOptions go;
      go.type = DType::kF32;
      go.seed = seed;
      go.vocab = &(*teacher)->file().metadata;
      ThreadPool gp(threads);
      if (auto w = write_random_model(*shape, go, spath, gp); !w) return usage_error(p, w.status().message());
    }
    auto sm = Model::load(spath);
    if (!sm) return usage_error(p, sm.status().message());
    student_file = std::move(*sm);
    base_meta = &student_file->file().metadata;
    auto t = TrainModel::from_model(*student_file);
    if (!t) return usage_error(p, fmt::format("{}: {}", spath, t.status().message()));
    student = std::move(*t);
    if (const GgufValue* v = base_meta->find("ember.prune.removed_layers"); v && v->type == GgufType::kArray)
      for (int l = 0; l < tc.n_layer; ++l)
        if (std::find(v->ints.begin(), v->ints.end(), l) == v->ints.end()) kept_layers.push_back(l);
  } else {
    auto t = TrainModel::from_model(**teacher);
    if (!t) return usage_error(p, t.status().message());
    student = std::move(*t);
    if (!keep_layers.empty() && !parse_int_list(keep_layers, &kept_layers))
      return usage_error(p, "--keep-layers expects a comma-separated list of layer indices");
    if (drop_layers > 0) {
      auto k = layers_after_drop(tc, drop_layers);
      if (!k) return usage_error(p, k.status().message());
      kept_layers = *k;
    }
    if (!kept_layers.empty()) {
      auto s = student->subset_layers(kept_layers);
      if (!s) return usage_error(p, s.status().message());
      student = std::move(*s);
    }
  }
  if (keep_ffn > 0) {
    auto s = student->subset_ffn(ffn_channels_by_magnitude(*student, keep_ffn));
    if (!s) return usage_error(p, s.status().message());
    student = std::move(*s);
  }
  if (student->config().n_vocab != tc.n_vocab)
    return usage_error(p, fmt::format("the student's vocabulary ({} tokens) differs from the teacher's ({})",
                                      student->config().n_vocab, tc.n_vocab));
  prepare_for_cpu(**teacher);
  std::signal(SIGINT, on_sigint);

  // Data.
  auto stream = tokenize_files(data_files, **tok);
  if (!stream) return usage_error(p, stream.status().message());
  if (generate > 0) {
    ThreadPool gp(threads);
    auto g = generate_text(**teacher, **tok, *stream, generate, seq_len, seed, gp);
    if (!g) return usage_error(p, g.status().message());
    std::fprintf(stderr, "generated %lld tokens with the teacher\n", static_cast<long long>(g->size()));
    stream->insert(stream->end(), g->begin(), g->end());
  }
  std::vector<int32_t> eval_stream;
  if (!eval_data.empty()) {
    auto e = tokenize_files({eval_data}, **tok);
    if (!e) return usage_error(p, e.status().message());
    eval_stream = std::move(*e);
  }
  const int32_t bos = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
  auto data = TokenWindows::make(std::move(*stream), seq_len, bos, eval_windows, std::move(eval_stream), seed);
  if (!data) return usage_error(p, data.status().message());

  if (Status st = select_trainable(*student, train_mode, seed); !st) return usage_error(p, st.message());
  DistillOptions o;
  o.batch = batch;
  o.accum = accum;
  o.steps = std::max<int64_t>(1, (tokens + batch * accum * seq_len - 1) / (batch * accum * seq_len));
  o.loss.tau = tau;
  o.loss.w_kl = 1.f;
  o.loss.w_ce = alpha_ce;
  o.hidden_weight = hidden;
  if (hidden > 0) o.hidden_map = hidden_layer_map(student->config().n_layer, tc.n_layer, kept_layers);
  o.opt.lr = lr;
  o.opt.min_lr_ratio = min_lr;
  o.opt.warmup_steps = warmup >= 0 ? warmup : o.steps / 20;
  o.opt.weight_decay = wd;
  o.opt.clip = clip;
  o.grad_checkpointing = grad_ckpt;
  o.bf16 = bf16;
  if (bf16 && !train_bf16_available())
    std::fprintf(stderr, "ember distill: --bf16: this CPU has no AVX512_BF16 products; running in f32\n");
  o.eval_every = eval_every;
  o.eval_windows = eval_windows;
  o.checkpoint_every = ckpt_every;
  o.checkpoint_path = ckpt_path;
  o.seed = seed;
  o.extra_digest = fnv1a64(cache_path.data(), cache_path.size());

  ThreadPool pool(threads);
  const int64_t rows = batch * seq_len;
  const double step_flops = train_step_flops(*student, batch, seq_len) * static_cast<double>(accum);
  if (bench_steps > 0) return bench_training(*student, *data, o, bench_steps, step_flops, pool);
  LiveTeacher live(**teacher, pool, rows, hidden > 0 ? o.hidden_map : std::vector<int>{});
  std::unique_ptr<TeacherCache> cache;
  Progress prog;
  if (!cache_path.empty()) {
    TeacherCacheOptions co;
    co.samples = cache_samples;
    co.tau = tau;
    co.beta = cache_beta;
    co.seed = seed;
    o.extra_digest = fnv1a64(&co, sizeof(co), o.extra_digest);
    if (!std::ifstream(cache_path)) {
      ProgressLine line;
      const auto t0 = std::chrono::steady_clock::now();
      Status st = TeacherCache::build(live, *data, batch, co, cache_path, pool, [&](int64_t done, int64_t total) {
        line.update(static_cast<long>(done), static_cast<long>(total),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), "teacher cache windows");
      }, &g_stop);
      line.clear();
      if (!st) return usage_error(p, st.message());
      std::fprintf(stderr, "teacher cache %s written (%lld windows, %d samples per position)\n", cache_path.c_str(),
                   static_cast<long long>(data->n_train()), cache_samples);
    }
    auto c = TeacherCache::open(cache_path, *data, live.digest(), co);
    if (!c) return usage_error(p, c.status().message());
    cache = std::move(*c);
  }

  Distiller d(*student, &live, cache.get(), *data, o, pool);
  std::fprintf(stderr,
               "distill: teacher %s (%d layers), student %d layers, %lld of %lld parameters trained (%s); %lld "
               "training windows of %lld tokens, %lld held out; %lld steps of %lld tokens\n",
               tpath.c_str(), tc.n_layer, student->config().n_layer, static_cast<long long>(student->n_trainable()),
               static_cast<long long>(student->n_params()), train_mode.c_str(), static_cast<long long>(data->n_train()),
               static_cast<long long>(seq_len), static_cast<long long>(data->n_eval()), static_cast<long long>(o.steps),
               static_cast<long long>(batch * accum * seq_len));
  if (resume) {
    if (Status st = d.resume(); !st) return usage_error(p, st.message());
    std::fprintf(stderr, "resumed from %s at step %lld\n", ckpt_path.c_str(), static_cast<long long>(d.step()));
  } else if (data->n_eval() > 0) {
    auto ev = d.evaluate();
    if (!ev) return usage_error(p, ev.status().message());
    prog.print_eval(*ev);
  }
  auto r = d.run([&](const DistillProgress& x) { prog.update(x); }, [&](const DistillEval& e) { prog.print_eval(e); },
                 &g_stop);
  prog.clear();
  if (!r) {
    std::fprintf(stderr, "ember distill: %s\n", r.status().message().c_str());
    return kExitFailure;
  }
  if (*r) {
    std::fprintf(stderr, "interrupted at step %lld: checkpoint %s written; continue with the same command and --resume\n",
                 static_cast<long long>(d.step()), ckpt_path.c_str());
    return 130;
  }
  if (data->n_eval() > 0) {
    auto ev = d.evaluate();
    if (!ev) return usage_error(p, ev.status().message());
    prog.print_eval(*ev);
  }
  print_times(d.times(), d.step(), batch * accum * seq_len, step_flops);
  // The student's file: its own metadata, the teacher's tokenizer when it has none.
  // (Keys of the source's loading or quantization do not describe it.)
  Metadata meta;
  for (const auto& [k, v] : base_meta->entries())
    if (k.rfind("ember.hf.", 0) != 0 && k.rfind("quantize.", 0) != 0) meta.set(k, v);
  if (!meta.find("tokenizer.ggml.model"))
    for (const auto& [k, v] : (*teacher)->file().metadata.entries())
      if (k.rfind("tokenizer.", 0) == 0) meta.set(k, v);
  if (Status st = student->write_gguf(meta, out_type == "bf16" ? DType::kBF16 : DType::kF32, out_path); !st) {
    std::fprintf(stderr, "ember distill: %s\n", st.message().c_str());
    return kExitFailure;
  }
  std::printf("wrote %s (%d layers, %s)\n", out_path.c_str(), student->config().n_layer, out_type.c_str());
  return kExitOk;
}

}  // namespace ember::cli
