// The span facet's summary parts (analysis/span_summary.h; docs/correlation.md):
// the processes' resources ("processes") and the work per span ("spans").
#include <iterator>

#include "cudatrace/analysis/span_summary.h"
#include "cudatrace/render/json.h"
#include "cudatrace/render/summary_parts.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

// process PID: key=value ...
void processes_text(Buf& out, const SummaryPart& part, const SummarySnapshot&) {
  const auto& p = static_cast<const ProcessResources&>(part);
  auto it = std::back_inserter(out);
  for (const auto& [pid, resource] : p.processes()) {
    fmt::format_to(it, "process {}:", pid);
    for (const auto& [k, v] : resource) {
      out.push_back(' ');
      append_terminal_safe(out, k);
      out.push_back('=');
      append_terminal_safe(out, v);
    }
    out.push_back('\n');
  }
  if (p.unlisted()) fmt::format_to(it, "{} more processes published a context (not listed)\n", p.unlisted());
}

// ,"processes":[{"pid":..,"resource":{..}}..](,"processes_unlisted":N)
void processes_json(Buf& out, const SummaryPart& part, const SummarySnapshot&) {
  const auto& p = static_cast<const ProcessResources&>(part);
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"processes\":["));
  bool first = true;
  for (const auto& [pid, resource] : p.processes()) {
    fmt::format_to(it, "{}{{\"pid\":{},\"resource\":{{", first ? "" : ",", pid);
    first = false;
    for (std::size_t i = 0; i < resource.size(); ++i) {
      if (i) out.push_back(',');
      append_json_string(out, resource[i].first);
      out.push_back(':');
      append_json_string(out, resource[i].second);
    }
    out.append(std::string_view("}}"));
  }
  out.push_back(']');
  if (p.unlisted()) fmt::format_to(it, ",\"processes_unlisted\":{}", p.unlisted());
}

void spans_text(Buf& out, const SummaryPart& part, const SummarySnapshot& s) {
  const auto& summary = static_cast<const SpanSummary&>(part);
  using Stats = SpanSummary::Stats;
  auto it = std::back_inserter(out);
  auto table = [&](std::string_view title, std::string_view what, const std::map<std::string, Stats>& m,
                   bool with_outside) {
    out.append(title);
    fmt::format_to(it, "{:>12} {:>10} {:>10} {:>12} {:>14}  {}\n", "API ms", "Calls", "Launches", "Sync ms",
                   "Bytes copied", what);
    auto row = [&](std::string_view name, const Stats& st) {
      fmt::format_to(it, "{:>12.3f} {:>10} {:>10} {:>12.3f} {:>14}  ", st.api_ns / 1e6, st.calls, st.launches,
                     st.sync_ns / 1e6, st.bytes);
      append_terminal_safe(out, name);  // the traced program's own strings
      out.push_back('\n');
    };
    for (const auto& [name, st] : SpanSummary::top(m, SpanSummary::kTopTraces)) row(*name, *st);
    if (m.size() > SpanSummary::kTopTraces)
      fmt::format_to(it, "{:>12} ({} more)\n", "...", m.size() - SpanSummary::kTopTraces);
    if (with_outside) row("(under no span)", summary.outside());
  };
  table("\nCUDA work per OpenTelemetry trace (top traces by API time)\n", "Trace", summary.traces(), true);
  if (!summary.attributes().empty())
    table("\nCUDA work per span attribute\n", "Attribute", summary.attributes(), false);
  append_lost_note(out, s);
}

// {"type":"spans",...}: a line of its own.
void spans_json(Buf& out, const SummaryPart& part, const SummarySnapshot&) {
  const auto& summary = static_cast<const SpanSummary&>(part);
  using Stats = SpanSummary::Stats;
  auto it = std::back_inserter(out);
  auto stats = [&](const Stats& s) {
    fmt::format_to(it, "\"calls\":{},\"api_ns\":{},\"launches\":{},\"sync_ns\":{},\"bytes\":{}}}", s.calls, s.api_ns,
                   s.launches, s.sync_ns, s.bytes);
  };
  auto rows = [&](const char* key, const std::map<std::string, Stats>& m) {
    fmt::format_to(it, ",\"{}\":[", key);
    bool first = true;
    for (const auto& [name, s] : SpanSummary::top(m, SpanSummary::kTopTraces)) {
      out.append(std::string_view(first ? "{\"name\":" : ",{\"name\":"));
      first = false;
      append_json_string(out, *name);
      out.push_back(',');
      stats(*s);
    }
    out.push_back(']');
  };
  out.append(std::string_view("{\"type\":\"spans\""));
  fmt::format_to(it, ",\"trace_count\":{}", summary.traces().size());
  rows("traces", summary.traces());
  rows("attributes", summary.attributes());
  out.append(std::string_view(",\"outside\":{"));
  stats(summary.outside());
  out.append(std::string_view("}\n"));
}

}  // namespace

const SummaryPartWriter& processes_writer() {
  static const SummaryPartWriter w{"processes", processes_text, processes_json};
  return w;
}

const SummaryPartWriter& spans_writer() {
  static const SummaryPartWriter w{"spans", spans_text, spans_json};
  return w;
}

}  // namespace cudatrace
