// `ember router --workers URL,...`: one OpenAI endpoint in front of
// data-parallel `ember serve` workers (src/router/router.h), and
// `ember serve --data-parallel-size K`, which starts K workers on free
// loopback ports (each with its share of the threads) and the router in
// front of them, and starts a worker again on its port when it exits.
// SIGINT/SIGTERM: stop accepting, let in-flight requests finish (up to
// --shutdown-timeout; a second signal cuts it short), cancel the rest, then
// stop the workers this process started.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/cmd_router.h"
#include "cli/common.h"
#include "cli/connection_options.h"
#include "router/router.h"
#include "server/http_server.h"

namespace ember::cli {

namespace {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string policy = "cache_aware";
  router::RoutingConfig rc;
  router::RouterConfig cfg;
  float cache_threshold = 0.5f, balance_rel = 1.0001f, overlap_weight = 1, kv_poll_interval = 0.1f;
  float health_interval = 1, health_timeout = 2, connect_timeout = 5, request_timeout = 3600;
  std::string max_tree = "16M";
  int handler_threads = 4, shutdown_timeout = 30;
  uint64_t seed = 0;
  HttpServerConfig hc;
  float idle_timeout = 30, req_arrive_timeout = 10;
};

void add_router_options(ArgParser& p, RouterOptions* o) {
  p.option("--policy", &o->policy, "NAME",
           "cache_aware (default: the worker whose recent prompts share the longest prefix, above --cache-threshold; "
           "else the least loaded), exact (the worker with the fewest uncached prompt blocks plus active blocks, from the "
           "block hashes the workers publish at /kv_events), least_loaded, round_robin or random");
  p.option("--overlap-weight", &o->overlap_weight, "F",
           "exact: weight of the blocks to prefill against the active blocks in the cost (default 1)");
  p.option("--kv-poll-interval", &o->kv_poll_interval, "S",
           "exact: seconds between polls of each worker's /kv_events (default 0.1)");
  p.option("--worker-api-key", &o->rc.worker_api_key, "KEY",
           "the workers' --api-key, for the router's own calls to them (/kv_events; default: $EMBER_API_KEY)");
  p.option("--cache-threshold", &o->cache_threshold, "F", "cache_aware: share of the prompt that must match (default 0.5)");
  p.option("--balance-abs-threshold", &o->rc.balance_abs_threshold, "N",
           "cache_aware: route by load alone while the in-flight counts differ by more than N (default 32) ...");
  p.option("--balance-rel-threshold", &o->balance_rel, "F", "... and the largest is above F times the smallest (default 1.0001)");
  p.option("--max-tree-bytes", &o->max_tree, "BYTES", "prompt bytes remembered per worker (default 16M)");
  p.option("--health-interval", &o->health_interval, "S", "seconds between health checks of each worker (default 1)");
  p.option("--health-timeout", &o->health_timeout, "S", "a health check's time limit (default 2)");
  p.option("--max-attempts", &o->cfg.max_attempts, "N", "workers tried for a request that never started (default 3)");
  p.option("--max-in-flight", &o->cfg.max_in_flight, "N", "requests proxied at once (default 4096); beyond: 503");
  p.option("--connect-timeout", &o->connect_timeout, "S", "seconds to connect to a worker (default 5)");
  p.option("--upstream-timeout", &o->request_timeout, "S", "seconds a proxied request may take in all (default 3600)");
  p.option("--handler-threads", &o->handler_threads, "N", "HTTP handler threads (default 4)");
  p.option("--shutdown-timeout", &o->shutdown_timeout, "S", "seconds in-flight requests get to finish on SIGTERM (default 30)");
  p.option("--seed", &o->seed, "N", "seed of the random policy (default: from the clock)");
  add_connection_options(p, &o->hc, &o->idle_timeout, &o->req_arrive_timeout);
}

Status check_router_options(RouterOptions* o) {
  auto pol = router::parse_routing_policy(o->policy);
  if (!pol) return pol.status();
  o->rc.policy = *pol;
  if (!(o->cache_threshold >= 0 && o->cache_threshold <= 1)) return Status::error("--cache-threshold must be in [0, 1]");
  o->rc.cache_threshold = o->cache_threshold;
  if (o->rc.balance_abs_threshold < 0) return Status::error("--balance-abs-threshold must be >= 0");
  if (!(o->balance_rel >= 1)) return Status::error("--balance-rel-threshold must be >= 1");
  o->rc.balance_rel_threshold = o->balance_rel;
  if (!parse_bytes(o->max_tree, &o->rc.max_tree_bytes) || o->rc.max_tree_bytes < 1024)
    return Status::errorf("--max-tree-bytes expects a size of at least 1K, got '{}'", o->max_tree);
  o->rc.seed = o->seed;
  if (!(o->overlap_weight >= 0 && o->overlap_weight <= 1000)) return Status::error("--overlap-weight must be in [0, 1000]");
  o->rc.overlap_weight = o->overlap_weight;
  if (!(o->kv_poll_interval >= 0.001 && o->kv_poll_interval <= 3600))
    return Status::error("--kv-poll-interval must be in [0.001, 3600]");
  o->rc.kv_poll_interval_s = o->kv_poll_interval;
  if (o->rc.worker_api_key.empty())
    if (const char* k = std::getenv("EMBER_API_KEY")) o->rc.worker_api_key = k;
  if (!(o->health_interval > 0 && o->health_interval <= 3600)) return Status::error("--health-interval must be in (0, 3600]");
  if (!(o->health_timeout > 0 && o->health_timeout <= 600)) return Status::error("--health-timeout must be in (0, 600]");
  if (o->cfg.max_attempts < 1 || o->cfg.max_attempts > 16) return Status::error("--max-attempts must be in [1, 16]");
  if (o->cfg.max_in_flight < 1 || o->cfg.max_in_flight > 65536) return Status::error("--max-in-flight must be in [1, 65536]");
  if (!(o->connect_timeout > 0)) return Status::error("--connect-timeout must be > 0");
  if (!(o->request_timeout > 0)) return Status::error("--upstream-timeout must be > 0");
  o->cfg.connect_timeout_s = o->connect_timeout;
  o->cfg.request_timeout_s = o->request_timeout;
  if (o->handler_threads < 1 || o->handler_threads > 256) return Status::error("--handler-threads must be in [1, 256]");
  if (o->shutdown_timeout < 0) return Status::error("--shutdown-timeout must be >= 0");
  if (o->port < 0 || o->port > 65535) return Status::error("--port must be in [0, 65535]");
  return check_connection_options(&o->hc, o->idle_timeout, o->req_arrive_timeout);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    std::string item = s.substr(b, e - b);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    if (!item.empty()) out.push_back(item);
    b = e + 1;
  }
  return out;
}

