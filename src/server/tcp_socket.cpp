// TCP socket set-up for the HTTP transport; see tcp_socket.h.
#include "server/tcp_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace ember {

Result<TcpListener> tcp_listen(const std::string& host_in, int port) {
  TcpListener out;
  std::string host = host_in.empty() ? "0.0.0.0" : host_in;
  std::string lookup = host;
  if (lookup.size() > 2 && lookup.front() == '[' && lookup.back() == ']') lookup = lookup.substr(1, lookup.size() - 2);
  const std::string where = fmt::format("{}:{}", host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int gai = ::getaddrinfo(lookup.c_str(), port_str.c_str(), &hints, &res);
  if (gai != 0) return Status::errorf("cannot bind {}: {}", where, gai_strerror(gai));
  // Prefer IPv4 (predictable for "localhost"), then IPv6.
  std::vector<addrinfo*> cands;
  for (addrinfo* a = res; a; a = a->ai_next) if (a->ai_family == AF_INET) cands.push_back(a);
  for (addrinfo* a = res; a; a = a->ai_next) if (a->ai_family != AF_INET) cands.push_back(a);
  std::string last_err = "no usable address";
  for (addrinfo* a : cands) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_err = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      int err = errno;
      last_err = std::strerror(err);
      ::close(fd);
      // A taken or forbidden port is final: do not silently fall back to
      // another address family of the same name.
      if (err == EADDRINUSE || err == EACCES) break;
      continue;
    }
    out.fd = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (out.fd < 0) return Status::errorf("cannot bind {}: {}", where, last_err);

  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  if (::getsockname(out.fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0) {
    out.port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  return out;
}

std::string tcp_peer_name(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    return fmt::format("[{}]:{}", ip, ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  return fmt::format("{}:{}", ip, ntohs(a->sin_port));
}

std::string tcp_peer_ip(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, ip, sizeof(ip));
  } else {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, ip, sizeof(ip));
  }
  return ip;
}

int open_file_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 30)) return 1 << 30;
  return static_cast<int>(rl.rlim_cur);
}

int raise_open_file_limit(int want) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < static_cast<rlim_t>(want)) {
    rlim_t target = static_cast<rlim_t>(want);
    if (rl.rlim_max != RLIM_INFINITY && target > rl.rlim_max) target = rl.rlim_max;
    if (target > rl.rlim_cur) {
      rl.rlim_cur = target;
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  return open_file_limit();
}

}  // namespace ember
