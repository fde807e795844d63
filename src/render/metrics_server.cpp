#include "cudatrace/render/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <list>
#include <thread>
#include <vector>

#include "cudatrace/clock.h"

namespace cudatrace {
namespace {

constexpr std::size_t kMaxRequestBytes = 16384;
// After the answer, what the client still sends is read (and dropped) for a
// moment before closing: closing with unread bytes would reset the
// connection and could cut the answer's end off on the client's side.
constexpr int kDrainMs = 1000;
constexpr int kAcceptPauseMs = 100;

std::uint64_t now_ms() { return monotonic_ns() / 1000000; }

struct Connection {
  // Reading its request; Waiting with it whole for an answer slot (not
  // polled); Writing the answer; Draining what the client still sends.
  enum State { Reading, Waiting, Writing, Draining };
  int fd;
  State state = Reading;
  std::string in, out;
  RequestCheck request;  // Waiting: what it asked for
  std::size_t sent = 0;
  std::uint64_t deadline_ms;
  std::uint64_t accepted_ms;
  std::uint64_t progress_ms;  // when its answer last moved
};



std::string response(int status, const char* reason, const std::string& body, bool head) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  r += status == 200 ? "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     : "Content-Type: text/plain; charset=utf-8\r\n";
  if (status == 405) r += "Allow: GET, HEAD\r\n";
  if (status == 503) r += "Retry-After: 1\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head) r += body;
  return r;
}

// RFC 9110's token characters, which a method is made of. (strchr finds
// the terminating NUL: a NUL byte is no token character, and must not wait.)
bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

bool control_char(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// A listening socket on HOST:PORT of `family` (AF_UNSPEC: any), -1 with `error`.
int listen_at(const std::string& host, const std::string& port, int family, std::string& error) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  // Something like an address is never looked up as a name (256.0.0.1).
  if (host.find_first_not_of("0123456789.") == std::string::npos || host.find(':') != std::string::npos)
    hints.ai_flags |= AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    error = gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int on = 1, off = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    // Every address: "::" takes IPv4 connections too.
    if (a->ai_family == AF_INET6 && host.empty()) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

// The listening socket for ADDRESS, or -1 with `error`.
int listen_on(const std::string& address, std::string& error) {
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535) {
    error = "'" + port + "' is not a port number";
    return -1;
  }
  if (!host.empty()) return listen_at(host, port, AF_UNSPEC, error);
  const int fd = listen_at(host, port, AF_INET6, error);
  return fd >= 0 ? fd : listen_at(host, port, AF_INET, error);  // a host without IPv6
}

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

RequestCheck check_request(std::string_view received) {
  const std::size_t line_end = received.find('\n');
  std::string_view line = received.substr(0, line_end);
  const std::size_t space = line.find(' ');
  // Whatever arrives is looked at at once: bytes that cannot begin a
  // request (a port scanner's, TLS) are answered without waiting for more.
  const std::string_view method = line.substr(0, space);
  if (!std::all_of(method.begin(), method.end(), token_char) || (line_end != std::string_view::npos &&
                                                                  (space == 0 || space == std::string_view::npos)))
    return {400};
  if (space == std::string_view::npos) return {};
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line_end == std::string_view::npos) {
    const std::string_view rest = line.substr(space + 1);
    return std::any_of(rest.begin(), rest.end(), control_char) ? RequestCheck{400} : RequestCheck{};
  }
  const std::string_view rest = line.substr(space + 1);
  const std::size_t second = rest.find(' ');
  const std::string_view target = rest.substr(0, second);
  if (target.empty() || std::any_of(rest.begin(), rest.end(), control_char)) return {400};
  if (second == std::string_view::npos) return {505};  // "GET /metrics": HTTP/0.9
  const std::string_view version = rest.substr(second + 1);
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return {400};
  if (version[5] != '1') return {505};
  if (received.find("\r\n\r\n") == std::string_view::npos && received.find("\n\n") == std::string_view::npos)
    return {};  // the headers are still coming
  const bool head = method == "HEAD";
  if (method != "GET" && !head) return {405};
  return {target.substr(0, target.find('?')) == "/metrics" ? 200 : 404, head};
}

