// `ember run`: generate text from a prompt, streamed as it is produced, then
// report prompt tokens, prefill tok/s, generated tokens and decode tok/s.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>

#include "server/chat_prompt.h"
#include "cli/common.h"
#include "cli/act_options.h"
#include "cli/device_options.h"
#include "cli/moe_options.h"
#include "cli/kv_options.h"
#include "cli/parallel_options.h"
#include "cli/spec_options.h"
#include "engine/engine.h"
#include "engine/generator.h"

namespace ember::cli {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The prompt through the serving engine (one request), as `ember run
// --speculative-method ...` does: the same tokens as the plain generator
// (greedy and seeded), and the speculation counters.
// With a parallel job (tensor / pipeline parallelism) the engine runs over
// rank 0's ParallelRunner.
int run_with_engine(const Model& m, const Tokenizer& tk, const std::vector<int32_t>& ids, int n_predict,
                    const SamplingParams& sp, int threads, int64_t ctx, const SpecConfig& spec, KvTypes kv_types,
                    ParallelJob* job, const BackendFactory& backend) {
  ThreadPool pool(threads);
  EngineConfig ec;
  ec.backend = backend;
  ec.max_model_len = ctx;
  ec.kv_types = kv_types;
  ec.max_num_seqs = 1;
  ec.spec = spec;
  auto engine = [&]() -> Result<std::unique_ptr<Engine>> {
    if (!job) return Engine::create(m, pool, ec);
    auto runner = job->make_runner(m, pool, ec.max_num_batched_tokens, kv_types);
    if (!runner) return runner.status();
    return Engine::create(std::move(runner.value()), ec, m, pool);  // a draft model runs here, on rank 0
  }();
  if (!engine) {
    std::fprintf(stderr, "ember run: %s\n", engine.status().message().c_str());
    return kExitFailure;
  }
  Engine& e = **engine;
  RequestParams rp;
  rp.prompt = ids;
  rp.sampling = sp;
  rp.max_tokens = n_predict;
  rp.stop_token_ids = tk.eog_ids();
  if (Status st = e.add_request("run", rp); !st) {
    std::fprintf(stderr, "ember run: %s\n", st.message().c_str());
    return kExitFailure;
  }
  StreamDecoder sd(tk);
  const double t0 = now_seconds();
  double t_first = 0;
  int64_t n_gen = 0;
  while (e.has_unfinished()) {
    auto out = e.step();
    if (!out) {
      std::fprintf(stderr, "ember run: %s\n", out.status().message().c_str());
      return kExitFailure;
    }
    for (const TokenEvent& t : out->tokens) {
      if (n_gen++ == 0) t_first = now_seconds();
      if (tk.is_eog(t.token)) continue;
      std::string piece = sd.push(t.token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    }
    std::fflush(stdout);
  }
  const double t_end = now_seconds();
  std::string tail = sd.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const EngineStats st = e.stats();
  const double prefill = t_first - t0, decode = t_end - t_first;
  std::fprintf(stderr, "\nprompt: %lld tokens, %.1f tok/s | generated: %lld tokens, %.1f tok/s\n",
               static_cast<long long>(ids.size()), prefill > 0 ? ids.size() / prefill : 0.0,
               static_cast<long long>(n_gen), decode > 0 && n_gen > 1 ? (n_gen - 1) / decode : 0.0);
  if (spec.method != SpecMethod::kNone)
    std::fprintf(stderr,
                 "speculative (%s, k %d): %lld drafts, %lld accepted (%.1f%%), mean accepted length %.2f, %lld target "
                 "steps\n",
                 spec_method_name(spec.method), spec.num_speculative_tokens,
                 static_cast<long long>(st.spec.n_draft_tokens), static_cast<long long>(st.spec.n_accepted_tokens),
                 100.0 * st.spec.acceptance_rate(), st.spec.mean_accepted_length(), static_cast<long long>(st.n_steps));
  return kExitOk;
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  ArgParser p("run", "ember run [-m MODEL] -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S] "
                     "[--chat] [-t THREADS]");
  std::string model_path, prompt, prompt_file, system;
  int n_predict = 256, threads = default_thread_count(), n_ctx = 0;
  SamplingParams sp;
  uint64_t seed = 0;
  bool seed_set = false, chat = false, verbose = false;
  std::string seed_str;
  SpecOptions spec_opts;
  KvOptions kv_opts;
  ActOptions act_opts;
  ParallelOptions par_opts;
  MoeOptions moe_opts;
  p.option("-m,--model", &model_path, "MODEL", "model file (default: the bundled Gemma 3 270M)");
  p.option("-p,--prompt", &prompt, "PROMPT", "prompt text ('-' reads standard input)");
  p.option("-f,--file", &prompt_file, "FILE", "read the prompt from a file");
  p.option("-n,--n-predict", &n_predict, "N", "tokens to generate (default 256)");
  p.option("--temp", &sp.temperature, "T", "temperature, 0 = greedy (default 0.8)");
  p.option("--top-k", &sp.top_k, "K", "top-k, 0 = off (default 40)");
  p.option("--top-p", &sp.top_p, "P", "top-p, 1 = off (default 0.95)");
  p.option("--min-p", &sp.min_p, "P", "min-p, 0 = off (default 0.05)");
  p.option("--repeat-penalty", &sp.repetition_penalty, "X", "repetition penalty, 1 = off (default 1)");
  p.option("--presence-penalty", &sp.presence_penalty, "X", "presence penalty (default 0)");
  p.option("--frequency-penalty", &sp.frequency_penalty, "X", "frequency penalty (default 0)");
  p.option("--repeat-last-n", &sp.penalty_last_n, "N", "tokens considered by the penalties, -1 = all (default 64)");
  p.option("--seed", &seed_str, "S", "random seed (default: random)");
  p.flag("--chat", &chat, "format the prompt with the model's chat template");
  p.option("--system", &system, "TEXT", "system prompt (with --chat)");
  p.option("-c,--ctx-size", &n_ctx, "N", "context size (default: prompt + n, at most the trained context)");
  p.option("-t,--threads", &threads, "N", "threads (default: all cores)");
  p.flag("-v,--verbose", &verbose, "print the prompt tokens and settings");
  spec_opts.add_to(p);
  kv_opts.add_to(p);
  act_opts.add_to(p);
  par_opts.add_to(p);
  moe_opts.add_to(p);
  LoadFlags load_flags;
  load_flags.add_to(p);
  DeviceOptions dev;
  dev.add_to(p);
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (Status st = dev.resolve(); !st) return usage_error(p, st.message());
  load_flags.file_layout = dev.file_layout();
  if (prompt.empty() && prompt_file.empty()) return usage_error(p, "a prompt is required (-p PROMPT or -f FILE)");
  if (!prompt.empty() && !prompt_file.empty()) return usage_error(p, "use either -p or -f, not both");
  if (prompt == "-" || !prompt_file.empty()) {
    auto text = read_all(prompt_file.empty() ? "-" : prompt_file);
    if (!text) return usage_error(p, text.status().message());
    prompt = *text;
  }
  if (n_predict < 0 || n_predict > 1000000) return usage_error(p, "-n must be in [0, 1000000]");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (n_ctx < 0) return usage_error(p, "-c must be >= 0");
  if (!seed_str.empty()) {
    char* end = nullptr;
    errno = 0;
    seed = std::strtoull(seed_str.c_str(), &end, 10);
    if (*end || errno || seed_str[0] == '-') return usage_error(p, "--seed expects a non-negative integer");
    seed_set = true;
  }
  if (!seed_set) seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  sp.seed = seed;
  if (Status st = sp.validate(); !st) return usage_error(p, st.message());
  auto spec = spec_opts.to_config();
  if (!spec) return usage_error(p, spec.status().message());

  // Tensor / pipeline parallelism (under mpirun): ranks other than 0 only
  // execute the steps rank 0 sends.
  std::unique_ptr<ParallelJob> job;
  if (int rc = start_parallel_job(p, par_opts, model_path, spec->method, &job)) return rc;
  LoadedModel lm;
  if (!load_model_and_tokenizer(p, model_path, &lm, job ? job->shard() : ModelShard{}, load_flags)) {
    if (job) job->abort(kExitUsage);
    return kExitUsage;
  }
  if (Status st = act_opts.apply(lm.model.get()); !st) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, st.message());
  }
  if (Status st = moe_opts.apply(lm.model.get()); !st) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, st.message());
  }
  if (job && !job->leader()) return job->run_worker(*lm.model, threads, "run");
  const std::string& path = lm.path;
  const Model& m = *lm.model;
  const std::unique_ptr<Tokenizer>* tok = &lm.tokenizer;
  const Tokenizer& tk = **tok;
  std::unique_ptr<Model> draft_model;  // --speculative-method draft / layerskip
  if (Status st = spec_opts.load_draft(m, &draft_model, &spec.value()); !st) return usage_error(p, st.message());
  auto kv_types = kv_opts.to_types(m.config());
  if (!kv_types) return usage_error(p, kv_types.status().message());
  if (Status st = dev.check(m, *kv_types, spec->method != SpecMethod::kNone, job != nullptr); !st)
    return usage_error(p, st.message());

  std::vector<int32_t> ids;
  if (chat) {
    nlohmann::json messages = nlohmann::json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    auto rendered = render_chat(tk, m.config().arch, messages, true);
    if (!rendered) return usage_error(p, fmt::format("chat template: {}", rendered.status().message()));
    ids = tokenize_rendered_chat(tk, *rendered, messages);
  } else {
    EncodeOptions eo;
    eo.add_bos = true;
    eo.parse_special = false;
    ids = tk.encode(prompt, eo);
  }
  if (ids.empty()) return usage_error(p, "the prompt produced no tokens");

  const int64_t n_train = m.config().n_ctx_train;
  int64_t ctx = n_ctx > 0 ? n_ctx : std::min<int64_t>(n_train, static_cast<int64_t>(ids.size()) + n_predict + 1);
  if (static_cast<int64_t>(ids.size()) >= ctx)
    return usage_error(p, fmt::format("prompt of {} tokens does not fit the context of {} tokens", ids.size(), ctx));
  // LongRoPE's factors follow the context (Model::set_context_length), the draft's too.
  lm.model->set_context_length(ctx);
  if (draft_model) draft_model->set_context_length(ctx);
  if (verbose) {
    std::fprintf(stderr, "model: %s (%s), threads %d, seed %llu, context %lld\nprompt tokens:", path.c_str(),
                 m.config().arch.c_str(), threads, static_cast<unsigned long long>(seed), static_cast<long long>(ctx));
    for (int32_t id : ids) std::fprintf(stderr, " %d", id);
    std::fprintf(stderr, "\n");
  }

  // --speculative-method (none included): the serving engine; else the
  // plain single-sequence generator.
  // (A device: its paged KV pool lives in the device's memory.)
  if ((spec_opts.given() || job || dev.cuda()) && n_predict > 0)
    return run_with_engine(m, tk, ids, n_predict, sp, threads, ctx, *spec, *kv_types, job.get(), dev.factory());

  ThreadPool pool(threads);
  Generator gen(m, pool, ctx, 512, *kv_types);
  Sampler sampler(sp);
  StreamDecoder sd(tk);
  GenerationStats stats;
  Status st = gen.generate(
      ids, n_predict, sampler,
      [&](int32_t t) {
        if (tk.is_eog(t)) return false;
        std::string piece = sd.push(t);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
      },
      &stats);
  std::string tail = sd.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!st) {
    std::fprintf(stderr, "ember run: %s\n", st.message().c_str());
    return kExitFailure;
  }
  std::fprintf(stderr,
               "\nprompt: %lld tokens, %.1f tok/s | generated: %lld tokens, %.1f tok/s\n",
               static_cast<long long>(stats.n_prompt), stats.prefill_tps(), static_cast<long long>(stats.n_generated),
               stats.decode_tps());
  return kExitOk;
}

}  // namespace ember::cli
