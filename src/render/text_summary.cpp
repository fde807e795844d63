// The summary as text tables, in nsys's layout (docs/summary.md): the text
// format's summary (text_writer.cpp has its trace lines).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>

#include "cudatrace/render/format.h"
#include "cudatrace/render/gpu_time.h"
#include "cudatrace/render/summary_parts.h"
#include "cudatrace/render/text.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

std::string shape_text(const std::array<std::uint32_t, 6>& s) {
  return fmt::format("({},{},{})x({},{},{})", s[0], s[1], s[2], s[3], s[4], s[5]);
}

void append_apis(Buf& out, const SummarySnapshot& s) {
  Table api{{"Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
             "P99 (ns)", "Errors", "Name"},
            {false, false, false, false, false, false, false, false, false, false, true},
            {}};
  for (const ApiRow& r : s.apis)
    api.rows.push_back({fmt::format("{:.1f}", r.time_pct), group_digits(std::uint64_t(r.stats.total_ns)),
                        (s.sampling && s.sampling->estimated(r.api->id) ? "~" : "") + group_digits(r.stats.calls),
                        group_tenths(r.avg_ns), group_tenths(r.med_ns),
                        group_digits(r.stats.min_ns), group_digits(r.stats.max_ns), group_tenths(r.stddev_ns),
                        group_tenths(r.p99_ns), group_digits(r.stats.errors), r.api->symbol});
  out.append(std::string_view("\nCUDA API summary:\n\n"));
  append_lines(out, api.lines());
  // Said where Min/Max do not add up with the run's (docs/summary.md, "Histogram and precision").
  if (!s.final && !s.apis.empty())
    out.append(std::string_view(
        "\nThis interval's calls only. Min and Max are exact when they are the run's extremes so far, else the\n"
        "bounds of the latency bucket that holds them.\n"));
  if (s.sampling && s.sampling->any_estimated())
    fmt::format_to(std::back_inserter(out),
                   "\n~ estimated (--max-overhead): traced in sampled windows that saw about {:.2f} % of their calls; "
                   "their counts and times, and the launch counts below, are scaled up\n",
                   100 * s.sampling->mean_ratio());
}

void append_kernels(Buf& out, const SummarySnapshot& s, bool full_names) {
  // The "In graphs" column only for a program that launched graphs: the others' table stays as it was.
  const bool graphs = std::any_of(s.kernels.begin(), s.kernels.end(), [](const auto& k) { return k.in_graphs > 0; });
  Table kernels{{"Launches", "Shapes", "Grid x Block (launches)", "Name"}, {false, false, true, true}, {}};
  if (graphs) {
    kernels.headers.insert(kernels.headers.begin() + 1, "In graphs");
    kernels.left.insert(kernels.left.begin() + 1, false);
  }
  for (const SummarySnapshot::Kernel& k : s.kernels) {
    std::string shapes;
    for (std::size_t i = 0; i < k.shapes.size() && i < 3; ++i)
      shapes += fmt::format("{}{} ({})", i ? ", " : "", shape_text(k.shapes[i].first), k.shapes[i].second);
    if (k.shapes.size() > 3) shapes += fmt::format(", +{} more", k.shapes.size() - 3);
    kernels.rows.push_back({group_digits(k.launches), group_digits(std::uint64_t(k.shapes.size())),
                            shapes.empty() ? "-" : shapes, terminal_safe(full_names ? k.name : k.short_name)});
    if (graphs) kernels.rows.back().insert(kernels.rows.back().begin() + 1, group_digits(k.in_graphs));
  }
  append_section(out, "CUDA kernel launches", kernels);
  if (!s.activity_counted) append_lost_note(out, s);
}