class MetricsServer::Loop {
 public:
  Loop(int listener, Body body) : listener_(listener), wake_(eventfd(0, EFD_CLOEXEC)), body_(std::move(body)) {}
  ~Loop() {
    const std::uint64_t one = 1;
    if (thread_.joinable()) {
      [[maybe_unused]] const ssize_t woken = write(wake_, &one, sizeof one);  // an eventfd write does not fail here
      thread_.join();
    }
    for (const Connection& c : connections_) close(c.fd);
    close(listener_);
    if (wake_ >= 0) close(wake_);
  }
  bool start() {
    if (wake_ < 0) return false;
    thread_ = std::thread([this] { run(); });
    return true;
  }
  void ready() { ready_ = true; }

 private:
  void run() {
    std::vector<pollfd> fds;
    std::vector<std::list<Connection>::iterator> polled;
    while (true) {
      const std::uint64_t now = now_ms();
      for (auto it = connections_.begin(); it != connections_.end();)
        it = it->deadline_ms <= now ? expire(it) : std::next(it);
      limit_draining();
      const std::uint64_t turn_at = answer_waiting(now);
      int timeout = -1;
      const auto wake_at = [&](std::uint64_t at) {
        const int left = at > now ? static_cast<int>(at - now) : 0;
        timeout = timeout < 0 ? left : std::min(timeout, left);
      };
      for (const Connection& c : connections_) wake_at(c.deadline_ms);
      if (turn_at) wake_at(turn_at);
      // Full: the next connections wait in the listen queue until one
      // closes, or until one may be closed to make room (make_room()).
      bool listening = now >= accept_paused_until_ms_;
      if (!listening) wake_at(accept_paused_until_ms_);
      if (listening && count(open_states) >= open_limit()) {
        const auto [slowest, at] = slowest_connection();
        listening = slowest != connections_.end() && at <= now;
        if (slowest != connections_.end() && !listening) wake_at(at);
      }
      fds.clear();
      polled.clear();
      fds.push_back({wake_, POLLIN, 0});
      fds.push_back({listening ? listener_ : -1, POLLIN, 0});
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        if (it->state == Connection::Waiting) continue;
        fds.push_back({it->fd, static_cast<short>(it->state == Connection::Writing ? POLLOUT : POLLIN), 0});
        polled.push_back(it);
      }
      if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      for (std::size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents) serve(polled[i - 2], fds[i].revents);  // (serve may close only the one it is given)
      if (fds[1].revents) accept_waiting();
    }
  }

  static bool open_states(const Connection& c) { return c.state != Connection::Draining; }
  static bool answering(const Connection& c) { return c.state == Connection::Writing; }
  static bool draining(const Connection& c) { return c.state == Connection::Draining; }
  std::size_t count(bool (*in_state)(const Connection&)) const {
    return static_cast<std::size_t>(std::count_if(connections_.begin(), connections_.end(), in_state));
  }

  // The connection that may be closed first to make room, and from when:
  // one that has not sent its whole request kSlowRequestMs after it was
  // accepted (it is answered 408), or one whose answer went nowhere for
  // kStalledAnswerMs (a reader that stopped reading). end() if none.
  std::pair<std::list<Connection>::iterator, std::uint64_t> slowest_connection() {
    auto slowest = connections_.end();
    std::uint64_t slowest_at = 0;
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (it->state != Connection::Reading && it->state != Connection::Writing) continue;
      const std::uint64_t at = it->state == Connection::Reading ? it->accepted_ms + kSlowRequestMs
                                                                : it->progress_ms + kStalledAnswerMs;
      if (slowest == connections_.end() || at < slowest_at) slowest = it, slowest_at = at;
    }
    return {slowest, slowest_at};
  }

  // False when every connection is still within its time.
  bool make_room(std::uint64_t now) {
    const auto [slowest, at] = slowest_connection();
    if (slowest == connections_.end() || at > now) return false;
    if (slowest->state == Connection::Writing)
      drop(slowest);  // its answer is cut short: its Content-Length says so
    else
      send_answer(*slowest, response(408, "Request Timeout", "the request did not come in time\n", false));
    return true;
  }

  // Past open_limit() draining, those closest to their drain's end go now.
  void limit_draining() {
    for (std::size_t n = count(draining), limit = open_limit(); n > limit; --n) {
      auto first = std::find_if(connections_.begin(), connections_.end(), draining);
      for (auto it = first; it != connections_.end(); ++it)
        if (draining(*it) && it->deadline_ms < first->deadline_ms) first = it;
      drop(first);
    }
  }

  // The answer that went nowhere the longest (end() if none is written).
  std::list<Connection>::iterator stalled_answer() {
    auto stalled = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it)
      if (answering(*it) && (stalled == connections_.end() || it->progress_ms < stalled->progress_ms)) stalled = it;
    return stalled;
  }

  // Requests that came while kMaxAnswering answers were being written, in
  // the order they came; for them, an answer whose reader took nothing for
  // kStalledAnswerMs is given up. When one must wait, the time it may be
  // given a slot (0: none is waiting).
  std::uint64_t answer_waiting(std::uint64_t now) {
    std::size_t writing = count(answering);
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (it->state != Connection::Waiting) continue;
      if (writing >= kMaxAnswering) {
        const auto stalled = stalled_answer();
        if (stalled->progress_ms + kStalledAnswerMs > now) return stalled->progress_ms + kStalledAnswerMs;
        drop(stalled);  // cut short: its Content-Length says so
        --writing;
      }
      answer(*it, it->request);
      writing += answering(*it);
    }
    return 0;
  }

  std::list<Connection>::iterator drop(std::list<Connection>::iterator it) {
    close(it->fd);
    return connections_.erase(it);
  }

  // Past its deadline: a request that did not come in time is answered
  // 408; an answer not read in time, one never begun, or a drain is given up.
  std::list<Connection>::iterator expire(std::list<Connection>::iterator it) {
    if (it->state != Connection::Reading) return drop(it);
    send_answer(*it, response(408, "Request Timeout", "the request did not come in time\n", false));
    return std::next(it);
  }

  void accept_waiting() {
    while (true) {
      const std::uint64_t now = now_ms();
      if (count(open_states) >= open_limit() && (!make_room(now) || count(open_states) >= open_limit())) return;
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors or memory: the listener stays readable, so
        // look again in a moment rather than at once.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          accept_paused_until_ms_ = now + kAcceptPauseMs;
        return;
      }
      connections_.push_back({fd, Connection::Reading, {}, {}, {}, 0, now + kRequestTimeoutMs, now, now});
    }
  }

  void serve(std::list<Connection>::iterator it, short revents) {
    Connection& c = *it;
    if (c.state == Connection::Writing) return write_answer(it);
    char buf[4096];
    const ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR) && !(revents & (POLLERR | POLLHUP))) return;
    if (n <= 0 || c.state == Connection::Draining) {
      if (n <= 0) drop(it);
      return;
    }
    c.in.append(buf, static_cast<std::size_t>(n));
    const RequestCheck request = check_request(c.in);
    if (c.in.size() > kMaxRequestBytes) {
      send_answer(c, response(431, "Request Header Fields Too Large", "request too large\n", false));
    } else if (request.status != 0) {
      c.in = {};
      c.request = request;
      c.state = Connection::Waiting;  // answered now if there is room, else in its turn
      c.deadline_ms = now_ms() + kResponseTimeoutMs;
      if (count(answering) < kMaxAnswering) answer(c, request);
    }
  }

  void answer(Connection& c, const RequestCheck& request) {
    switch (request.status) {
      case 200:
        if (!ready_)  // nothing is traced yet: an answer now would look like a working agent's
          return send_answer(
              c, response(503, "Service Unavailable", "cudatrace has not begun tracing yet\n", request.head));
        return send_answer(c, response(200, "OK", body_(), request.head));
      case 404:
        return send_answer(c, response(404, "Not Found", "the metrics are at /metrics\n", request.head));
      case 405:
        return send_answer(c, response(405, "Method Not Allowed", "only GET and HEAD\n", false));
      case 505:
        return send_answer(c, response(505, "HTTP Version Not Supported", "HTTP/1.0 and HTTP/1.1 only\n", false));
      default:
        return send_answer(c, response(400, "Bad Request", "not an HTTP request\n", false));
    }
  }

  // Most answers go out at once; the rest as the client reads.
  void send_answer(Connection& c, std::string out) {
    c.out = std::move(out);
    c.in = {};
    c.sent = 0;
    c.state = Connection::Writing;
    c.progress_ms = now_ms();
    c.deadline_ms = c.progress_ms + kResponseTimeoutMs;
    write_some(c);
  }

  void write_answer(std::list<Connection>::iterator it) {
    if (!write_some(*it)) drop(it);
  }

  // False when the connection failed.
  bool write_some(Connection& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.sent += static_cast<std::size_t>(n);
      c.progress_ms = now_ms();
    }
    shutdown(c.fd, SHUT_WR);
    c.out = {};
    c.state = Connection::Draining;
    c.deadline_ms = now_ms() + kDrainMs;
    return true;
  }

  int listener_;
  int wake_;
  Body body_;
  std::atomic<bool> ready_{false};
  std::list<Connection> connections_;  // oldest first
  std::uint64_t accept_paused_until_ms_ = 0;
  std::thread thread_;
};

