// The static archives of cmake/static-deps.cmake, linked into a fully static
// program as cudatrace-static links them: libcurl built from Debian's source
// (HTTP and HTTPS only, OpenSSL, zlib) talks HTTP to a loopback server, and
// libprotobuf's messages survive the trip. Every wait is bounded (5 s).
#include <arpa/inet.h>
#include <curl/curl.h>
#include <google/protobuf/timestamp.pb.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <string>
#include <thread>

namespace {

constexpr int kTimeoutMs = 5000;

// gzip of `text` (what a server sends with Content-Encoding: gzip).
std::string gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// One HTTP exchange on a loopback port: keeps the request's body, answers
// `reply_body` gzipped.
class OneShotServer {
 public:
  explicit OneShotServer(std::string reply_body) : reply_(gzip(reply_body)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      ADD_FAILURE() << "loopback listener: " << std::strerror(errno);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    if (thread_.joinable()) thread_.join();
    close(listener_);
  }
  int port() const { return port_; }
  // The request's body, once the exchange is over (call it after the client's request).
  std::string body() {
    if (thread_.joinable()) thread_.join();
    return body_;
  }

 private:
  static bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, kTimeoutMs) == 1;
  }
  void serve() {
    if (!readable(listener_)) return;
    const int conn = accept(listener_, nullptr, nullptr);
    std::string request;
    char buf[4096];
    size_t header_end = std::string::npos, length = 0;
    while (readable(conn)) {
      const ssize_t n = read(conn, buf, sizeof buf);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
      if (header_end == std::string::npos && (header_end = request.find("\r\n\r\n")) != std::string::npos) {
        const size_t at = request.find("Content-Length: ");
        if (at != std::string::npos) length = std::stoul(request.substr(at + 16));
      }
      if (header_end != std::string::npos && request.size() >= header_end + 4 + length) break;
    }
    if (header_end != std::string::npos) body_ = request.substr(header_end + 4, length);
    const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Length: " +
                              std::to_string(reply_.size()) + "\r\nConnection: close\r\n\r\n" + reply_;
    EXPECT_EQ(write(conn, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
    close(conn);
  }

  std::string reply_;
  int listener_ = -1;
  int port_ = 0;
  std::string body_;
  std::thread thread_;
};

size_t append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

TEST(StaticDeps, CurlHasHttpAndHttpsThroughOpenSslAndZlibOnly) {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  EXPECT_TRUE(info->features & CURL_VERSION_SSL);
  EXPECT_TRUE(info->features & CURL_VERSION_LIBZ);
  ASSERT_NE(info->ssl_version, nullptr);
  EXPECT_EQ(std::string(info->ssl_version).rfind("OpenSSL/", 0), 0u) << info->ssl_version;
  std::string protocols;
  for (const char* const* p = info->protocols; *p; ++p) protocols += std::string(*p) + " ";
  EXPECT_EQ(protocols, "http https ");
}

TEST(StaticDeps, ProtobufMessagePostedOverHttpWithGzippedAnswer) {
  google::protobuf::Timestamp sent;
  sent.set_seconds(1733500000);
  sent.set_nanos(123456789);
  const std::string payload = sent.SerializeAsString();

  OneShotServer server("accepted");
  ASSERT_EQ(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
  CURL* curl = curl_easy_init();
  ASSERT_NE(curl, nullptr);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/v1/traces";
  std::string answer;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/x-protobuf");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "gzip");
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(kTimeoutMs));
  const CURLcode result = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  curl_global_cleanup();

  ASSERT_EQ(result, CURLE_OK) << curl_easy_strerror(result);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(answer, "accepted");  // curl inflated the gzip answer
  google::protobuf::Timestamp received;
  ASSERT_TRUE(received.ParseFromString(server.body()));
  EXPECT_EQ(received.seconds(), sent.seconds());
  EXPECT_EQ(received.nanos(), sent.nanos());
}

}  // namespace