void log_line(const std::string& s) { std::fprintf(stderr, "ember router: %s\n", s.c_str()); }

// Runs the router until SIGINT/SIGTERM (blocked in the calling thread by the
// caller, before any thread started). Returns the exit code.
int run_router(const std::vector<std::string>& urls, RouterOptions& o, sigset_t* sigs) {
  auto ws = router::WorkerSet::create(urls, o.rc);
  if (!ws) {
    std::fprintf(stderr, "ember router: %s\n", ws.status().message().c_str());
    return kExitUsage;
  }
  (*ws)->check_health_once(o.health_timeout);
  for (int i = 0; i < (*ws)->size(); ++i) {
    const auto& w = (*ws)->at(i);
    if (w.healthy.load()) {
      std::fprintf(stderr, "ember router: worker %s is up\n", w.url.c_str());
    } else {
      std::fprintf(stderr, "ember router: worker %s is down (%s); it gets requests once its health check passes\n",
                   w.url.c_str(), (*ws)->last_error(i).c_str());
    }
  }
  (*ws)->start_health_checks(o.health_interval, o.health_timeout, log_line);
  if (o.rc.policy == router::RoutingPolicy::kExact) {
    (*ws)->poll_kv_once(o.health_timeout);
    (*ws)->start_kv_polling(o.health_timeout);
  }
  o.cfg.log = log_line;
  router::Router rt(**ws, o.cfg);
  o.hc.host = o.host;
  o.hc.port = o.port;
  o.hc.n_handler_threads = o.handler_threads;
  auto server = HttpServer::start(o.hc, [&rt](const HttpRequest& r, std::shared_ptr<HttpResponse> resp) {
    rt.handle(r, std::move(resp));
  });
  if (!server) {
    std::fprintf(stderr, "ember router: %s\n", server.status().message().c_str());
    return kExitFailure;
  }
  std::printf("ember router: listening on http://%s:%d (%d workers, policy %s, at most %d connections)\n",
              o.host.c_str(), (*server)->port(), (*ws)->size(), router::routing_policy_name(o.rc.policy),
              (*server)->max_connections());
  std::fflush(stdout);
  int sig = 0;
  sigwait(sigs, &sig);
  std::fprintf(stderr, "ember router: %s received: no new requests; finishing %d in flight (up to %d s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", rt.n_in_flight(), o.shutdown_timeout);
  rt.set_draining(true);
  (*server)->stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.shutdown_timeout);
  timespec poll{0, 50 * 1000 * 1000};
  while (rt.n_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (sigtimedwait(sigs, nullptr, &poll) > 0) break;  // a second signal cuts the wait short
  }
  if (rt.n_in_flight() > 0) std::fprintf(stderr, "ember router: cancelling %d requests\n", rt.n_in_flight());
  rt.cancel_all();
  for (int i = 0; i < 20 && (*server)->n_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (*server)->shutdown();
  (*ws)->stop();
  std::fprintf(stderr, "ember router: stopped\n");
  return kExitOk;
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // its stdout (read for the "listening on" line)
  std::string url;
};

