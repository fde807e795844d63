// The summary as one JSON line of type "summary" (docs/json.md): the JSON
// format's summary (json_writer.cpp has its trace lines).
#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "cudatrace/json_fields.h"
#include "cudatrace/render/format.h"
#include "cudatrace/render/gpu_time.h"
#include "cudatrace/render/json.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/summary_parts.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

void append_apis(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"apis\":["));
  for (std::size_t i = 0; i < s.apis.size(); ++i) {
    const ApiRow& r = s.apis[i];
    fmt::format_to(it, "{}{{\"name\":\"{}\",\"layer\":\"{}\",\"calls\":{},\"errors\":{},\"total_ns\":{},\"time_pct\":",
                   i ? "," : "", r.api->symbol, layer_name(r.api->layer()), r.stats.calls, r.stats.errors,
                   r.stats.total_ns);
    append_json_number(out, r.time_pct, 2);
    for (auto [key, v] : {std::pair<const char*, double>{"avg_ns", r.avg_ns}, {"med_ns", r.med_ns}}) {
      fmt::format_to(it, ",\"{}\":", key);
      append_json_number(out, v, 1);
    }
    fmt::format_to(it, ",\"min_ns\":{},\"max_ns\":{},\"stddev_ns\":", r.stats.min_ns, r.stats.max_ns);
    append_json_number(out, r.stddev_ns, 1);
    out.append(std::string_view(",\"p99_ns\":"));
    append_json_number(out, r.p99_ns, 1);
    if (s.sampling && s.sampling->estimated(r.api->id))
      fmt::format_to(it, ",\"estimated\":true,\"seen_ratio\":{:.6f}", s.sampling->ratio(r.api->id));
    out.push_back('}');
  }
  out.push_back(']');
}

void append_kernels(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"kernels\":["));
  for (std::size_t i = 0; i < s.kernels.size(); ++i) {
    const SummarySnapshot::Kernel& k = s.kernels[i];
    out.append(std::string_view(i ? ",{\"name\":" : "{\"name\":"));
    append_json_string(out, k.name);
    out.append(std::string_view(",\"short_name\":"));
    append_json_string(out, k.short_name);
    fmt::format_to(it, ",\"launches\":{},\"in_graphs\":{},\"shapes\":[", k.launches, k.in_graphs);
    for (std::size_t j = 0; j < k.shapes.size(); ++j) {
      const auto& [d, n] = k.shapes[j];
      fmt::format_to(it, "{}{{\"grid\":[{},{},{}],\"block\":[{},{},{}],\"launches\":{}}}", j ? "," : "", d[0], d[1],
                     d[2], d[3], d[4], d[5], n);
    }
    out.append(std::string_view("]}"));
  }
  out.push_back(']');
}

void append_transfers(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"transfers\":["));
  bool first = true;
  for (int d = 0; d < kDirections; ++d) {
    const TransferStats& t = s.transfers[d];
    if (!t.count) continue;
    fmt::format_to(it,
                   "{}{{\"direction\":\"{}\",\"count\":{},\"bytes\":{},\"sync_count\":{},\"sync_bytes\":{},"
                   "\"sync_ns\":{},\"sync_gbps\":",
                   first ? "" : ",", direction_name(static_cast<Direction>(d)), t.count, t.bytes, t.sync_count,
                   t.sync_bytes, t.sync_ns);
    first = false;
    if (t.sync_ns)
      append_json_number(out, double(t.sync_bytes) / double(t.sync_ns), 3);
    else
      out.append(std::string_view("null"));
    fmt::format_to(it, ",\"pageable\":{},\"pageable_bytes\":{},\"pageable_async\":{},\"tiny\":{}}}", t.pageable,
                   t.pageable_bytes, t.pageable_async, t.tiny);
  }
  out.push_back(']');
}

void append_memory(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"memory\":["));
  bool first = true;
  for (const auto& [key, m] : s.memory) {
    fmt::format_to(it,
                   "{}{{\"pid\":{},\"device\":{},\"live_bytes\":{},\"peak_bytes\":{},\"peak_ts_ns\":{},"
                   "\"managed_live_bytes\":{},\"managed_peak_bytes\":{},\"allocs\":{},\"frees\":{}",
                   first ? "" : ",", key.first, key.second, m.live_bytes, m.peak_bytes, m.peak_ts_ns,
                   m.managed_live_bytes, m.managed_peak_bytes, m.allocs, m.frees);
    if (m.reported_ts_ns)
      fmt::format_to(it, ",\"reported_free_bytes\":{},\"reported_total_bytes\":{},\"reported_ts_ns\":{}",
                     m.reported_free_bytes, m.reported_total_bytes, m.reported_ts_ns);
    out.push_back('}');
    first = false;
  }
  out.push_back(']');
}

