// The /metrics endpoint on loopback: answers, errors, and that no client
// (idle, slow, too many) holds another's scrape back or delays stopping.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "../integration/http_client.h"
#include "cudatrace/render/metrics_server.h"

namespace cudatrace {
namespace {

using namespace cudatrace_test::http;
using Clock = std::chrono::steady_clock;

std::string get(int port, const std::string& target) {
  return http_exchange(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

// A server that serves its body at once (tracing has begun), unless `ready` is false.
std::unique_ptr<MetricsServer> serve(MetricsServer::Body body, bool ready = true) {
  std::string error;
  auto server = MetricsServer::start("127.0.0.1:0", std::move(body), error);
  EXPECT_TRUE(server) << error;
  if (server) EXPECT_GT(server->port(), 0);
  if (server && ready) server->ready();
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
  // Versions other than 1.x, and requests that are not HTTP, answered at
  // once (the connection then closes: no wait for more).
  const auto start = Clock::now();
  const std::string version_9 = http_exchange(port, "GET /metrics HTTP/9.9\r\n\r\n");
  EXPECT_EQ(version_9.rfind("HTTP/1.1 505 HTTP Version Not Supported\r\n", 0), 0u) << version_9;
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTP/2.0\r\n\r\n").rfind("HTTP/1.1 505", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET /metrics\r\n").rfind("HTTP/1.1 505", 0), 0u);  // HTTP/0.9
  const std::string tls_hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  EXPECT_EQ(http_exchange(port, tls_hello).rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTP/1.1 extra\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTQ/1.1\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET /met\x01rics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(http_exchange(port, "\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(http_exchange(port, "BREW /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(get(port, "/metrics").rfind("HTTP/1.1 200", 0), 0u);  // HTTP/1.1 (and 1.0, above)
  EXPECT_EQ(bodies, 4);  // the GETs and the HEAD of /metrics
}

TEST(RequestCheck, SaysWhatARequestAsksForAsSoonAsItCan) {
  const std::map<std::string, int> statuses = {
      {"", 0},
      {"GE", 0},
      {"GET /metr", 0},
      {"GET /metrics HTTP/1.1\r", 0},
      {"GET /metrics HTTP/1.1\r\nHost: x\r\n", 0},
      {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200},
      {"GET /metrics?name=x HTTP/1.0\n\n", 200},
      {"GET /metrics HTTP/1.2\r\n\r\n", 200},  // a later 1.x is read as 1.1
      {"GET / HTTP/1.1\r\n\r\n", 404},
      {"POST /metrics HTTP/1.1\r\n\r\n", 405},
      {"GET /metrics HTTP/0.9\r\n", 505},
      {"GET /metrics HTTP/3.0\r\n", 505},
      {"GET /metrics\n", 505},
      {"G\xc3T", 400},
      {"\x16\x03", 400},
      {"GET\r\n", 400},
      {" GET / HTTP/1.1\r\n", 400},
      {"GET  / HTTP/1.1\r\n", 400},
      {"GET /\x7f", 400},
      {"GET / HTTP/1.1x\r\n", 400},
      {"GET / HTTP/a.1\r\n", 400},
  };
  for (const auto& [request, status] : statuses) EXPECT_EQ(check_request(request).status, status) << request;
  // NUL bytes (issue 47: they waited 5 s for more, as if a method were coming).
  using namespace std::string_view_literals;
  for (const std::string_view nuls : {"\0"sv, "\0\0\0\0\0\0\0\0"sv, "GET\0"sv, "G\0T /metrics HTTP/1.1\r\n\r\n"sv, "GET \0"sv})
    EXPECT_EQ(check_request(nuls).status, 400) << nuls.size() << " bytes";
  EXPECT_TRUE(check_request("HEAD /metrics HTTP/1.1\r\n\r\n").head);
  EXPECT_FALSE(check_request("GET /metrics HTTP/1.1\r\n\r\n").head);
}

// Until tracing has begun, /metrics says so: 503 with Retry-After, never
// an answer that looks like a working agent's with nothing counted.
TEST(MetricsServer, NotReadyIsServiceUnavailable) {
  std::atomic<int> bodies{0};
  auto server = serve(
      [&] {
        ++bodies;
        return std::string("up 1\n");
      },
      false);
  const std::string early = get(server->port(), "/metrics");
  EXPECT_EQ(early.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << early;
  EXPECT_NE(early.find("\r\nRetry-After: 1\r\n"), std::string::npos) << early;
  EXPECT_EQ(http_exchange(server->port(), "HEAD /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_EQ(get(server->port(), "/").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(bodies, 0);
  server->ready();
  EXPECT_EQ(body_of(get(server->port(), "/metrics")), "up 1\n");
}

// 2,000 clients at once (64 were answered, 1,936 reset): every one is
// answered, those past the limit waiting in the listen queue.
TEST(MetricsServer, TwoThousandConcurrentScrapesAreAllAnswered) {
  auto server = serve([] { return std::string(3000, 'x') + "\n"; });
  const auto start = Clock::now();
  const std::vector<std::string> responses =
      many_exchanges(server->port(), 2000, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", std::chrono::seconds(30));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  std::size_t ok = 0;
  std::map<std::string, int> others;
  for (const std::string& r : responses) {
    if (r.rfind("HTTP/1.1 200", 0) == 0 && body_of(r).size() == 3001) ++ok;
    else ++others[r.substr(0, r.find('\r'))];
  }
  EXPECT_EQ(ok, responses.size()) << "in " << took << " ms; others: " << testing::PrintToString(others);
  std::printf("2,000 concurrent scrapes: %zu answered 200 in %lld ms\n", ok, static_cast<long long>(took));
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
  raise_file_limit(8 * MetricsServer::kMaxConnections + 256);
  auto server = serve([] { return std::string("up 1\n"); });
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(connect_to(server->port()));
  auto start = Clock::now();
  EXPECT_EQ(get(server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  // Past the limit, the connections that sent no request in time are
  // answered 408 and closed, to make room for the ones waiting.
  for (std::size_t i = 0; i < MetricsServer::open_limit(); ++i) idle.push_back(connect_to(server->port()));
  start = Clock::now();
  EXPECT_EQ(get(server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  char buf[64] = {};
  EXPECT_GT(read(idle.front(), buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << buf;
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
  server->ready();
  EXPECT_EQ(get(server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
}

}  // namespace
}  // namespace cudatrace
