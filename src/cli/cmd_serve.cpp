// `ember serve`: the OpenAI-compatible HTTP server. Loads the model, prints
// the memory budget (weights, KV cache in tokens), starts the engine thread,
// the HTTP event loop and its handler threads, then waits for SIGINT or
// SIGTERM: on either it stops accepting, lets in-flight requests finish
// (up to --shutdown-timeout seconds), aborts the rest and exits 0.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/device_options.h"
#include "cli/common.h"
#include "cli/act_options.h"
#include "cli/moe_options.h"
#include "cli/cmd_router.h"
#include "cli/connection_options.h"
#include "cli/kv_options.h"
#include "cli/parallel_options.h"
#include "cli/spec_options.h"
#include "engine/async_engine.h"
#include "engine/kv/kv_pool.h"
#include "server/http_server.h"
#include "server/openai_service.h"
#include "template/chat_template.h"

namespace ember::cli {

int cmd_serve(int argc, char** argv, int first) {
  ArgParser p("serve",
              "ember serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--served-model-name NAME] "
              "[--max-num-seqs N] [--max-model-len L] [--kv-cache-memory BYTES] [--enable-prefix-caching] [-t THREADS]");
  std::string origins;
  std::string model_path, host = "127.0.0.1", api_key, served_name, kv_mem, preempt_mode = "recompute", swap_mem = "1G";
  int port = 8080, threads = default_thread_count(), max_num_seqs = 64, max_batched = 512, block_size = 16;
  int max_n = 16, handler_threads = 4, shutdown_timeout = 30;
  HttpServerConfig hc;
  float idle_timeout_s = 30, request_timeout_s = 10;
  int data_parallel = 1;
  std::string router_policy = "cache_aware";
  std::string batching = "continuous";
  float batch_window_ms = 50;
  int64_t max_model_len = 0, max_body = int64_t{8} << 20;
  bool prefix = false, no_prefix = false, no_log = false;
  SpecOptions spec_opts;
  KvOptions kv_opts;
  ActOptions act_opts;
  ParallelOptions par_opts;
  MoeOptions moe_opts;
  p.option("-m,--model", &model_path, "MODEL", "model file or Hugging Face folder (default: the bundled Gemma 3 270M)");
  p.option("--host", &host, "HOST", "address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)");
  p.option("--port", &port, "PORT", "port (default 8080; 0 picks a free one)");
  p.option("--api-key", &api_key, "KEY", "require 'Authorization: Bearer KEY' on /v1/* (or set EMBER_API_KEY)");
  p.option("--served-model-name", &served_name, "NAME", "model id reported by the API (default: the file name)");
  p.option("--max-num-seqs", &max_num_seqs, "N", "sequences per engine step (default 64)");
  p.option("--max-num-batched-tokens", &max_batched, "N", "tokens per engine step (default 512)");
  p.option("--max-model-len", &max_model_len, "L", "prompt + output tokens per sequence (default: the model's context)");
  p.option("--kv-cache-memory", &kv_mem, "BYTES", "KV cache size, e.g. 2G, 512M (default: 15% of free memory, <= 4G)");
  p.option("--block-size", &block_size, "N", "tokens per KV block (default 16)");
  p.flag("--enable-prefix-caching", &prefix, "reuse the KV blocks of shared prompt prefixes (default: on)");
  p.flag("--no-enable-prefix-caching", &no_prefix, "turn prefix caching off");
  p.option("--preemption-mode", &preempt_mode, "MODE",
           "recompute (default) or swap: where a preempted sequence's KV goes when blocks run out");
  p.option("--swap-space", &swap_mem, "BYTES", "host memory for swapped-out KV pages (default 1G)");
  p.option("--batching", &batching, "POLICY",
           "continuous (default: requests join and leave the batch every step), dynamic (a batch starts when "
           "--max-num-seqs requests wait or the oldest waited --batch-window-ms, and runs to completion) or static "
           "(a batch of whatever waits, run to completion); the last two are for comparison");
  p.option("--batch-window-ms", &batch_window_ms, "MS", "dynamic batching: longest wait for a full batch (default 50)");
  p.option("--max-n", &max_n, "N", "largest 'n' (samples per prompt) a request may ask for (default 16)");
  p.option("--max-body-bytes", &max_body, "BYTES", "largest request body (default 8 MiB)");
  p.option("--handler-threads", &handler_threads, "N", "HTTP handler threads (default 4)");
  add_connection_options(p, &hc, &idle_timeout_s, &request_timeout_s);
  p.option("--data-parallel-size", &data_parallel, "K",
           "run K engine processes (each with threads/K compute threads) behind a prefix-aware router on "
           "--host:--port (default 1); see ember router");
  p.option("--router-policy", &router_policy, "NAME",
           "with --data-parallel-size: the router's policy (default cache_aware; exact routes by the workers' "
           "published prefix caches; see ember router --policy)");
  p.option("--shutdown-timeout", &shutdown_timeout, "S", "seconds in-flight requests get to finish on SIGTERM (default 30)");
  p.option("--allowed-origins", &origins, "LIST",
           "comma-separated browser origins allowed to call the API (CORS), or * for any (default: none)");
  p.flag("--disable-log-requests", &no_log, "do not log one line per finished request");
  std::string tool_parser = "auto";
  p.option("--tool-call-parser", &tool_parser, "NAME",
           "how tool calls in the output are parsed: auto (from the chat template; the generic <tool_call> format "
           "when it shows none), hermes, llama3_json, mistral, gpt_oss or none (default auto)");
  std::string chat_template, reasoning_parser = "auto", reasoning_format = "auto", budget_message;
  int64_t reasoning_budget = -1, reasoning_budget_min = 0;
  p.option("--chat-template", &chat_template, "FILE|TEXT",
           "chat template (Jinja) used instead of the model's: a file, or the template text itself");
  p.option("--reasoning-parser", &reasoning_parser, "NAME",
           "how a model's thinking is told apart from its answer: auto (from the chat template), deepseek_r1, qwen3, "
           "gpt_oss or none (default auto)");
  p.option("--reasoning-format", &reasoning_format, "FORMAT",
           "auto or deepseek: thinking in message.reasoning_content and message.reasoning; none: left in the content "
           "as the model wrote it (default auto)");
  p.option("--reasoning-budget", &reasoning_budget, "N",
           "thinking tokens before the end of thinking is forced: -1 no budget, 0 no thinking (default -1)");
  p.option("--reasoning-budget-min", &reasoning_budget_min, "N",
           "thinking tokens before the model may end its thinking (default 0)");
  p.option("--reasoning-budget-message", &budget_message, "TEXT",
           "text injected before the forced end of thinking (default none)");
  p.option("-t,--threads", &threads, "N", "compute threads (default: all cores)");
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
  if (prefix && no_prefix) return usage_error(p, "--enable-prefix-caching and --no-enable-prefix-caching conflict");
  if (port < 0 || port > 65535) return usage_error(p, "--port must be in [0, 65535]");
  if (threads < 1 || threads > 512) return usage_error(p, "-t must be in [1, 512]");
  if (max_num_seqs < 1 || max_num_seqs > 4096) return usage_error(p, "--max-num-seqs must be in [1, 4096]");
  if (max_batched < 1 || max_batched > 65536) return usage_error(p, "--max-num-batched-tokens must be in [1, 65536]");
  if (block_size < 1 || block_size > 1024) return usage_error(p, "--block-size must be in [1, 1024]");
  if (max_model_len < 0) return usage_error(p, "--max-model-len must be >= 0");
  if (max_n < 1 || max_n > 256) return usage_error(p, "--max-n must be in [1, 256]");
  if (max_body < 1024 || max_body > (int64_t{1} << 32)) return usage_error(p, "--max-body-bytes must be in [1024, 4G]");
  if (handler_threads < 1 || handler_threads > 256) return usage_error(p, "--handler-threads must be in [1, 256]");
  if (shutdown_timeout < 0) return usage_error(p, "--shutdown-timeout must be >= 0");
  if (Status st = check_connection_options(&hc, idle_timeout_s, request_timeout_s); !st)
    return usage_error(p, st.message());
  if (tool_parser != "auto" && !tool_call_format_from_name(tool_parser))
    return usage_error(p, fmt::format(
                              "--tool-call-parser must be auto, hermes, llama3_json, mistral, gpt_oss or none, got '{}'",
                              tool_parser));
  if (reasoning_parser != "auto" && !reasoning_syntax_from_name(reasoning_parser))
    return usage_error(p, fmt::format("--reasoning-parser must be auto, deepseek_r1, qwen3, gpt_oss or none, got '{}'",
                                      reasoning_parser));
  if (reasoning_format != "auto" && reasoning_format != "deepseek" && reasoning_format != "none")
    return usage_error(p, fmt::format("--reasoning-format must be auto, deepseek or none, got '{}'", reasoning_format));
  if (reasoning_budget < -1 || reasoning_budget > (int64_t{1} << 31))
    return usage_error(p, "--reasoning-budget must be -1 (no budget), 0 (no thinking) or a token count");
  if (reasoning_budget_min < 0 || reasoning_budget_min > (int64_t{1} << 31))
    return usage_error(p, "--reasoning-budget-min must be >= 0");
  if (!chat_template.empty()) {
    std::ifstream f(chat_template, std::ios::binary);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      chat_template = ss.str();
    } else if (chat_template.find("{{") == std::string::npos && chat_template.find("{%") == std::string::npos) {
      return usage_error(p, fmt::format("--chat-template: '{}' is neither a readable file nor a template", chat_template));
    }
    if (auto t = tmpl::Template::parse(chat_template); !t)
      return usage_error(p, fmt::format("--chat-template: {}", t.status().message()));
  }
  if (data_parallel < 1 || data_parallel > 256) return usage_error(p, "--data-parallel-size must be in [1, 256]");
  if (data_parallel > 1 && par_opts.enabled())
    return usage_error(p, "--data-parallel-size with tensor or pipeline parallelism is not supported yet");
  if (data_parallel == 1 && router_policy != "cache_aware")
    return usage_error(p, "--router-policy is the router's, which only --data-parallel-size K > 1 starts");
  if (data_parallel > 1) {
    DataParallelFront front;
    front.data_parallel_size = data_parallel;
    front.policy = router_policy;
    front.api_key = api_key.empty() && std::getenv("EMBER_API_KEY") ? std::getenv("EMBER_API_KEY") : api_key;
    front.host = host;
    front.port = port;
    front.threads = threads;
    front.shutdown_timeout = shutdown_timeout;
    front.http = hc;
    return serve_data_parallel(argc, argv, first, front);
  }
  if (api_key.empty())
    if (const char* k = std::getenv("EMBER_API_KEY")) api_key = k;
  EngineConfig ec;
  ec.max_num_seqs = max_num_seqs;
  ec.max_num_batched_tokens = max_batched;
  ec.max_model_len = max_model_len;
  ec.block_size = block_size;
  ec.enable_prefix_caching = !no_prefix;
  auto spec = spec_opts.to_config();
  if (!spec) return usage_error(p, spec.status().message());
  ec.spec = *spec;
  if (preempt_mode != "recompute" && preempt_mode != "swap")
    return usage_error(p, fmt::format("--preemption-mode must be recompute or swap, got '{}'", preempt_mode));
  ec.preempt_swap = preempt_mode == "swap";
  auto policy = parse_batching_policy(batching);
  if (!policy) return usage_error(p, "--batching: " + policy.status().message());
  ec.batching = *policy;
  if (!(batch_window_ms >= 0 && batch_window_ms <= 3.6e6))
    return usage_error(p, "--batch-window-ms must be in [0, 3600000]");
  ec.batch_window_s = batch_window_ms / 1000.0;
  if (!parse_bytes(swap_mem, &ec.swap_space_bytes))
    return usage_error(p, fmt::format("--swap-space expects a size such as 1G, got '{}'", swap_mem));
  if (!kv_mem.empty()) {
    if (!parse_bytes(kv_mem, &ec.kv_cache_bytes) || ec.kv_cache_bytes == 0)
      return usage_error(p, fmt::format("--kv-cache-memory expects a size such as 2G or 536870912, got '{}'", kv_mem));
  } else {
    auto free_budget = kv_budget_from_free_memory(0.15);
    ec.kv_cache_bytes = free_budget ? std::min<size_t>(*free_budget, size_t{4} << 30) : size_t{1} << 30;
  }

