// `ember router` and the data-parallel front of `ember serve`
// (--data-parallel-size K: K workers behind a router in one command).
#pragma once

#include <csignal>
#include <string>

#include "server/http_server.h"

namespace ember::cli {

int cmd_router(int argc, char** argv, int first);

// Blocks SIGINT and SIGTERM in the calling thread (call it before any other
// thread starts, so that all inherit the mask and only a sigwait takes
// them), ignores SIGPIPE, and returns the set for sigwait.
sigset_t block_stop_signals();

// What `ember serve` parsed for the front (the router) when K > 1.
struct DataParallelFront {
  int data_parallel_size = 1;
  std::string host;
  int port = 8080;
  int threads = 1;           // all workers together
  int shutdown_timeout = 30;
  std::string policy = "cache_aware";  // the router's
  std::string api_key;                 // the workers' (the router's own calls to them)
  HttpServerConfig http;     // connection limits and deadlines (checked)
};

// Starts K `ember serve` workers (argv[first..] less the front's flags) on
// free loopback ports and runs the router in front of them until SIGTERM.
int serve_data_parallel(int argc, char** argv, int first, const DataParallelFront& front);

}  // namespace ember::cli