// Starts `ember serve ARGS --host 127.0.0.1 --port 0` and waits (up to
// timeout_s) for its "listening on http://..." line.
Result<Child> start_worker(const std::vector<std::string>& args, double timeout_s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::errorf("pipe: {}", std::strerror(errno));
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::errorf("fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the workers end with their parent
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fds[1], 1);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  Child c;
  c.pid = pid;
  c.out = fds[0];
  std::string buf;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  ::fcntl(c.out, F_SETFL, ::fcntl(c.out, F_GETFL) | O_NONBLOCK);
  while (std::chrono::steady_clock::now() < deadline) {
    char tmp[4096];
    const ssize_t n = ::read(c.out, tmp, sizeof(tmp));
    if (n > 0) {
      buf.append(tmp, static_cast<size_t>(n));
      const size_t at = buf.find("listening on http://");
      if (at != std::string::npos) {
        const size_t end = buf.find_first_of(" \n", at + 13);
        if (end != std::string::npos) {
          c.url = buf.substr(at + 13, end - at - 13);
          return c;
        }
      }
      continue;
    }
    if (n == 0) break;  // the worker exited
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      c.pid = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (c.pid > 0) {
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
  }
  ::close(c.out);
  return Status::error("the worker did not start (its messages are above)");
}

void stop_workers(std::vector<Child>& kids, double timeout_s) {
  for (Child& c : kids)
    if (c.pid > 0) ::kill(c.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (Child& c : kids) {
    while (c.pid > 0) {
      if (::waitpid(c.pid, nullptr, WNOHANG) == c.pid) {
        c.pid = -1;
      } else if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        c.pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    if (c.out >= 0) ::close(c.out);
    c.out = -1;
  }
}

}  // namespace

sigset_t block_stop_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return sigs;
}

int cmd_router(int argc, char** argv, int first) {
  ArgParser p("router",
              "ember router --workers http://HOST:PORT,... [--host 127.0.0.1] [--port 8080] [--policy cache_aware]");
  RouterOptions o;
  std::string workers;
  p.option("--workers", &workers, "URLS", "comma-separated worker URLs (ember serve instances), e.g. http://10.0.0.2:8080");
  p.option("--host", &o.host, "HOST", "address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)");
  p.option("--port", &o.port, "PORT", "port (default 8080; 0 picks a free one)");
  add_router_options(p, &o);
  if (Status st = p.parse(argc, argv, first); !st) return usage_error(p, st.message());
  if (p.help_requested()) {
    std::fputs(p.help_text().c_str(), stdout);
    return kExitOk;
  }
  if (Status st = check_router_options(&o); !st) return usage_error(p, st.message());
  const std::vector<std::string> urls = split_list(workers);
  if (urls.empty()) return usage_error(p, "--workers is required (comma-separated http:// URLs)");
  sigset_t sigs = block_stop_signals();
  return run_router(urls, o, &sigs);
}

int serve_data_parallel(int argc, char** argv, int first, const DataParallelFront& front) {
  // The workers get every flag of this command but those of the front:
  // address, data parallelism, threads, connection limits.
  static const char* kFront[] = {"--data-parallel-size", "--host", "--port", "-t", "--threads", "--max-connections",
                                 "--max-connections-per-client", "--idle-timeout", "--request-timeout",
                                 "--shutdown-timeout", "--router-policy"};
  std::vector<std::string> wargs{"ember", "serve"};
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    bool is_front = false;
    for (const char* f : kFront) {
      if (a == f) {
        is_front = true;
        ++i;  // skip the value
        break;
      }
      if (a.rfind(std::string(f) + "=", 0) == 0) {
        is_front = true;
        break;
      }
    }
    if (!is_front) wargs.push_back(a);
  }
  const int dp = front.data_parallel_size;
  const int per_worker = std::max(1, front.threads / dp);
  wargs.insert(wargs.end(), {"--host", "127.0.0.1", "--port", "0", "-t", std::to_string(per_worker),
                             "--shutdown-timeout", std::to_string(front.shutdown_timeout)});

  RouterOptions o;
  o.host = front.host;
  o.port = front.port;
  o.policy = front.policy;
  o.rc.worker_api_key = front.api_key;
  o.shutdown_timeout = front.shutdown_timeout;
  if (Status st = check_router_options(&o); !st) {
    std::fprintf(stderr, "ember serve: %s\n", st.message().c_str());
    return kExitUsage;
  }
  o.hc = front.http;  // the connection flags, checked by ember serve

  sigset_t sigs = block_stop_signals();
  std::vector<Child> kids;
  std::vector<std::string> urls;
  for (int k = 0; k < dp; ++k) {
    std::fprintf(stderr, "ember serve: starting data-parallel worker %d of %d (%d threads)\n", k + 1, dp, per_worker);
    auto c = start_worker(wargs, 600);
    if (!c) {
      std::fprintf(stderr, "ember serve: worker %d: %s\n", k + 1, c.status().message().c_str());
      stop_workers(kids, 10);
      return kExitFailure;
    }
    urls.push_back(c->url);
    kids.push_back(*c);
  }
  // Supervision: a worker that exits is started again on its port (the
  // router marks it down meanwhile and back up when its health check
  // passes), at most 5 times a minute per worker.
  std::mutex kids_mu;
  std::atomic<bool> stopping{false};
  std::thread monitor([&] {
    std::vector<std::vector<std::chrono::steady_clock::time_point>> restarts(kids.size());
    while (!stopping.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::lock_guard<std::mutex> lk(kids_mu);
      for (size_t k = 0; k < kids.size() && !stopping.load(); ++k) {
        Child& c = kids[k];
        int status = 0;
        if (c.pid <= 0 || ::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
        c.pid = -1;
        if (c.out >= 0) ::close(c.out);
        c.out = -1;
        const auto now = std::chrono::steady_clock::now();
        auto& r = restarts[k];
        r.erase(std::remove_if(r.begin(), r.end(), [&](auto t) { return now - t > std::chrono::minutes(1); }), r.end());
        const std::string how = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                                    : fmt::format("exited with status {}", WEXITSTATUS(status));
        if (r.size() >= 5) {
          std::fprintf(stderr, "ember serve: worker %s %s; restarted 5 times in a minute: giving up on it\n",
                       c.url.c_str(), how.c_str());
          continue;
        }
        r.push_back(now);
        std::fprintf(stderr, "ember serve: worker %s %s; starting it again\n", c.url.c_str(), how.c_str());
        std::vector<std::string> args = wargs;
        const std::string port = c.url.substr(c.url.rfind(':') + 1);
        for (size_t i = 0; i + 1 < args.size(); ++i)
          if (args[i] == "--port") args[i + 1] = port;
        auto nc = start_worker(args, 600);
        if (nc) {
          nc->url = c.url;
          c = *nc;
        } else {
          std::fprintf(stderr, "ember serve: worker %s: %s\n", c.url.c_str(), nc.status().message().c_str());
        }
      }
    }
  });
  const int rc = run_router(urls, o, &sigs);
  stopping.store(true);
  monitor.join();
  std::fprintf(stderr, "ember serve: stopping %d workers\n", dp);
  stop_workers(kids, front.shutdown_timeout + 5.0);
  return rc;
}

}  // namespace ember::cli