  // Tensor / pipeline parallelism (under mpirun): the ranks other than 0
  // only execute the steps rank 0 sends.
  std::unique_ptr<ParallelJob> job;
  if (int rc = start_parallel_job(p, par_opts, model_path, ec.spec.method, &job)) return rc;
  // The run-time settings of the model, the same on every rank: activation
  // bits, MoE routing, and the context LongRoPE picks its factors by
  // (Model::set_context_length).
  auto configure = [&](Model* m) -> Status {
    EMBER_RETURN_IF_ERROR(act_opts.apply(m));
    EMBER_RETURN_IF_ERROR(moe_opts.apply(m));
    m->set_context_length(max_model_len > 0 ? max_model_len : m->config().n_ctx_train);
    return Status::ok();
  };
  if (job) {
    if (!job->leader()) {
      LoadedModel wm;
      if (!load_model_and_tokenizer(p, model_path, &wm, job->shard(), load_flags)) job->abort(kExitUsage);
      if (Status st = configure(wm.model.get()); !st) job->abort(kExitUsage);
      return job->run_worker(*wm.model, threads, "serve");
    }
  }

  // Signals are taken by this thread only (sigwait below): block them before
  // any other thread starts so they all inherit the mask (a signal during
  // loading waits and then shuts the server down at once).
  sigset_t sigs = block_stop_signals();

