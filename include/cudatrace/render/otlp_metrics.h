// --otlp with --prometheus: the node exporter's metrics as OTLP metrics,
// converted from the exposition /metrics serves, so that both say the same
// values (docs/otlp.md, "Metrics"). Part of the OTLP exporter's build.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace opentelemetry::proto::metrics::v1 {
class ScopeMetrics;
}

namespace cudatrace {

// The OTLP name of a Prometheus family: a counter without its "_total"
// (OTLP's Prometheus exporters add it back); others as they are.
std::string otlp_metric_name(std::string_view prometheus_name, std::string_view type);

// Adds every family of `exposition` (Prometheus text format) to `out`:
// counters as cumulative monotonic sums from `start_unix_ns`, gauges,
// histograms (cumulative, their buckets made non-cumulative), each series'
// labels as attributes. False if a line could not be read (the rest is kept).
bool exposition_to_otlp(std::string_view exposition, std::uint64_t start_unix_ns, std::uint64_t now_unix_ns,
                        opentelemetry::proto::metrics::v1::ScopeMetrics& out);

}  // namespace cudatrace