void append_transfers(Buf& out, const SummarySnapshot& s) {
  Table transfers{{"Direction", "Count", "Total (B)", "Avg (B)", "Sync", "Sync Time (ns)", "Sync GB/s", "Pageable",
                   "Tiny"},
                  {true, false, false, false, false, false, false, false, false},
                  {}};
  for (int d = 0; d < kDirections; ++d) {
    const TransferStats& t = s.transfers[d];
    if (!t.count) continue;
    const bool host = d == static_cast<int>(Direction::HtoD) || d == static_cast<int>(Direction::DtoH);
    transfers.rows.push_back(
        {direction_name(static_cast<Direction>(d)), group_digits(t.count), group_digits(t.bytes),
         group_tenths(double(t.bytes) / double(t.count)), group_digits(t.sync_count), group_digits(t.sync_ns),
         t.sync_ns ? fmt::format("{:.3f}", double(t.sync_bytes) / double(t.sync_ns)) : "-",
         host ? group_digits(t.pageable) : "-", host ? group_digits(t.tiny) : "-"});
  }
  append_section(out, "CUDA transfers", transfers);
  if (!s.activity_counted) append_lost_note(out, s);
}

void append_memory(Buf& out, const SummarySnapshot& s) {
  Table memory{{"PID", "Device", "Live (B)", "Peak (B)", "Peak At (s)", "Allocs", "Frees", "Managed Live (B)",
                "Managed Peak (B)"},
               {false, false, false, false, false, false, false, false, false},
               {}};
  for (const auto& [key, m] : s.memory)
    memory.rows.push_back({std::to_string(key.first), std::to_string(key.second), group_digits(m.live_bytes),
                           group_digits(m.peak_bytes),
                           m.peak_ts_ns ? fmt::format("{:.6f}", s.since_start_s(m.peak_ts_ns)) : "-",
                           group_digits(m.allocs), group_digits(m.frees), group_digits(m.managed_live_bytes),
                           group_digits(m.managed_peak_bytes)});
  append_section(out, "Device memory", memory);
  append_lost_note(out, s);
  // Only for programs that asked: the table above stays as it was for the others.
  Table reported{{"PID", "Device", "Free (B)", "Total (B)", "At (s)"}, {false, false, false, false, false}, {}};
  for (const auto& [key, m] : s.memory)
    if (m.reported_ts_ns)
      reported.rows.push_back({std::to_string(key.first), std::to_string(key.second),
                               group_digits(m.reported_free_bytes), group_digits(m.reported_total_bytes),
                               fmt::format("{:.6f}", s.since_start_s(m.reported_ts_ns))});
  if (!reported.rows.empty()) append_section(out, "Free device memory, as the program last asked (cudaMemGetInfo)", reported);
}

void append_leaks(Buf& out, const SummarySnapshot& s) {
  auto it = std::back_inserter(out);
  if (s.leaks_unknown()) {  // a listed allocation may have been freed by a call whose record was lost
    fmt::format_to(it,
                   "\nAllocations never freed: not listed: {} call records were lost, perhaps frees of allocations "
                   "that would be listed\n",
                   group_digits(s.records_lost));
    return;
  }
  std::uint64_t leaked = 0;
  for (const SummarySnapshot::Leak& l : s.leaks) leaked += l.allocation.bytes;
  fmt::format_to(it, "\nAllocations never freed: {} ({} bytes)\n", s.leaks.size(), group_digits(leaked));
  if (s.untracked.allocations)
    fmt::format_to(it,
                   "  and {} older allocations ({} bytes) not listed: over {} tracked at once; if freed, the live "
                   "counts above still hold them\n",
                   group_digits(s.untracked.allocations), group_digits(s.untracked.bytes), MemoryTracker::kMaxLive);
  if (s.untracked.churn_pairs)
    fmt::format_to(it, "  {} allocate/free pairs of call sites beyond the {} followed are not in the churn insight\n",
                   group_digits(s.untracked.churn_pairs), MemoryTracker::kMaxChurnSites);
  if (s.leaks.empty()) return;
  out.push_back('\n');
  Table table{{"PID", "Device", "Address", "Size (B)", "Age (s)", "Kind", "API", "Call Site"},
              {false, false, false, false, false, true, true, true},
              {}};
  for (const SummarySnapshot::Leak& l : s.leaks) {
    const Allocation& a = l.allocation;
    table.rows.push_back({std::to_string(a.pid), std::to_string(a.device), fmt::format("{:#x}", a.ptr),
                          group_digits(a.bytes), fmt::format("{:.3f}", double(s.now_ns - std::min(s.now_ns, a.ts_ns)) / 1e9),
                          a.managed ? "managed" : "device", a.api->symbol, terminal_safe(l.call_site)});
  }
  const std::vector<std::string> lines = table.lines();
  append_lines(out, {lines[0], lines[1]});
  for (std::size_t i = 0; i < s.leaks.size(); ++i) {
    append_lines(out, {lines[i + 2]});
    append_stack_text(out, s.leaks[i].stack, 6);
  }
}

