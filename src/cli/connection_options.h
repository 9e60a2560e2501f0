// HTTP connection flags shared by `ember serve` and `ember router`:
// --max-connections, --max-connections-per-client, --idle-timeout,
// --request-timeout (server/http_server.h, HttpServerConfig). Checking them
// also lifts the process's open-file limit towards its hard limit, so the
// connection limit is not cut short by the default 1,024 descriptors.
#pragma once

#include "cli/args.h"
#include "core/status.h"
#include "server/http_server.h"

namespace ember::cli {

void add_connection_options(ArgParser& p, HttpServerConfig* hc, float* idle_timeout_s, float* request_timeout_s);
// Validates the values, fills hc's timeouts and raises RLIMIT_NOFILE.
Status check_connection_options(HttpServerConfig* hc, float idle_timeout_s, float request_timeout_s);

}  // namespace ember::cli
