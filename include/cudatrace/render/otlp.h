// --otlp: the calls made under a published OpenTelemetry thread span, sent
// as child spans over OTLP/HTTP with protobuf bodies to a Collector
// (docs/otlp.md). The writer maps each call (otlp_call_attributes, in
// otlp_attributes.cpp: the one place that says which attribute a call
// gives) and queues it; a thread of its own batches, compresses and sends,
// retries with backoff, and drops and counts what does not fit its bounded
// queue: a slow, down or hostile Collector never holds the reader back.
//
// Built on libprotobuf (the vendored opentelemetry-proto compiled by protoc)
// and libcurl: a build without them (CUDATRACE_OTLP off) has
// make_otlp_writer fail with one line saying so.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cudatrace/render/writer.h"

namespace cudatrace {

// Where and how to send, from --otlp and the standard OTEL_EXPORTER_OTLP_*
// variables of cudatrace's own environment.
struct OtlpConfig {
  std::string traces_url, metrics_url;  // ENDPOINT/v1/traces, ENDPOINT/v1/metrics
  std::vector<std::string> headers;     // "Name: value" (OTEL_EXPORTER_OTLP_HEADERS)
  std::chrono::milliseconds timeout{10000};  // each request, and the flush at exit (OTEL_EXPORTER_OTLP_TIMEOUT)
  bool gzip = false;                         // OTEL_EXPORTER_OTLP_COMPRESSION=gzip
  // OTEL_RESOURCE_ATTRIBUTES of cudatrace's environment: added to every
  // process's resource where the process does not set the key itself.
  std::vector<std::pair<std::string, std::string>> resource;
  bool calls_without_span = false;  // --otlp-all-calls: also calls under no published span (as roots)
  std::chrono::seconds metrics_interval{10};  // --otlp-interval
  // metrics() hands the node exporter's metrics over (else only the spans' own counts are sent).
  bool node_metrics = false;
  bool spans = true;  // calls come as spans (not with --prometheus, which records none)
};

// Reads how to export: `endpoint` is --otlp's value (empty: the variable
// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318); `env` looks a
// variable up (getenv). False with `error` set (one line) on a bad value.
bool read_otlp_config(const std::string& endpoint, const std::function<const char*(const char*)>& env,
                      OtlpConfig& out, std::string& error);
// OTEL_RESOURCE_ATTRIBUTES's format: "k1=v1,k2=v2", values percent-encoded.
// Pairs without '=' or with an empty key are skipped.
std::vector<std::pair<std::string, std::string>> parse_otel_pairs(std::string_view text);

// One attribute of a span, protobuf-free (otlp_call_attributes).
struct OtlpAttribute {
  std::string key;
  std::variant<std::string, std::int64_t, double, bool> value;
};
// The attributes of one decoded call, under the names docs/otlp.md lists
// (cuda.*, thread.id, code.*). The one mapping from a call to OTLP.
std::vector<OtlpAttribute> otlp_call_attributes(const Call& c);
// The span's status message of a failed call: the CUDA error's name
// ("cudaErrorMemoryAllocation"), or its number when it has none.
std::string otlp_error_name(const Call& c);

// The spans writer: call() queues (never blocks); stop() sends what is
// queued for at most the timeout and says what became of every span.
class OtlpWriter : public Writer {
 public:
  // How many spans wait to be sent, at most; past it new ones are dropped.
  static constexpr std::size_t kMaxQueuedSpans = 20000;
  // Spans a request carries, at most, and how long a span waits for others.
  static constexpr std::size_t kBatchSpans = 1000;
  static constexpr std::chrono::milliseconds kBatchDelay{1000};
  // Retries of 429, 502, 503, 504 and unreachable Collectors: the first
  // after kFirstBackoff, doubling up to kMaxBackoff (or what Retry-After says, up to kMaxBackoff).
  static constexpr std::chrono::milliseconds kFirstBackoff{500};
  static constexpr std::chrono::milliseconds kMaxBackoff{30000};

  // With node_metrics: the node exporter's exposition now (what /metrics
  // serves or would serve), to be sent as OTLP metrics (otlp_metrics.h), the
  // spans' own counts added; one not sent yet is replaced (the values are
  // cumulative: the newer says all the older did). Without node_metrics the
  // writer sends the spans' own counts every metrics_interval instead.
  virtual void metrics(std::string exposition) = 0;
  virtual OtlpLoss stop() = 0;
};

// Whether this build has the OTLP exporter (cudatrace --version says).
bool otlp_export_built();
// nullptr with `error` set when this build has no OTLP export.
std::unique_ptr<OtlpWriter> make_otlp_writer(const OtlpConfig& config, std::string& error);

}  // namespace cudatrace