  LoadedModel lm;
  if (!load_model_and_tokenizer(p, model_path, &lm, job ? job->shard() : ModelShard{}, load_flags)) {
    if (job) job->abort(kExitUsage);
    return kExitUsage;
  }
  if (Status st = configure(lm.model.get()); !st) {
    if (job) job->abort(kExitUsage);
    return usage_error(p, st.message());
  }
  const std::string& path = lm.path;
  const Model& m = *lm.model;
  const std::unique_ptr<Tokenizer>* tok = &lm.tokenizer;
  std::unique_ptr<Model> draft_model;  // --speculative-method draft / layerskip
  if (Status st = spec_opts.load_draft(m, &draft_model, &ec.spec); !st) return usage_error(p, st.message());
  if (draft_model) draft_model->set_context_length(max_model_len > 0 ? max_model_len : m.config().n_ctx_train);  // the same rotation as the target's
  auto kv_types = kv_opts.to_types(m.config());
  if (!kv_types) return usage_error(p, kv_types.status().message());
  ec.kv_types = *kv_types;
  if (Status st = dev.check(m, *kv_types, ec.spec.method != SpecMethod::kNone, job != nullptr); !st)
    return usage_error(p, st.message());
  if (dev.cuda()) {
    ec.backend = dev.factory();
    if (kv_mem.empty()) {  // the device's free memory after the weights (uploaded by Engine::create)
      auto budget = dev.kv_budget(m, 0.9);
      if (!budget) return usage_error(p, budget.status().message());
      ec.kv_cache_bytes = std::min<size_t>(*budget, size_t{16} << 30);
    }
  }
  if (served_name.empty()) {
    served_name = path;
    const size_t slash = served_name.find_last_of('/');
    if (slash != std::string::npos) served_name = served_name.substr(slash + 1);
    if (served_name.empty()) served_name = "ember";
  }

