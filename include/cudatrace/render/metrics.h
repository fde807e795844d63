// The Prometheus metrics of exporter mode (--prometheus, docs/prometheus.md),
// fed from the in-kernel aggregation. The names, labels and buckets are
// documented there; label cardinality is bounded: no pid, address, stream or
// kernel name; a process is known by comm, container id and pod UID, and
// past kMaxIdentities distinct ones, new ones are folded into comm="other".
//
// Built on prometheus-cpp (core + pull). A build without it (a static
// binary made without prometheus-cpp's source, cmake/static-deps.cmake) has
// create() fail with one line saying so.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "cudatrace/analysis/memory.h"
#include "cudatrace/decode/api_table.h"
#include "cudatrace/node_counts.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/render/writer.h"

namespace cudatrace {

struct MetricsIdentity {
  std::string comm, container_id, pod_uid;
  // OpenTelemetry resource attributes (low cardinality; labels only when set).
  std::string service_name = {}, service_namespace = {}, deployment_environment = {};
  bool operator<(const MetricsIdentity& o) const {
    return std::tie(comm, container_id, pod_uid, service_name, service_namespace, deployment_environment) <
           std::tie(o.comm, o.container_id, o.pod_uid, o.service_name, o.service_namespace, o.deployment_environment);
  }
};

// Reasons of cudatrace_lost_records_total.
enum class LossReason : std::uint8_t { RingFull, ThreadTableFull, DepthOverflow, ControlRecord, AggregationFull };
inline constexpr int kLossReasons = 5;

class PrometheusMetrics {
 public:
  static constexpr std::size_t kMaxIdentities = 512;
  // The histogram's upper bounds in seconds (bpf_abi.h CT_EXPORT_BOUNDS_NS).
  static const double kDurationBounds[CT_EXPORT_BUCKETS - 1];

  // nullptr with `error` set when this build has no exporter.
  static std::unique_ptr<PrometheusMetrics> create(std::string& error);
  virtual ~PrometheusMetrics() = default;

  // Serves /metrics on ADDR:PORT ("127.0.0.1:9400", "[::1]:9400", ":9400"
  // for every address). False with `error` set if it cannot listen there.
  virtual bool serve(const std::string& address, std::string& error) = 0;
  // The port actually bound (serve() with port 0 picks a free one).
  virtual int port() const = 0;
  // Tracing has begun (probes attached) at `unix_seconds`: the time goes in
  // cudatrace_tracing_since_seconds, and /metrics, answered 503 until
  // now, is served.
  virtual void tracing_began(double unix_seconds) = 0;

  // What one aggregation entry (process, API, status, copy direction) grew by.
  virtual void add_calls(const MetricsIdentity& who, const Api& api, std::uint16_t status, std::uint8_t direction,
                         const ct_export_value& delta) = 0;
  // cudatrace_api_seen_ratio{api,layer}: 1 for an exact API, the sampled
  // share of calls for one whose counts are estimates.
  virtual void set_seen_ratio(const Api& api, double ratio) = 0;
  // --max-overhead, as ratios: the budget, its estimated cost so far (hits
  // priced at the safety factor) and the share of the time the hot probes
  // were attached (cudatrace_budget_*_ratio; absent without a budget).
  virtual void set_budget(double max, double estimated_cost, double hot_attached) = 0;
  virtual void add_cost(const MetricsIdentity& who, std::uint64_t probe_hits, double added_seconds) = 0;
  virtual void set_memory(const MetricsIdentity& who, std::uint64_t live_bytes, std::uint64_t peak_bytes) = 0;
  virtual void set_lost(LossReason reason, std::uint64_t total) = 0;
  virtual void set_node(std::size_t traced_processes, std::size_t probed_files, double entry_hit_seconds,
                        double return_hit_seconds) = 0;
  // The exposition as a scrape gets it (tests, docs/guide.md).
  virtual std::string text() const = 0;
};

// The label values of a status and a copy direction.
std::string status_label(const Api& api, std::uint16_t status);
const char* direction_label(std::uint8_t direction);
// `value` as a label value: the text format is UTF-8 (a scrape with one
// invalid byte fails whole), so each byte that is not part of valid UTF-8
// becomes U+FFFD. Quotes, backslashes and newlines are the serializer's to
// escape; a process name may hold any byte but NUL and '/'. Any process
// chooses its label values: each is kept to kMaxLabelBytes, cut with "…"
// (bounded_value), as it rides on every series of its process.
inline constexpr std::size_t kMaxLabelBytes = 128;
std::string utf8_label(std::string_view value);

// The metrics as a writer: fed the node's counts (exporter mode's each second).
class MetricsWriter final : public Writer {
 public:
  // Serves /metrics on `address` (metrics_server.h); nullptr with `error`
  // set when it cannot (no exporter in this build, address in use...).
  static std::unique_ptr<MetricsWriter> serve(const std::string& address, std::string& error);
  // The same metrics served nowhere (--otlp's, without --prometheus); nullptr
  // with `error` set in a build without the exporter.
  static std::unique_ptr<MetricsWriter> unserved(std::string& error);

  void counts(const NodeCounts& s, const MemoryTracker& memory) override;
  // Tracing has begun now: /metrics is served from here on.
  void tracing_began();
  int port() const { return metrics_->port(); }
  std::uint64_t calls_counted() const { return calls_counted_; }  // by every look so far
  const PrometheusMetrics& metrics() const { return *metrics_; }

 private:
  explicit MetricsWriter(std::unique_ptr<PrometheusMetrics> metrics) : metrics_(std::move(metrics)) {}

  std::unique_ptr<PrometheusMetrics> metrics_;
  std::map<MetricsIdentity, std::uint64_t> peaks_;
  std::uint64_t calls_counted_ = 0;
  std::set<std::uint16_t> sampled_apis_;  // APIs the budget ever sampled
};

}  // namespace cudatrace
