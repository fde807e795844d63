// --by-span: CUDA work per OpenTelemetry trace and span attribute (span_summary.h).
#include "cudatrace/analysis/span_summary.h"

#include <algorithm>

#include "cudatrace/decode/transfer.h"

namespace cudatrace {

bool is_synchronisation(const Call& c) {
  const Effect e = c.api->effect();
  return e == Effect::StreamSync || e == Effect::EventSync || e == Effect::DeviceSync;
}

void SpanSummary::on_call(const Call& c) {
  // Outermost calls only, as --by-range: nested driver calls are part of their runtime call.
  if (c.unfinished || c.depth != 0 || c.api->layer() == Layer::Nvtx) return;
  const std::uint64_t launches = c.counted() && c.api->effect() == Effect::Launch;
  const std::uint64_t bytes = c.counted() && c.api->effect() == Effect::Copy ? role_bytes(c) : 0;
  const std::uint64_t sync_ns = is_synchronisation(c) ? c.dur_ns : 0;
  auto add = [&](Stats& s) {
    s.calls++;
    s.api_ns += c.dur_ns;
    s.launches += launches;
    s.sync_ns += sync_ns;
    s.bytes += bytes;
  };
  if (!c.has_span) {
    add(outside_);
    return;
  }
  add(traces_[hex_id(c.span.trace_id.data(), c.span.trace_id.size())]);
  for (const SpanAttr& a : parse_span_attrs(c.span.attrs))
    add(attributes_[span_key_name(c.otel, a.key) + "=" + std::string(a.value)]);
}

std::vector<std::pair<const std::string*, const SpanSummary::Stats*>> SpanSummary::top(
    const std::map<std::string, Stats>& m, std::size_t limit) {
  std::vector<std::pair<const std::string*, const Stats*>> rows;
  for (const auto& [name, s] : m) rows.push_back({&name, &s});
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second->api_ns > b.second->api_ns; });
  if (rows.size() > limit) rows.resize(limit);
  return rows;
}

}  // namespace cudatrace
