// HTTP connection flags; see connection_options.h.
#include "cli/connection_options.h"

#include <algorithm>

#include "server/tcp_socket.h"

namespace ember::cli {

void add_connection_options(ArgParser& p, HttpServerConfig* hc, float* idle_timeout_s, float* request_timeout_s) {
  p.option("--max-connections", &hc->max_connections, "N",
           "open connections at most (default 16384, within the open-file limit); at the limit the longest idle "
           "connection, else the slowest partial request, makes room for a new client");
  p.option("--max-connections-per-client", &hc->max_connections_per_client, "N",
           "connections one client address may hold (default 0: no limit); beyond, its idle ones are closed, "
           "else 429");
  p.option("--idle-timeout", idle_timeout_s, "S", "seconds a keep-alive connection may stay idle (default 30)");
  p.option("--request-timeout", request_timeout_s, "S",
           "seconds a request may take to arrive in full, headers and body (default 10); else 408");
}

Status check_connection_options(HttpServerConfig* hc, float idle_timeout_s, float request_timeout_s) {
  if (hc->max_connections < 1 || hc->max_connections > (1 << 24))
    return Status::error("--max-connections must be in [1, 16777216]");
  if (hc->max_connections_per_client < 0) return Status::error("--max-connections-per-client must be >= 0");
  if (!(idle_timeout_s > 0 && idle_timeout_s <= 86400)) return Status::error("--idle-timeout must be in (0, 86400]");
  if (!(request_timeout_s > 0 && request_timeout_s <= 86400))
    return Status::error("--request-timeout must be in (0, 86400]");
  hc->idle_timeout_ms = std::max(1, static_cast<int>(idle_timeout_s * 1000));
  hc->request_timeout_ms = std::max(1, static_cast<int>(request_timeout_s * 1000));
  // Each connection is a descriptor: room for the limit plus what else the process opens.
  raise_open_file_limit(hc->max_connections + hc->max_connections / 8 + 256);
  return Status::ok();
}

}  // namespace ember::cli
