// The HTTP endpoint of --prometheus: GET /metrics answers with what the
// body callback returns (docs/prometheus.md, "Serving").
//
// One thread serves every connection, each non-blocking with a deadline,
// so that no client (one that connects and says nothing, one that reads
// slowly, hundreds at once) holds another's scrape back, and stopping is a
// wake-up. prometheus-cpp's Exposer (civetweb) gave each connection one of
// two worker threads: two idle connections held every scrape off for 30 s,
// and stopping waited up to 2 s for its accept loop to look up.
#pragma once

#include <netinet/in.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace cudatrace {

// --prometheus ADDRESS: HOST:PORT, HOST an IPv4 address or empty (every
// address), PORT 0 (any free port) to 65535. False with `error` set.
bool parse_listen_address(const std::string& text, sockaddr_in& addr, std::string& error);
// Whether the metrics can be served there now (a valid address of this host,
// the port not in use): said at once, not after the BPF programs are loaded.
bool check_listen_address(const std::string& text, std::string& error);

// What a request that has come so far asks for: `status` 0 while it is
// incomplete and may still be a valid one, else the status to answer: 200
// for GET or HEAD (`head`) of /metrics, 404 elsewhere, 405 another method,
// 505 a version other than HTTP/1.x (an HTTP/0.9 request line, without one,
// too), 400 what is not an HTTP request (known from its first bytes).
struct RequestCheck {
  int status = 0;
  bool head = false;
};
RequestCheck check_request(std::string_view received);

class MetricsServer {
 public:
  using Body = std::function<std::string()>;

  // How long a connection may take to send its request (then it is
  // answered 408), and to read the answer (then it is closed).
  static constexpr int kRequestTimeoutMs = 10000;
  static constexpr int kResponseTimeoutMs = 30000;
  // Connections open at once (open_limit()), and answers written at once (each holds a copy of the body):
  // past the first, new connections wait in the listen queue until one is
  // answered, or until one may be closed to make room: one that has not
  // sent its request kSlowRequestMs after it was accepted (answered 408: a
  // client that connects and says nothing holds no scrape back for long),
  // or one whose reader took nothing of its answer for kStalledAnswerMs.
  // Past the second, whole requests wait for their turn.
  static constexpr std::size_t kMaxConnections = 1024;
  static constexpr std::size_t kMaxAnswering = 64;
  static constexpr int kSlowRequestMs = 1000;
  static constexpr int kStalledAnswerMs = 1000;
  // kMaxConnections within an eighth of the process's descriptor limit now.
  static std::size_t open_limit();

  // Listens on ADDRESS: "HOST:PORT" (an address or a name), "[IPV6]:PORT",
  // ":PORT" for every address (IPv6 and IPv4); port 0 picks a free one.
  // nullptr with `error` set ("cannot serve Prometheus metrics on ADDRESS: why").
  static std::unique_ptr<MetricsServer> start(const std::string& address, Body body, std::string& error);
  ~MetricsServer();  // stops at once: connections in progress are closed
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // Until this is called a scrape of /metrics is answered 503 with
  // Retry-After (nothing is traced yet); then with the body.
  void ready();

 private:
  class Loop;
  MetricsServer(int port, std::unique_ptr<Loop> loop);

  int port_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace cudatrace
