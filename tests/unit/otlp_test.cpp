// --otlp's settings (OTEL_EXPORTER_OTLP_* variables) and the attributes a
// call's span carries (docs/otlp.md). What is sent is checked end to end by
// tests/scripts/otlp_test.py against the official schema.
#include "cudatrace/decode/py_stack.h"
#include "cudatrace/render/otlp.h"

#include <gtest/gtest.h>

#include <map>

#include "record_builder.h"

namespace {

using namespace cudatrace;
using cudatrace_test::init_rec;
using cudatrace_test::RecBuf;

struct Env {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> lookup() const {
    return [this](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST(OtlpConfig, EndpointFromTheOptionElseTheVariableElseTheDefault) {
  OtlpConfig c;
  std::string error;
  Env env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/"}}};
  ASSERT_TRUE(read_otlp_config("http://127.0.0.1:9/", env.lookup(), c, error)) << error;
  EXPECT_EQ(c.traces_url, "http://127.0.0.1:9/v1/traces");
  EXPECT_EQ(c.metrics_url, "http://127.0.0.1:9/v1/metrics");
  c = {};
  ASSERT_TRUE(read_otlp_config("", env.lookup(), c, error)) << error;
  EXPECT_EQ(c.traces_url, "https://collector:4318/v1/traces");
  c = {};
  ASSERT_TRUE(read_otlp_config("", Env{}.lookup(), c, error)) << error;
  EXPECT_EQ(c.traces_url, "http://localhost:4318/v1/traces");
  EXPECT_FALSE(c.gzip);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(10000));
}

TEST(OtlpConfig, HeadersTimeoutCompressionAndResource) {
  Env env{{{"OTEL_EXPORTER_OTLP_HEADERS", "api-key=se%20cret, x-tenant = a"},
           {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
           {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
           {"OTEL_RESOURCE_ATTRIBUTES", "k8s.cluster.name=prod,broken,=x,team=gpu%2Cml"}}};
  OtlpConfig c;
  std::string error;
  ASSERT_TRUE(read_otlp_config("http://c:4318", env.lookup(), c, error)) << error;
  EXPECT_EQ(c.headers, (std::vector<std::string>{"api-key: se cret", "x-tenant: a"}));
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(2500));
  EXPECT_TRUE(c.gzip);
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(c.resource, (Pairs{{"k8s.cluster.name", "prod"}, {"team", "gpu,ml"}}));
}

TEST(OtlpConfig, BadValuesAreOneLineEach) {
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"},
           {"OTEL_EXPORTER_OTLP_TIMEOUT", "10s"},
           {"OTEL_EXPORTER_OTLP_TIMEOUT", "0"},
           {"OTEL_EXPORTER_OTLP_HEADERS", "a=b%0d%0aInjected: yes"},
           {"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}}) {
    OtlpConfig c;
    std::string error;
    Env env{{{name, value}}};
    EXPECT_FALSE(read_otlp_config("", env.lookup(), c, error)) << name << "=" << value;
    EXPECT_NE(error.find(name == "OTEL_EXPORTER_OTLP_ENDPOINT" ? "http://" : name), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

std::map<std::string, std::variant<std::string, std::int64_t, double, bool>> attribute_map(const Call& c) {
  std::map<std::string, std::variant<std::string, std::int64_t, double, bool>> out;
  for (const OtlpAttribute& a : otlp_call_attributes(c)) EXPECT_TRUE(out.emplace(a.key, a.value).second) << a.key;
  return out;
}

TEST(OtlpAttributes, ACopyHasItsBytesDirectionAndArguments) {
  RecBuf b;
  init_rec(b, "cudaMemcpy", 1234, "worker");
  b.rec.args[0] = 0x7f0000200000;  // dst
  b.rec.args[1] = 0x5555000a0000;  // src
  b.rec.args[2] = 4096;
  b.rec.args[3] = 1;  // cudaMemcpyHostToDevice
  Call c;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c));
  const auto a = attribute_map(c);
  using V = std::variant<std::string, std::int64_t, double, bool>;
  EXPECT_EQ(a.at("cuda.api"), V(std::string("cudaMemcpy")));
  EXPECT_EQ(a.at("cuda.layer"), V(std::string("runtime")));
  EXPECT_EQ(a.at("cuda.status"), V(std::string("cudaSuccess")));
  EXPECT_EQ(a.at("cuda.bytes"), V(std::int64_t(4096)));
  EXPECT_EQ(a.at("cuda.copy.direction"), V(std::string("HtoD")));
  EXPECT_EQ(a.at("cuda.arg.dst"), V(std::string("0x7f0000200000")));
  EXPECT_EQ(a.at("cuda.arg.count"), V(std::int64_t(4096)));
  EXPECT_EQ(a.at("cuda.arg.kind"), V(std::string("cudaMemcpyHostToDevice")));
  EXPECT_EQ(a.at("thread.id"), V(std::int64_t(1235)));
  EXPECT_EQ(a.at("thread.name"), V(std::string("worker")));
  EXPECT_EQ(a.count("code.function"), 0u);
}

TEST(OtlpAttributes, AFailedCallNamesItsErrorAndAPythonCallSiteIsCode) {
  RecBuf b;
  init_rec(b, "cudaMalloc");
  b.rec.args[1] = std::uint64_t(1) << 40;
  b.rec.ret = 2;
  Call c;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c));
  py_stack(c) = {{"forward", "/srv/model.py", 41}, {"main", "/srv/app.py", 7}};
  EXPECT_EQ(otlp_error_name(c), "cudaErrorMemoryAllocation");
  const auto a = attribute_map(c);
  using V = std::variant<std::string, std::int64_t, double, bool>;
  EXPECT_EQ(a.at("cuda.status"), V(std::string("cudaErrorMemoryAllocation")));
  EXPECT_EQ(a.at("code.function"), V(std::string("forward")));
  EXPECT_EQ(a.at("code.filepath"), V(std::string("/srv/model.py")));
  EXPECT_EQ(a.at("code.lineno"), V(std::int64_t(41)));
  EXPECT_EQ(a.at("code.stacktrace"), V(std::string("model.py:41 forward\napp.py:7 main")));
}

}  // namespace
