// The span facet's analyses (span_summary.h).
#include "cudatrace/analysis/span_summary.h"

#include <algorithm>

#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/decode/otel.h"
#include "cudatrace/decode/transfer.h"

namespace cudatrace {

bool is_synchronisation(const Call& c) {
  const Effect e = c.api->effect();
  return e == Effect::StreamSync || e == Effect::EventSync || e == Effect::DeviceSync;
}

void SpanSummary::on_displayed_call(const Call& c, const MemoryTracker&) {
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
  const CallSpan& cs = call_span(c);
  if (!cs.has_span) {
    add(outside_);
    return;
  }
  add(traces_[hex_id(cs.span.trace_id.data(), cs.span.trace_id.size())]);
  for (const SpanAttr& a : parse_span_attrs(cs.span.attrs))
    add(attributes_[span_key_name(cs.process, a.key) + "=" + std::string(a.value)]);
}

std::shared_ptr<const SummaryPart> SpanSummary::part(const SummaryPartInput& in) const {
  return in.final ? std::shared_ptr<const SummaryPart>(std::shared_ptr<void>(), this) : nullptr;
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

void ProcessResources::on_any_call(const Call& c) {
  const ProcessContext* ctx = call_span(c).process;
  if (!ctx || !ctx->published) return;
  auto [it, fresh] = seen_.try_emplace(c.pid, ctx->generation);
  if (!fresh && it->second == ctx->generation) return;
  it->second = ctx->generation;
  if (processes_.size() < kMaxListed || processes_.count(c.pid))
    processes_[c.pid] = ctx->resource;
  else if (fresh)
    ++unlisted_;
}

std::shared_ptr<const SummaryPart> ProcessResources::part(const SummaryPartInput&) const {
  return processes_.empty() ? nullptr : std::shared_ptr<const SummaryPart>(std::shared_ptr<void>(), this);
}

// --by-span's, with --summary.
std::unique_ptr<FacetAnalysis> make_span_summary(const PipelineOptions& opts) {
  return opts.by_span ? std::make_unique<SpanSummary>() : nullptr;
}

// Wherever calls carry spans.
std::unique_ptr<FacetAnalysis> make_process_resources(const PipelineOptions&) {
  return std::make_unique<ProcessResources>();
}

}  // namespace cudatrace
