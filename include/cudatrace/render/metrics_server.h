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

namespace cudatrace {

// --prometheus ADDRESS: HOST:PORT, HOST an IPv4 address or empty (every
// address), PORT 0 (any free port) to 65535. False with `error` set.
bool parse_listen_address(const std::string& text, sockaddr_in& addr, std::string& error);
// Whether the metrics can be served there now (a valid address of this host,
// the port not in use): said at once, not after the BPF programs are loaded.
bool check_listen_address(const std::string& text, std::string& error);

class MetricsServer {
 public:
  using Body = std::function<std::string()>;

  // How long a connection may take to send its request, and to read the
  // answer; then it is closed.
  static constexpr int kRequestTimeoutMs = 10000;
  static constexpr int kResponseTimeoutMs = 30000;
  // Connections open at once; past this, the oldest is closed for a new one.
  static constexpr std::size_t kMaxConnections = 64;

  // Listens on ADDRESS: "HOST:PORT" (an address or a name), "[IPV6]:PORT",
  // ":PORT" for every address (IPv6 and IPv4); port 0 picks a free one.
  // nullptr with `error` set ("cannot serve Prometheus metrics on ADDRESS: why").
  static std::unique_ptr<MetricsServer> start(const std::string& address, Body body, std::string& error);
  ~MetricsServer();  // stops at once: connections in progress are closed
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  class Loop;
  MetricsServer(int port, std::unique_ptr<Loop> loop);

  int port_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace cudatrace