void append_leaks(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  if (s.leaks_unknown()) return;  // "incomplete" lists them: a lost record may have freed any
  out.append(std::string_view(",\"leaks\":["));
  for (std::size_t i = 0; i < s.leaks.size(); ++i) {
    const Allocation& a = s.leaks[i].allocation;
    fmt::format_to(it,
                   "{}{{\"pid\":{},\"device\":{},\"ptr\":\"{:#x}\",\"bytes\":{},\"managed\":{},\"api\":\"{}\","
                   "\"ts_ns\":{},\"age_ns\":{},\"caller\":\"{:#x}\"",
                   i ? "," : "", a.pid, a.device, a.ptr, a.bytes, a.managed, a.api->symbol, a.ts_ns,
                   s.now_ns - std::min(s.now_ns, a.ts_ns), a.caller);
    if (!a.stack.empty()) {
      out.append(std::string_view(",\"stack\":"));
      append_stack_json(out, s.leaks[i].stack);
    }
    out.push_back('}');
  }
  out.push_back(']');
  if (s.untracked.allocations)
    fmt::format_to(it, ",\"leaks_not_listed\":{{\"count\":{},\"bytes\":{}}}", s.untracked.allocations,
                   s.untracked.bytes);
  if (s.untracked.churn_pairs) fmt::format_to(it, ",\"churn_pairs_not_followed\":{}", s.untracked.churn_pairs);
}

void append_insights(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"insights\":["));
  for (std::size_t i = 0; i < s.insights.size(); ++i) {
    const Insight& insight = s.insights[i];
    fmt::format_to(it, "{}{{\"rule\":\"{}\",\"message\":", i ? "," : "", insight.rule);
    append_json_string(out, insight.message);
    out.append(std::string_view(",\"numbers\":{"));
    for (std::size_t k = 0; k < insight.numbers.size(); ++k) {
      fmt::format_to(it, "{}\"{}\":", k ? "," : "", insight.numbers[k].first);
      append_json_number(out, insight.numbers[k].second, 3);
    }
    out.append(std::string_view("}}"));
  }
  out.push_back(']');
}

void append_collectives_json(Buf& out, const NcclTracker& nccl) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"collectives\":["));
  bool first = true;
  for (const auto& [key, s] : nccl.collectives()) {
    fmt::format_to(it, "{}{{\"name\":\"{}\",\"comm_id\":", first ? "" : ",", key.first);
    first = false;
    if (key.second)
      fmt::format_to(it, "\"{}\"", nccl_id_text(key.second));
    else
      out.append(std::string_view("null"));
    fmt::format_to(it, ",\"calls\":{},\"bytes\":{},\"avg_ns\":{:.1f},\"med_ns\":{:.1f},\"min_ns\":{},\"max_ns\":{}}}",
                   s.calls, s.bytes, double(s.latency.total_ns) / double(s.latency.calls),
                   percentile_ns(s.latency, 0.5), s.latency.min_ns, s.latency.max_ns);
  }
  const RankSkew skew = nccl.skew();
  fmt::format_to(it, "],\"rank_skew\":{{\"keys\":{},\"spread_med_ns\":{:.1f},\"spread_p99_ns\":{:.1f},\"spread_max_ns\":{},"
                     "\"ranks\":[",
                 skew.keys, percentile_ns(skew.spread, 0.5), percentile_ns(skew.spread, 0.99), skew.spread.max_ns);
  first = true;
  for (const auto& [who, r] : skew.ranks) {
    fmt::format_to(it, "{}{{\"pid\":{},\"rank\":", first ? "" : ",", who.first);
    first = false;
    if (who.second >= 0)
      fmt::format_to(it, "{}", who.second);
    else
      out.append(std::string_view("null"));
    fmt::format_to(it, ",\"last\":{},\"lag_ns\":{}}}", r.last, r.lag_ns);
  }
  out.append(std::string_view("]}"));
}