  // The prefix cache's block hashes for a router (GET /kv_events): a ring of
  // the last 64K events; a reader further behind gets a snapshot.
  if (ec.enable_prefix_caching) ec.kv_events = std::make_shared<KvEventLog>(ec.block_size, size_t{1} << 16);
  ThreadPool pool(threads);
  ParallelRunner* par_runner = nullptr;  // owned by the engine
  auto engine = [&]() -> Result<std::unique_ptr<AsyncEngine>> {
    if (!job) return AsyncEngine::start(m, pool, ec);
    auto runner = job->make_runner(m, pool, ec.max_num_batched_tokens, ec.kv_types);
    if (!runner) return runner.status();
    par_runner = runner->get();
    return AsyncEngine::start(std::move(runner.value()), ec, &m, &pool);  // a draft model runs on rank 0
  }();
  if (!engine) {
    usage_error(p, fmt::format("engine: {}", engine.status().message()));
    if (job) job->abort(kExitUsage);
    return kExitUsage;
  }
  ServiceConfig sc;
  sc.served_model_name = served_name;
  sc.api_key = api_key;
  sc.arch = m.config().arch;
  sc.limits.max_n = max_n;
  sc.log_requests = !no_log;
  sc.tool_call_parser = tool_parser;
  sc.chat_template = chat_template;
  sc.reasoning_parser = reasoning_parser;
  sc.reasoning_format = reasoning_format;
  sc.reasoning_budget = reasoning_budget;
  sc.reasoning_budget_min = reasoning_budget_min;
  sc.reasoning_budget_message = budget_message;
  sc.kv_events = ec.kv_events;
  for (size_t b = 0; b < origins.size();) {
    size_t e = origins.find(',', b);
    if (e == std::string::npos) e = origins.size();
    std::string o = origins.substr(b, e - b);
    while (!o.empty() && o.back() == ' ') o.pop_back();
    while (!o.empty() && o.front() == ' ') o.erase(0, 1);
    if (!o.empty()) sc.allowed_origins.push_back(o);
    b = e + 1;
  }
  OpenAiService service(**tok, **engine, sc);
  hc.host = host;
  hc.port = port;
  hc.max_body_bytes = static_cast<size_t>(max_body);
  hc.n_handler_threads = handler_threads;
  auto server = HttpServer::start(hc, [&service](const HttpRequest& r, std::shared_ptr<HttpResponse> resp) {
    service.handle(r, std::move(resp));
  });
  if (!server) {
    std::fprintf(stderr, "ember serve: %s\n", server.status().message().c_str());
    return kExitFailure;
  }
  const EngineStats st = (*engine)->stats();
  // A token-group key dtype (q4c): its tails' reserve is part of the budget
  // and of the cost per token (engine/kv/kv_pool.h, "Tails").
  const std::string reserve =
      st.kv_tail_reserve_bytes > 0
          ? fmt::format(" (of which {} tails reserve {})", kv_type_name(ec.kv_types.k),
                        human_bytes(static_cast<double>(st.kv_tail_reserve_bytes)))
          : "";
  const std::string per_token =
      st.kv_tail_reserve_bytes > 0
          ? fmt::format("{} bytes per token ({} in pages + {} of the tails reserve spread over the pool)",
                        st.kv_bytes_per_token_with_tails(), st.kv_bytes_per_token, st.kv_tail_bytes_per_token())
          : fmt::format("{} bytes per token", st.kv_bytes_per_token);
  std::fprintf(stderr,
               "ember serve: model %s (%s), weights %s, %d compute threads\n"
               "ember serve: KV cache %s%s in %d blocks of %d tokens: %lld tokens per sequence at most, "
               "max %d sequences per step, %s batching, prefix caching %s, preemption by %s\n",
               path.c_str(), m.config().arch.c_str(), human_bytes(static_cast<double>(m.weight_bytes())).c_str(),
               threads, human_bytes(static_cast<double>(ec.kv_cache_bytes)).c_str(), reserve.c_str(), st.blocks_total,
               block_size,
               static_cast<long long>((*engine)->max_seq_len()), max_num_seqs, batching_policy_name(ec.batching),
               ec.enable_prefix_caching ? "on" : "off",
               ec.preempt_swap ? fmt::format("swap ({} of host memory)", human_bytes(static_cast<double>(ec.swap_space_bytes))).c_str()
                               : "recomputation");
  std::fprintf(stderr,
               "ember serve: KV cache dtype %s, %s: %lld tokens, %lld sequences of %lld tokens "
               "(--max-model-len)\n",
               kv_types_name(ec.kv_types).c_str(), per_token.c_str(), static_cast<long long>(st.kv_tokens_total),
               static_cast<long long>((*engine)->kv_sequences_of_max_len()),
               static_cast<long long>((*engine)->max_seq_len()));
  if (job) std::fprintf(stderr, "ember serve: %s\n", job->describe().c_str());
  if (ec.spec.method != SpecMethod::kNone)
    std::fprintf(stderr, "ember serve: speculative decoding %s, %d draft tokens, off above %d running sequences\n",
                 spec_method_name(ec.spec.method), ec.spec.num_speculative_tokens, ec.spec.max_running);
  if (api_key.empty() && host != "127.0.0.1" && host != "localhost" && host != "::1")
    std::fprintf(stderr, "ember serve: warning: listening on %s without an API key\n", host.c_str());
  std::printf("ember serve: listening on http://%s:%d (model '%s')\n", host.c_str(), (*server)->port(),
              served_name.c_str());
  std::fflush(stdout);

