#include "cudatrace/render/collectives.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "cudatrace/analysis/summary.h"
#include "cudatrace/render/format.h"

namespace cudatrace {

using Buf = fmt::memory_buffer;

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

}  // namespace cudatrace