void append_ranges_line(Buf& out, const RangeSummary& summary) {
  using Stats = RangeSummary::Stats;
  const auto rows = summary.by_total_time();
  auto it = std::back_inserter(out);
  out.append(std::string_view("{\"type\":\"nvtx_ranges\",\"ranges\":["));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Stats& s = *rows[i].second;
    out.append(std::string_view(i ? ",{\"name\":" : "{\"name\":"));
    append_json_string(out, *rows[i].first);
    fmt::format_to(it,
                   ",\"calls\":{},\"api_ns\":{},\"launches\":{},\"bytes\":{},\"total_calls\":{},"
                   "\"total_api_ns\":{},\"total_launches\":{}}}",
                   s.calls, s.api_ns, s.launches, s.bytes, s.total_calls, s.total_api_ns, s.total_launches);
  }
  fmt::format_to(it, "],\"outside\":{{\"calls\":{},\"api_ns\":{},\"launches\":{},\"bytes\":{}}}}}\n",
                 summary.outside().calls, summary.outside().api_ns, summary.outside().launches, summary.outside().bytes);
}

void append_histograms(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"histograms\":["));
  for (std::size_t i = 0; i < s.apis.size(); ++i) {
    const std::vector<std::uint64_t> rows = log2_rows(s.apis[i].stats);
    fmt::format_to(it, "{}{{\"name\":\"{}\",\"buckets\":[", i ? "," : "", s.apis[i].api->symbol);
    bool first = true;
    for (unsigned r = 1; r < rows.size(); ++r) {
      if (!rows[r]) continue;
      fmt::format_to(it, "{}{{\"low\":{},\"high\":{},\"count\":{}}}", first ? "" : ",", log2_row_low(r),
                     log2_row_high(r), rows[r]);
      first = false;
    }
    out.append(std::string_view("]}"));
  }
  out.push_back(']');
}

// ,"records_lost":N,"incomplete":[...]: the parts of this report built from
// call records, which fall short when records were lost (docs/json.md).
void append_incomplete(Buf& out, const SummarySnapshot& s) {
  std::vector<std::string_view> parts;
  if (s.tables) {
    if (!s.activity_counted) parts.insert(parts.end(), {"kernels", "transfers"});
    parts.push_back("memory");
    if (s.final) parts.push_back("leaks");
    for (const auto& part : s.parts)
      if (part->place() == SummaryPlace::Tables && part->from_records()) parts.push_back(part->name());
    if (s.collectives && !s.collectives->collectives().empty()) parts.push_back("collectives");
  }
  if (s.gpu_time) parts.push_back("gpu_time");
  if (s.with_insights) parts.push_back("insights");
  if (s.by_range) parts.push_back("ranges");
  for (const auto& part : s.parts)
    if (part->place() == SummaryPlace::End && part->from_records()) parts.push_back(part->name());
  fmt::format_to(std::back_inserter(out), ",\"records_lost\":{},\"incomplete\":[", s.records_lost);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out.push_back(',');
    append_json_string(out, parts[i]);
  }
  out.push_back(']');
}

}  // namespace

void append_summary_json(Buf& out, const SummarySnapshot& s) {
  fmt::format_to(std::back_inserter(out), "{{{}\"{}\",\"final\":{},\"ts_ns\":{},\"covered_ns\":{}",
                 json_fields::kType.first_key(), json_fields::kSummary, s.final, s.now_ns, s.covered_ns);
  if (s.records_lost) append_incomplete(out, s);
  const auto part_json = [&](const SummaryPart& part, const SummaryPartWriter& w) { w.json(out, part, s); };
  for_parts_at(s, SummaryPlace::Top, part_json);
  if (s.tables) {
    append_apis(out, s);
    append_kernels(out, s);
    append_transfers(out, s);
    append_memory(out, s);
    if (s.final) append_leaks(out, s);
    for_parts_at(s, SummaryPlace::Tables, part_json);
    if (s.collectives) append_collectives_json(out, *s.collectives);
  }
  if (s.gpu_time) append_gpu_time_json(out, *s.gpu_time);
  if (s.with_insights) append_insights(out, s);
  if (s.hist) append_histograms(out, s);
  if (s.cost) {
    out.append(std::string_view(",\"overhead\":"));
    append_cost_json(out, *s.cost);
  }
  out.append(std::string_view("}\n"));
  if (s.by_range) append_ranges_line(out, *s.by_range);
  for_parts_at(s, SummaryPlace::End, part_json);
}

}  // namespace cudatrace