MetricsServer::MetricsServer(int port, std::unique_ptr<Loop> loop) : port_(port), loop_(std::move(loop)) {}

MetricsServer::~MetricsServer() = default;

// Draining connections may be as many again: an eighth of the descriptors
// each, tracing needs the rest (libraries, links).
std::size_t MetricsServer::open_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return kMaxConnections;
  return std::clamp<std::size_t>(files.rlim_cur / 8, kMaxAnswering, kMaxConnections);
}

void MetricsServer::ready() { loop_->ready(); }

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& address, Body body, std::string& error) {
  std::string why;
  const int fd = listen_on(address, why);
  if (fd < 0) {
    error = "cannot serve Prometheus metrics on " + address + ": " + why;
    return nullptr;
  }
  const int port = bound_port(fd);
  auto loop = std::make_unique<Loop>(fd, std::move(body));
  if (!loop->start()) {
    error = "cannot serve Prometheus metrics on " + address + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(port, std::move(loop)));
}

bool parse_listen_address(const std::string& text, sockaddr_in& addr, std::string& error) {
  const auto colon = text.rfind(':');
  const std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  const std::string port = colon == std::string::npos ? std::string() : text.substr(colon + 1);
  unsigned number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  addr = sockaddr_in{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      number > 65535) {
    error = "--prometheus needs HOST:PORT with a port from 0 (any free port) to 65535 (127.0.0.1:9400, or :9400 for "
            "every address), not '" + text + "'";
    return false;
  }
  addr.sin_port = htons(static_cast<std::uint16_t>(number));
  // An IPv4 address, checked here as given: a host name or an IPv6 form is
  // refused rather than served somewhere the user did not say.
  if (!host.empty() && inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    error = "--prometheus: HOST must be an IPv4 address such as 127.0.0.1, or empty for every address (no host "
            "names or IPv6), not '" + host + "'";
    return false;
  }
  return true;
}

bool check_listen_address(const std::string& text, std::string& error) {
  sockaddr_in addr{};
  if (!parse_listen_address(text, addr, error)) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  // As the server will: SO_REUSEADDR, so that only a listener there refuses it.
  const bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                  bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  if (!ok) error = "cannot serve Prometheus metrics on " + text + ": " + std::strerror(errno);
  if (fd >= 0) close(fd);
  return ok;
}

}  // namespace cudatrace