void append_collectives_text(Buf& out, const NcclTracker& nccl) {
  if (nccl.collectives().empty()) return;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "\nNCCL collectives:\n\n");
  std::vector<std::vector<std::string>> rows;
  const std::vector<std::string> headers = {"Calls", "Total (B)", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                                            "Comm",  "Name"};
  for (const auto& [key, s] : nccl.collectives())
    rows.push_back({group_digits(s.calls), group_digits(s.bytes),
                    group_tenths(double(s.latency.total_ns) / double(s.latency.calls)),
                    group_tenths(percentile_ns(s.latency, 0.5)), group_digits(s.latency.min_ns),
                    group_digits(s.latency.max_ns), key.second ? nccl_id_text(key.second) : "unknown", key.first});
  std::vector<std::size_t> width(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) {
    width[c] = headers[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const bool left = c + 2 >= cells.size();  // Comm and Name
      if (c) s += "  ";
      s += left ? fmt::format("{:<{}}", cells[c], width[c]) : fmt::format("{:>{}}", cells[c], width[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::format_to(it, " {}\n", s);
  };
  line(headers);
  std::vector<std::string> rule;
  for (std::size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& r : rows) line(r);
  const RankSkew skew = nccl.skew();
  if (!skew.keys) return;
  fmt::format_to(it, "\nNCCL rank skew over {} collectives (spread med {} ns, p99 {} ns, max {} ns):\n\n",
                 group_digits(skew.keys), group_tenths(percentile_ns(skew.spread, 0.5)),
                 group_tenths(percentile_ns(skew.spread, 0.99)), group_digits(skew.spread.max_ns));
  fmt::format_to(it, " {:>8}  {:>5}  {:>10}  {:>14}\n", "PID", "Rank", "Last", "Lag (ns)");
  for (const auto& [who, r] : skew.ranks)
    fmt::format_to(it, " {:>8}  {:>5}  {:>10}  {:>14}\n", who.first, who.second >= 0 ? std::to_string(who.second) : "?",
                   group_digits(r.last), group_digits(r.lag_ns));
}

void append_ranges(Buf& out, const RangeSummary& summary) {
  using Stats = RangeSummary::Stats;
  const auto rows = summary.by_total_time();
  auto it = std::back_inserter(out);
  out.append(std::string_view("\nCUDA work per NVTX range (self: the innermost open range; total: anywhere on "
                              "the thread's range stack)\n"));
  fmt::format_to(it, "{:>12} {:>10} {:>10} {:>14} {:>12} {:>14}  {}\n", "Self ms", "Calls", "Launches", "Bytes copied",
                 "Total ms", "Total launches", "Range");
  auto row = [&](std::string_view name, const Stats& s, bool with_total) {
    fmt::format_to(it, "{:>12.3f} {:>10} {:>10} {:>14} ", s.api_ns / 1e6, s.calls, s.launches, s.bytes);
    if (with_total)
      fmt::format_to(it, "{:>12.3f} {:>14}  ", s.total_api_ns / 1e6, s.total_launches);
    else
      fmt::format_to(it, "{:>12} {:>14}  ", "-", "-");
    append_terminal_safe(out, name);  // the traced program's own string
    out.push_back('\n');
  };
  for (const auto& [name, s] : rows) row(*name, *s, true);
  row("(outside any range)", summary.outside(), false);
}

// bcc's print_log2_hist layout.
void append_histogram(Buf& out, const ApiRow& r) {
  const std::vector<std::uint64_t> rows = log2_rows(r.stats);
  unsigned idx_max = 0;
  std::uint64_t val_max = 0;
  for (unsigned i = 1; i < rows.size(); ++i) {
    if (rows[i]) idx_max = i;
    val_max = std::max(val_max, rows[i]);
  }
  if (!idx_max) return;
  auto it = std::back_inserter(out);
  const bool narrow = idx_max <= 32;
  const int stars = narrow ? 40 : 20;
  fmt::format_to(it, "\nAPI = {}\n", r.api->symbol);
  if (narrow)
    fmt::format_to(it, "     {:<19} : count     distribution\n", "nsecs");
  else
    fmt::format_to(it, "               {:<29} : count     distribution\n", "nsecs");
  for (unsigned i = 1; i <= idx_max; ++i) {
    const auto n = static_cast<int>(std::floor(double(stars) * double(rows[i]) / double(val_max)));
    const std::string bar(static_cast<std::size_t>(n), '*');
    if (narrow)
      fmt::format_to(it, "{:>10} -> {:<10} : {:<8} |{:<40}|\n", log2_row_low(i), log2_row_high(i), rows[i], bar);
    else
      fmt::format_to(it, "{:>20} -> {:<20} : {:<8} |{:<20}|\n", log2_row_low(i), log2_row_high(i), rows[i], bar);
  }
}

}  // namespace

void append_lost_note(Buf& out, const SummarySnapshot& s) {
  if (s.records_lost)
    fmt::format_to(std::back_inserter(out), "\n{} call records lost: this table is incomplete\n",
                   group_digits(s.records_lost));
}

void append_summary_text(Buf& out, const SummarySnapshot& s, bool full_names) {
  auto it = std::back_inserter(out);
  if (s.final)
    fmt::format_to(it, "cudatrace summary: {:.3f} s traced\n", s.covered_s());
  else
    fmt::format_to(it, "cudatrace interval {}: {:.3f} s, up to {:.3f} s\n", s.interval, s.covered_s(),
                   s.since_start_s(s.now_ns));
  const auto part_text = [&](const SummaryPart& part, const SummaryPartWriter& w) { w.text(out, part, s); };
  for_parts_at(s, SummaryPlace::Top, part_text);
  if (s.tables) {
    append_apis(out, s);
    append_kernels(out, s, full_names);
    append_transfers(out, s);
    append_memory(out, s);
    if (s.collectives && !s.collectives->collectives().empty()) {
      append_collectives_text(out, *s.collectives);
      append_lost_note(out, s);
    }
    if (s.final) append_leaks(out, s);
    for_parts_at(s, SummaryPlace::Tables, part_text);
  }
  if (s.gpu_time) {
    append_gpu_time_text(out, *s.gpu_time);
    append_lost_note(out, s);
  }
  if (s.with_insights) {
    out.append(std::string_view("\nInsights:\n\n"));
    if (s.insights.empty()) out.append(std::string_view(" none\n"));
    // Insights quote kernel names and call sites: the traced program's names.
    for (const Insight& i : s.insights) fmt::format_to(it, " - {}\n", terminal_safe(i.message));
  }
  if (s.hist) {
    out.append(std::string_view("\nLatency histograms:\n"));
    for (const ApiRow& r : s.apis) append_histogram(out, r);
  }
  if (s.cost && !s.cost->processes.empty()) {
    out.append(std::string_view("\nTracing cost so far:\n\n"));
    append_cost_text(out, *s.cost);
  }
  if (s.by_range) {
    append_ranges(out, *s.by_range);
    append_lost_note(out, s);
  }
  for_parts_at(s, SummaryPlace::End, part_text);
}

}  // namespace cudatrace
