#include "cudatrace/render/range_summary.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"

namespace cudatrace {

void append_range_summary(fmt::memory_buffer& out, const RangeSummary& summary, bool json) {
  using Stats = RangeSummary::Stats;
  std::vector<std::pair<const std::string*, const Stats*>> rows;
  for (const auto& [name, s] : summary.ranges()) rows.push_back({&name, &s});
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second->total_api_ns > b.second->total_api_ns;
  });
  auto it = std::back_inserter(out);
  if (json) {
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
    return;
  }
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

}  // namespace cudatrace
