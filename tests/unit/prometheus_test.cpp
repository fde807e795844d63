// The exposition of exporter mode: names, labels, buckets, the label cap,
// and how the API table becomes the BPF export table.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <set>

#include "cudatrace/record/node_stats.h"
#include "cudatrace/render/metrics.h"
#include "cudatrace/render/metrics_server.h"

namespace cudatrace {
namespace {

std::unique_ptr<PrometheusMetrics> make() {
  std::string error;
  auto m = PrometheusMetrics::create(error);
  EXPECT_TRUE(m) << error;
  return m;
}

ct_export_value calls(std::uint64_t n, std::uint64_t ns_each, int bucket) {
  ct_export_value v{};
  v.calls = n;
  v.outer_ok = n;
  v.total_ns = n * ns_each;
  v.buckets[bucket] = n;
  return v;
}

// A process that publishes OpenTelemetry's process context: its service as
// labels (docs/correlation.md); the others keep the three labels alone.
TEST(Prometheus, OpenTelemetryServiceLabels) {
  auto m = make();
  const MetricsIdentity service{"python3", "", "", "checkout", "shop", "prod"};
  const MetricsIdentity plain{"app", "", ""};
  m->add_calls(service, *api_by_symbol("cudaMalloc"), 0, 0, calls(2, 4000, 2));
  m->add_calls(plain, *api_by_symbol("cudaMalloc"), 0, 0, calls(1, 4000, 2));
  const std::string t = m->text();
  EXPECT_NE(t.find("cuda_api_calls_total{api=\"cudaMalloc\",comm=\"python3\",container_id=\"\","
                   "deployment_environment=\"prod\",error=\"success\",layer=\"runtime\",pod_uid=\"\","
                   "service_name=\"checkout\",service_namespace=\"shop\"} 2"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("cuda_api_calls_total{api=\"cudaMalloc\",comm=\"app\",container_id=\"\",error=\"success\","
                   "layer=\"runtime\",pod_uid=\"\"} 1"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("trace_id"), std::string::npos);
}

TEST(Prometheus, CallsHistogramAndLabels) {
  auto m = make();
  const MetricsIdentity who{"python3", std::string(64, 'a'), "0f6c2a1e-8d3b-4c5a-9e7f-1a2b3c4d5e6f"};
  m->add_calls(who, *api_by_symbol("cudaMalloc"), 0, 0, calls(3, 4000, 2));  // 4 us: bucket (2.5, 5] us
  m->add_calls(who, *api_by_symbol("cudaMalloc"), 2, 0, calls(1, 900, 0));
  const std::string t = m->text();
  EXPECT_NE(t.find("cuda_api_calls_total{api=\"cudaMalloc\",comm=\"python3\",container_id=\"" + std::string(64, 'a') +
                   "\",error=\"success\",layer=\"runtime\",pod_uid=\"0f6c2a1e-8d3b-4c5a-9e7f-1a2b3c4d5e6f\"} 3"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("error=\"cudaErrorMemoryAllocation\""), std::string::npos) << t;
  // Cumulative buckets in seconds: 1 call <= 1 us, 4 calls <= 5 us, and +Inf.
  EXPECT_NE(t.find("cuda_api_duration_seconds_bucket{api=\"cudaMalloc\",comm=\"python3\""), std::string::npos);
  EXPECT_TRUE(std::regex_search(t, std::regex("cuda_api_duration_seconds_bucket\\{[^}]*le=\"1e-06\"\\} 1\\n")))
      << t;
  EXPECT_TRUE(std::regex_search(t, std::regex("cuda_api_duration_seconds_bucket\\{[^}]*le=\"5e-06\"\\} 4\\n")));
  EXPECT_TRUE(std::regex_search(t, std::regex("cuda_api_duration_seconds_bucket\\{[^}]*le=\"\\+Inf\"\\} 4\\n")));
  EXPECT_TRUE(std::regex_search(t, std::regex("cuda_api_duration_seconds_count\\{[^}]*\\} 4\\n")));
  EXPECT_TRUE(std::regex_search(t, std::regex("cuda_api_duration_seconds_sum\\{[^}]*\\} 1.29e-05\\n"))) << t;
}

TEST(Prometheus, SeenRatioGaugeOnlyForSampledApis) {
  auto m = make();
  m->add_calls({"app", "", ""}, *api_by_symbol("cudaMalloc"), 0, 0, calls(3, 4000, 2));
  m->set_seen_ratio(*api_by_symbol("cudaLaunchKernel"), 0.25);
  const std::string t = m->text();
  EXPECT_NE(t.find("cudatrace_api_seen_ratio{api=\"cudaLaunchKernel\",layer=\"runtime\"} 0.25"), std::string::npos) << t;
  EXPECT_EQ(t.find("cudatrace_api_seen_ratio{api=\"cudaMalloc\""), std::string::npos) << t;
}

TEST(Prometheus, BudgetGaugesOnlyUnderABudget) {
  auto m = make();
  EXPECT_EQ(m->text().find("cudatrace_budget_max_ratio "), std::string::npos) << m->text();
  m->set_budget(0.01, 0.0125, 0.045);
  const std::string t = m->text();
  EXPECT_NE(t.find("cudatrace_budget_max_ratio 0.01\n"), std::string::npos) << t;
  EXPECT_NE(t.find("cudatrace_budget_estimated_cost_ratio 0.0125\n"), std::string::npos) << t;
  EXPECT_NE(t.find("cudatrace_budget_hot_attached_ratio 0.045\n"), std::string::npos) << t;
}

TEST(Prometheus, NamesFollowTheConventionsAndNoPidLabel) {
  auto m = make();
  const MetricsIdentity who{"app", "", ""};
  ct_export_value copy = calls(2, 1000, 1);
  copy.bytes = 8192;
  m->add_calls(who, *api_by_symbol("cudaMemcpy"), 0, 1, copy);
  m->add_calls(who, *api_by_symbol("cudaLaunchKernel"), 0, 0, calls(5, 3000, 2));
  m->add_cost(who, 14, 14e-6);
  m->set_memory(who, 1 << 20, 2 << 20);
  m->set_lost(LossReason::AggregationFull, 7);
  m->set_lost(LossReason::AggregationFull, 9);
  m->set_node(1, 2, 1e-6, 2e-6);
  m->tracing_began(1764763200.5);
  const std::string t = m->text();
  EXPECT_NE(t.find("\ncudatrace_tracing_since_seconds 1764763200.5\n"), std::string::npos) << t;
  EXPECT_NE(t.find("cuda_transfer_bytes_total{comm=\"app\",container_id=\"\",direction=\"HtoD\",pod_uid=\"\"} 8192"),
            std::string::npos) << t;
  EXPECT_NE(t.find("cuda_kernel_launches_total{comm=\"app\",container_id=\"\",pod_uid=\"\"} 5"), std::string::npos);
  EXPECT_NE(t.find("cuda_device_memory_bytes{comm=\"app\",container_id=\"\",pod_uid=\"\"} 1048576"), std::string::npos);
  EXPECT_NE(t.find("cuda_device_memory_peak_bytes{comm=\"app\",container_id=\"\",pod_uid=\"\"} 2097152"), std::string::npos);
  EXPECT_NE(t.find("cudatrace_lost_records_total{reason=\"aggregation_map_full\"} 9"), std::string::npos);
  EXPECT_NE(t.find("cudatrace_probe_hits_total{comm=\"app\",container_id=\"\",pod_uid=\"\"} 14"), std::string::npos);
  EXPECT_NE(t.find("cudatrace_added_seconds_total{comm=\"app\",container_id=\"\",pod_uid=\"\"} 1.4e-05"),
            std::string::npos);
  // Every family: snake case, counters end in _total, units in the name.
  std::set<std::string> types;
  const std::regex type_line("# TYPE ([a-z_]+) (counter|gauge|histogram)");
  for (auto it = std::sregex_iterator(t.begin(), t.end(), type_line); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1], type = (*it)[2];
    types.insert(name);
    if (type == "counter") EXPECT_TRUE(name.size() > 6 && name.substr(name.size() - 6) == "_total") << name;
    if (type == "histogram") EXPECT_NE(name.find("_seconds"), std::string::npos) << name;
    EXPECT_TRUE(name.rfind("cuda_", 0) == 0 || name.rfind("cudatrace_", 0) == 0) << name;
  }
  EXPECT_EQ(types.size(), 14u);
  for (const char* forbidden : {"pid=", "tid=", "stream=", "kernel=", "address="})
    EXPECT_EQ(t.find(forbidden), std::string::npos) << forbidden;
}

TEST(Prometheus, BucketBoundsMatchTheBpfOnes) {
  const std::uint64_t ns[] = CT_EXPORT_BOUNDS_NS;
  static_assert(sizeof ns / sizeof ns[0] == CT_EXPORT_BUCKETS - 1, "one bound per bucket but the last");
  for (int i = 0; i < CT_EXPORT_BUCKETS - 1; ++i) {
    EXPECT_DOUBLE_EQ(PrometheusMetrics::kDurationBounds[i], double(ns[i]) / 1e9) << i;
    if (i) EXPECT_LT(ns[i - 1], ns[i]);
  }
}

TEST(Prometheus, IdentitiesBeyondTheCapAreFoldedIntoOther) {
  auto m = make();
  const Api& api = *api_by_symbol("cudaFree");
  for (std::size_t i = 0; i < PrometheusMetrics::kMaxIdentities + 10; ++i)
    m->add_calls({"p" + std::to_string(i), "", ""}, api, 0, 0, calls(1, 100, 0));
  m->add_calls({"p0", "", ""}, api, 0, 0, calls(1, 100, 0));  // an identity already labelled stays
  const std::string t = m->text();
  std::set<std::string> comms;
  const std::regex series("cuda_api_calls_total\\{[^}]*comm=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(t.begin(), t.end(), series); it != std::sregex_iterator(); ++it)
    comms.insert((*it)[1]);
  EXPECT_EQ(comms.size(), PrometheusMetrics::kMaxIdentities + 1);
  EXPECT_TRUE(comms.count("other"));
  EXPECT_NE(t.find("cuda_api_calls_total{api=\"cudaFree\",comm=\"other\",container_id=\"\",error=\"success\",layer=\"runtime\",pod_uid=\"\"} 10"),
            std::string::npos);
  EXPECT_NE(t.find("cuda_api_calls_total{api=\"cudaFree\",comm=\"p0\",container_id=\"\",error=\"success\",layer=\"runtime\",pod_uid=\"\"} 2"),
            std::string::npos);
  EXPECT_NE(t.find("cudatrace_folded_identities_total 10"), std::string::npos);
}

TEST(Prometheus, StatusAndDirectionLabels) {
  const Api& malloc_api = *api_by_symbol("cudaMalloc");
  EXPECT_EQ(status_label(malloc_api, 0), "success");
  EXPECT_EQ(status_label(malloc_api, 2), "cudaErrorMemoryAllocation");
  EXPECT_EQ(status_label(*api_by_symbol("cuMemAlloc_v2"), 2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(status_label(malloc_api, CT_EXPORT_STATUS_OTHER), "other");
  EXPECT_EQ(status_label(malloc_api, 54321), "code_54321");
  EXPECT_STREQ(direction_label(2), "DtoH");
  EXPECT_STREQ(direction_label(4), "Peer");
  EXPECT_STREQ(direction_label(200), "Default");
}

// Process names are any bytes but NUL and '/': escaped per the text format
// (the serializer's part), made valid UTF-8 (utf8_label's).
TEST(Prometheus, HostileProcessNamesAreEscapedAndValidUtf8) {
  auto m = make();
  const Api& api = *api_by_symbol("cudaFree");
  m->add_calls({"a\"b\\c\nd{e}", "", ""}, api, 0, 0, calls(1, 100, 0));
  m->add_calls({"bad\xff\xc3(", "", ""}, api, 0, 0, calls(1, 100, 0));
  const std::string t = m->text();
  EXPECT_NE(t.find("comm=\"a\\\"b\\\\c\\nd{e}\""), std::string::npos) << t;
  EXPECT_NE(t.find("comm=\"bad\xEF\xBF\xBD\xEF\xBF\xBD(\""), std::string::npos) << t;
}

TEST(Prometheus, Utf8LabelKeepsValidTextAndReplacesEachBadByte) {
  EXPECT_EQ(utf8_label("python3"), "python3");
  EXPECT_EQ(utf8_label("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  const std::string bad = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_label("a\xFFz"), "a" + bad + "z");
  EXPECT_EQ(utf8_label("\xC0\xAF"), bad + bad);              // overlong '/'
  EXPECT_EQ(utf8_label("\xED\xA0\x80"), bad + bad + bad);     // a surrogate
  EXPECT_EQ(utf8_label("\xF4\x90\x80\x80"), bad + bad + bad + bad);  // past U+10FFFF
  EXPECT_EQ(utf8_label("\xE2\x82"), bad + bad);              // cut short
  EXPECT_EQ(utf8_label(std::string("a\0b", 3)), std::string("a\0b", 3));
}

// A label value is anyone's choice (issue 47: a service.name of 100 kB rode
// on every series, 8.2 MB a scrape): at most 128 bytes, cut between
// characters, marked with "…".
TEST(Prometheus, LabelValuesAreBounded) {
  const std::string ellipsis = "\xE2\x80\xA6";
  EXPECT_EQ(utf8_label(std::string(128, 'a')), std::string(128, 'a'));
  EXPECT_EQ(utf8_label(std::string(100000, 'a')), std::string(125, 'a') + ellipsis);
  std::string euros;
  for (int i = 0; i < 60; ++i) euros += "\xE2\x82\xAC";  // 180 bytes of 3-byte characters
  EXPECT_EQ(utf8_label(euros), euros.substr(0, 123) + ellipsis);  // 41 whole ones
  EXPECT_EQ(utf8_label(std::string(200, '\xFF')).size(), 126u);  // U+FFFD x 41, and the mark
  auto m = make();
  const Api& api = *api_by_symbol("cudaFree");
  MetricsIdentity who{"python3", "", ""};
  who.service_name = std::string(100000, 's');
  m->add_calls(who, api, 0, 0, calls(1, 100, 0));
  const std::string t = m->text();
  EXPECT_NE(t.find("service_name=\"" + std::string(125, 's') + ellipsis + "\""), std::string::npos);
  EXPECT_LT(t.size(), 40000u) << "a series per bucket, each with its labels";
}

TEST(Prometheus, ServeRejectsABadAddress) {
  auto m = make();
  std::string error;
  EXPECT_FALSE(m->serve("256.1.1.1:99999", error));
  EXPECT_NE(error.find("cannot serve Prometheus metrics on 256.1.1.1:99999"), std::string::npos) << error;
}

TEST(ExportTable, CopiesKnowTheirBytesAndDirection) {
  const ct_export_api memcpy_row = export_api(*api_by_symbol("cudaMemcpy"));
  EXPECT_EQ(memcpy_row.kind, CT_EXP_COPY);
  EXPECT_EQ(memcpy_row.bytes_slot, 3);  // (dst, src, count, kind)
  EXPECT_EQ(memcpy_row.copy_kind_slot, 4);
  EXPECT_EQ(memcpy_row.rows_slot, 0);
  const ct_export_api two_d = export_api(*api_by_symbol("cudaMemcpy2D"));
  EXPECT_EQ(two_d.bytes_slot, 5);  // (dst, dpitch, src, spitch, width, height, kind): width x height
  EXPECT_EQ(two_d.rows_slot, 6);
  const ct_export_api htod = export_api(*api_by_symbol("cuMemcpyHtoD_v2"));
  EXPECT_EQ(htod.copy_kind_slot, 0);
  EXPECT_EQ(htod.copy_kind, 1);
  EXPECT_EQ(export_api(*api_by_symbol("cudaMemcpyPeer")).copy_kind, 4);
  EXPECT_EQ(export_api(*api_by_symbol("cuMemcpy")).copy_kind, CT_EXPORT_DIR_DEFAULT);
  EXPECT_EQ(export_api(*api_by_symbol("cudaLaunchKernel")).kind, CT_EXP_LAUNCH);
  EXPECT_EQ(export_api(*api_by_symbol("cudaFree")).kind, CT_EXP_MEMORY);
  EXPECT_EQ(export_api(*api_by_symbol("cudaStreamSynchronize")).kind, CT_EXP_NONE);
}

TEST(ExportTable, DeltaNeverGoesNegative) {
  ct_export_value before = calls(5, 10, 3), now = calls(7, 10, 3);
  now.bytes = 4;
  const ct_export_value d = export_delta(now, before);
  EXPECT_EQ(d.calls, 2u);
  EXPECT_EQ(d.buckets[3], 2u);
  EXPECT_EQ(d.bytes, 4u);
  EXPECT_EQ(export_delta(before, now).calls, 0u);
}

// --prometheus ADDRESS is checked before anything starts: what the HTTP
// server would take another way (999 -> 231, 99999 -> a late failure) or not
// at all (a host name, IPv6 in Debian's civetweb) is refused in one line.
TEST(ListenAddress, OnlyIpv4AndPortsThatExist) {
  sockaddr_in addr{};
  std::string error;
  ASSERT_TRUE(parse_listen_address("127.0.0.1:9400", addr, error)) << error;
  EXPECT_EQ(ntohs(addr.sin_port), 9400);
  EXPECT_EQ(ntohl(addr.sin_addr.s_addr), 0x7f000001u);
  ASSERT_TRUE(parse_listen_address(":0", addr, error)) << error;
  EXPECT_EQ(addr.sin_addr.s_addr, 0u);  // every address; port 0: any free one
  ASSERT_TRUE(parse_listen_address("0.0.0.0:65535", addr, error)) << error;
  for (const char* bad : {"999.1.1.1:19410", "1.2.3:80", "1.2.3.4.5:80", "01.2.3.4:80", "localhost:9400",
                          "[::1]:9400", " 127.0.0.1:80"}) {
    EXPECT_FALSE(parse_listen_address(bad, addr, error)) << bad;
    EXPECT_EQ(error.rfind("--prometheus: HOST must be an IPv4 address such as 127.0.0.1", 0), 0u) << error;
  }
  for (const char* bad : {":99999", ":", "127.0.0.1", "127.0.0.1:-1", "127.0.0.1:80x", ":+80", "nonsense"}) {
    EXPECT_FALSE(parse_listen_address(bad, addr, error)) << bad;
    EXPECT_EQ(error.rfind("--prometheus needs HOST:PORT with a port from 0 (any free port) to 65535", 0), 0u) << error;
  }
}

// A port in use is said at once, with the system's reason.
TEST(ListenAddress, PortInUseIsFoundBeforeTheServerStarts) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  std::string error;
  EXPECT_FALSE(check_listen_address(taken, error));
  EXPECT_EQ(error, "cannot serve Prometheus metrics on " + taken + ": Address already in use");
  close(fd);
  EXPECT_TRUE(check_listen_address(taken, error)) << error;
  EXPECT_TRUE(check_listen_address("127.0.0.1:0", error)) << error;
}

// The metrics writer labels each count by the process it came from, sums
// live memory by that label, and keeps a peak.
TEST(MetricsWriter, CountsAreLabelledByProcessAndMemoryFollowsTheAnalyses) {
  std::string error;
  const auto writer = MetricsWriter::serve("127.0.0.1:0", error);
  ASSERT_TRUE(writer) << error;
  NodeCounts counts;
  ct_export_key key{};
  key.tgid = 42;
  key.api = api_by_symbol("cudaLaunchKernel")->id;
  counts.calls.push_back({key, calls(3, 5000, 2)});
  counts.labels[42] = {"trainer", "c0ffee", ""};
  counts.hits.push_back({42, 3, 0.001});
  MemoryTracker memory;
  writer->counts(counts, memory);
  EXPECT_EQ(writer->calls_counted(), 3u);
  const std::string text = writer->metrics().text();
  EXPECT_NE(text.find("cuda_api_calls_total{api=\"cudaLaunchKernel\",comm=\"trainer\",container_id=\"c0ffee\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cudatrace_probe_hits_total{comm=\"trainer\""), std::string::npos) << text;
}

}  // namespace
}  // namespace cudatrace
