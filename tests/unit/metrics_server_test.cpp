// The /metrics endpoint on loopback: answers, errors, and that no client
// (idle, slow, too many) holds another's scrape back or delays stopping.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cudatrace/render/metrics_server.h"

namespace cudatrace {
namespace {

using Clock = std::chrono::steady_clock;

// A connected loopback socket with 5 s timeouts, -1 on failure.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The whole response to `request`, "" when the connection fails.
std::string http_exchange(int port, const std::string& request) {
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

std::string get(int port, const std::string& target) {
  return http_exchange(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

std::unique_ptr<MetricsServer> serve(MetricsServer::Body body) {
  std::string error;
  auto server = MetricsServer::start("127.0.0.1:0", std::move(body), error);
  EXPECT_TRUE(server) << error;
  if (server) EXPECT_GT(server->port(), 0);
  return server;
}

TEST(MetricsServer, AnswersMetricsAndErrors) {
  std::atomic<int> bodies{0};
  auto server = serve([&] {
    ++bodies;
    return std::string("up 1\n");
  });
  const int port = server->port();
  const std::string ok = get(port, "/metrics");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Content-Length: 5\r\n"), std::string::npos) << ok;
  EXPECT_EQ(ok.substr(ok.size() - 9), "\r\n\r\nup 1\n") << ok;
  EXPECT_EQ(get(port, "/metrics?x=1").rfind("HTTP/1.1 200", 0), 0u);
  const std::string head = http_exchange(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;  // no body
  EXPECT_EQ(get(port, "/").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(http_exchange(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'x') + "\r\n\r\n").rfind("HTTP/1.1 431", 0),
            0u);
  EXPECT_EQ(bodies, 3);  // GET, GET with a query, HEAD
}

std::string body_of(const std::string& response) {
  const auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? std::string() : response.substr(end + 4);
}

TEST(MetricsServer, LargeBodyToASlowReader) {
  const std::string big(8 << 20, 'x');
  auto server = serve([&] { return big; });
  const int slow = connect_to(server->port());
  ASSERT_GE(slow, 0);
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(slow, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Another client is answered while the first has not read its answer.
  const auto start = Clock::now();
  EXPECT_EQ(body_of(get(server->port(), "/metrics")).size(), big.size());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(slow, buf, sizeof buf)) > 0) response.append(buf, static_cast<std::size_t>(n));
  close(slow);
  EXPECT_EQ(body_of(response).size(), big.size());
}

TEST(MetricsServer, IdleConnectionsDoNotHoldScrapesBack) {
  auto server = serve([] { return std::string("up 1\n"); });
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(connect_to(server->port()));
  const auto start = Clock::now();
  EXPECT_EQ(get(server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  // Past the limit, the oldest connections are closed for the new ones.
  for (std::size_t i = 0; i < MetricsServer::kMaxConnections; ++i) idle.push_back(connect_to(server->port()));
  EXPECT_EQ(get(server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
  char c;
  EXPECT_EQ(read(idle.front(), &c, 1), 0) << "the oldest idle connection is closed";
  for (int fd : idle) close(fd);
}

TEST(MetricsServer, StopsAtOnceWhateverItServes) {
  auto server = serve([] { return std::string("up 1\n"); });
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(connect_to(server->port()));
  const int port = server->port();
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(200));
  char c;
  for (int fd : idle) {
    EXPECT_LE(read(fd, &c, 1), 0);  // closed
    close(fd);
  }
  EXPECT_EQ(connect_to(port), -1);  // not listening any more
}

TEST(MetricsServer, BadAddressesAreOneReason) {
  std::string error;
  EXPECT_FALSE(MetricsServer::start("256.0.0.1:80", [] { return std::string(); }, error));
  EXPECT_EQ(error.rfind("cannot serve Prometheus metrics on 256.0.0.1:80: ", 0), 0u) << error;
  EXPECT_FALSE(MetricsServer::start("127.0.0.1:99999", [] { return std::string(); }, error));
  EXPECT_NE(error.find("not a port number"), std::string::npos) << error;
  auto first = serve([] { return std::string(); });
  const std::string taken = "127.0.0.1:" + std::to_string(first->port());
  EXPECT_FALSE(MetricsServer::start(taken, [] { return std::string(); }, error));
  EXPECT_NE(error.find("Address already in use"), std::string::npos) << error;
}

TEST(MetricsServer, EveryAddressTakesIpv4) {
  std::string error;
  auto server = MetricsServer::start(":0", [] { return std::string("up 1\n"); }, error);
  ASSERT_TRUE(server) << error;
  EXPECT_EQ(get(server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
}

}  // namespace
}  // namespace cudatrace
