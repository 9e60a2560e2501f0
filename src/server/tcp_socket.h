// TCP socket set-up for the HTTP transport: a listening socket bound to a
// host and port, and the printable address of an accepted peer. Plain
// functions over file descriptors; the caller owns (and closes) every
// descriptor returned. Thread-safe (no shared state).
#pragma once

#include <sys/socket.h>

#include <string>

#include "core/status.h"

namespace ember {

struct TcpListener {
  int fd = -1;    // non-blocking, close-on-exec, listening
  int port = 0;   // the bound port (the one picked when asked for port 0)
};

// Resolves host (empty: every IPv4 interface; "[::1]" brackets allowed) and
// binds the first address that works, IPv4 before IPv6. A port in use or
// forbidden is final (no fallback to the other address family). Errors read
// "cannot bind HOST:PORT: reason".
Result<TcpListener> tcp_listen(const std::string& host, int port);

// "ip:port", or "[ip]:port" for IPv6.
std::string tcp_peer_name(const sockaddr_storage& ss);
// The peer's address alone ("ip"), the key of per-client limits.
std::string tcp_peer_ip(const sockaddr_storage& ss);

// The process's open-file limit (RLIMIT_NOFILE, soft). raise_open_file_limit
// lifts the soft limit towards the hard one (at most `want`) and returns the
// soft limit in force afterwards; it changes process-wide state, so programs
// call it at start-up (ember serve, ember router), libraries never do.
int open_file_limit();
int raise_open_file_limit(int want);

}  // namespace ember
