// HTTP clients of the /metrics tests (unit and faults): one exchange, and
// thousands at once from one thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cudatrace_test::http {

// Lets this process open `files` descriptors, as far as its hard limit allows.
inline void raise_file_limit(std::size_t files) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = std::max<rlim_t>(limit.rlim_cur, std::min<rlim_t>(limit.rlim_max, files));
  setrlimit(RLIMIT_NOFILE, &limit);
}

inline sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A connected loopback socket with 5 s timeouts, -1 on failure.
inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const sockaddr_in addr = loopback(port);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The whole response to `request`, "" when the connection fails.
inline std::string http_exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  std::string response;
  if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return response;
}

inline std::string body_of(const std::string& response) {
  const auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? std::string() : response.substr(end + 4);
}

// `n` clients at once, each sending `request` as soon as it is connected and
// reading to the end, from one thread (poll); their responses ("" for a
// connection that failed or was reset), all within `limit`.
inline std::vector<std::string> many_exchanges(int port, std::size_t n, const std::string& request,
                                        std::chrono::milliseconds limit) {
  raise_file_limit(n + 256);
  struct Client {
    int fd;
    std::size_t sent = 0;
    std::string response;
    bool done = false;
  };
  std::vector<Client> clients;
  const sockaddr_in addr = loopback(port);
  for (std::size_t i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const bool started =
        fd >= 0 && (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 || errno == EINPROGRESS);
    clients.push_back({fd, 0, {}, !started});
  }
  const auto end = std::chrono::steady_clock::now() + limit;
  std::vector<pollfd> fds;
  while (std::chrono::steady_clock::now() < end) {
    fds.clear();
    for (const Client& c : clients)
      fds.push_back({c.done ? -1 : c.fd, static_cast<short>(c.sent < request.size() ? POLLOUT : POLLIN), 0});
    if (std::none_of(clients.begin(), clients.end(), [](const Client& c) { return !c.done; })) break;
    if (poll(fds.data(), fds.size(), 100) < 0) break;
    for (std::size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      if (c.done || !fds[i].revents) continue;
      if (c.sent < request.size()) {
        const ssize_t w = send(c.fd, request.data() + c.sent, request.size() - c.sent, MSG_NOSIGNAL);
        if (w > 0) c.sent += static_cast<std::size_t>(w);
        else if (errno != EAGAIN) c.done = true;
        continue;
      }
      char buf[65536];
      const ssize_t r = recv(c.fd, buf, sizeof buf, 0);
      if (r > 0) c.response.append(buf, static_cast<std::size_t>(r));
      else if (r == 0) c.done = true;
      else if (errno != EAGAIN) c.response.clear(), c.done = true;  // reset: what came is not an answer
    }
  }
  std::vector<std::string> responses;
  for (Client& c : clients) {
    if (c.fd >= 0) close(c.fd);
    responses.push_back(c.done ? c.response : std::string());
  }
  return responses;
}

}  // namespace cudatrace_test::http