  int sig = 0;
  if (!job) {
    sigwait(&sigs, &sig);
  } else {
    // Under mpirun a SIGTERM is the launcher ending the job (another rank
    // died, or the job was stopped): the engine's collectives fail at once,
    // so the requests in flight end with an error. A job whose collectives
    // failed (a silent rank) stops the server too.
    timespec tick{0, 100 * 1000 * 1000};
    while ((sig = sigtimedwait(&sigs, nullptr, &tick)) <= 0 && !par_runner->broken()) {
    }
    if (sig == SIGTERM) {
      job->note_ending();
      std::fprintf(stderr,
                   "ember serve: rank 0: the MPI launcher is ending the job (another rank exited or was killed, or "
                   "mpirun was stopped): requests in flight end with an error\n");
    }
    if (sig <= 0) {
      std::fprintf(stderr, "ember serve: the parallel job failed (%s): requests get an error; stopping\n",
                   par_runner->failure().message().c_str());
      sig = SIGTERM;
    }
  }
  std::fprintf(stderr, "ember serve: %s received: no new requests; finishing %d in flight (up to %d s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", service.n_jobs(), shutdown_timeout);
  service.set_draining(true);
  (*server)->stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(shutdown_timeout);
  timespec poll{0, 50 * 1000 * 1000};
  while (service.n_jobs() > 0 && std::chrono::steady_clock::now() < deadline) {
    // A second signal cuts the wait short.
    if (sigtimedwait(&sigs, nullptr, &poll) > 0) break;
  }
  if (service.n_jobs() > 0) std::fprintf(stderr, "ember serve: aborting %d requests\n", service.n_jobs());
  (*engine)->shutdown();  // aborts what is left; their responses end
  for (int i = 0; i < 20 && (*server)->n_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (*server)->shutdown();
  std::fprintf(stderr, "ember serve: stopped\n");
  if (par_runner && par_runner->broken()) {
    std::fprintf(stderr, "ember serve: %s\n", par_runner->failure().message().c_str());
    job->abort(kExitFailure);  // ends every rank of the job
  }
  return kExitOk;
}

}  // namespace ember::cli
