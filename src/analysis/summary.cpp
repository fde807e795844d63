#include "cudatrace/analysis/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/streams.h"

namespace cudatrace {

std::vector<ApiRow> api_rows(const std::vector<ct_api_stats>& by_id, const Selection& display) {
  std::vector<ApiRow> rows;
  double total = 0;
  for (std::size_t id = 0; id < by_id.size(); ++id) {
    const Api* api = api_by_id(static_cast<std::uint16_t>(id));
    const ct_api_stats& s = by_id[id];
    if (!api || !s.calls || !display.wants(*api)) continue;
    rows.push_back({api, s, 0, double(s.total_ns) / double(s.calls), percentile_ns(s, 0.5), percentile_ns(s, 0.99),
                    stddev_ns(s)});
    total += double(s.total_ns);
  }
  for (ApiRow& r : rows) r.time_pct = total > 0 ? 100.0 * double(r.stats.total_ns) / total : 0;
  std::stable_sort(rows.begin(), rows.end(), [](const ApiRow& a, const ApiRow& b) {
    return a.stats.total_ns != b.stats.total_ns ? a.stats.total_ns > b.stats.total_ns : a.api->symbol < b.api->symbol;
  });
  return rows;
}

void Activity::on_call(const Call& c, const MemoryTracker& memory) {
  if (!c.counted() || c.captured) return;
  count(c, memory, {1, c.dur_ns, c.ts_ns, c.ts_ns});
}

void Activity::on_calls(const Call& c, const MemoryTracker& memory, const ct_activity& counted) {
  if (counted.calls) count(c, memory, counted);
}

void Activity::count(const Call& c, const MemoryTracker& memory, const ct_activity& counted) {
  const std::uint64_t n = counted.calls;
  const Effect effect = c.api->effect();
  if (effect == Effect::Launch) {
    launches += n;
    first_launch_ns =
        first_launch_ns ? std::min<std::uint64_t>(first_launch_ns, counted.first_ts_ns) : counted.first_ts_ns;
    last_launch_ns = std::max<std::uint64_t>(last_launch_ns, counted.last_ts_ns);
    if (c.graph && c.graph->known) {
      for (const StreamWork::Kernel& run : c.graph->work.kernels) {
        KernelStats& k = kernels[run.name];
        if (k.short_name.empty()) k.short_name = run.short_name;
        k.in_graphs += n * run.count;
      }
      if (c.graph->work.unlisted_launches) kernels["(other kernels in graphs)"].in_graphs += n * c.graph->work.unlisted_launches;
      return;
    }
    std::string name;
    if (c.kernel.empty())
      name = fmt::format("graph {:#x}", role_value(c, Role::Object).value_or(0));
    else if (c.kernel == "?")
      name = fmt::format("? {:#x}", c.kernel_handle);
    else
      name = std::string(c.kernel);
    KernelStats& k = kernels[name];
    if (k.short_name.empty()) k.short_name = c.kernel.empty() || c.kernel == "?" ? name : std::string(c.kernel_short);
    k.launches += n;
    std::vector<Dim3> dims;
    for (const NamedValue& a : c.args)
      if (const auto* d = std::get_if<Dim3>(&a.value)) dims.push_back(*d);
    if (dims.size() >= 2) k.shapes[{dims[0].x, dims[0].y, dims[0].z, dims[1].x, dims[1].y, dims[1].z}] += n;
    return;
  }
  if (effect != Effect::Copy && effect != Effect::Memset) return;
  const Direction dir = copy_direction(c);
  const std::uint64_t bytes = role_bytes(c);
  const bool sync = role_arg(c, Role::Stream) == nullptr;
  TransferStats& t = transfers[static_cast<int>(dir)];
  t.count += n;
  t.bytes += n * bytes;
  if (sync) {
    t.sync_count += n;
    t.sync_bytes += n * bytes;
    t.sync_ns += counted.total_ns;
  }
  if (dir != Direction::HtoD && dir != Direction::DtoH) return;
  std::vector<std::uint64_t> ptrs;  // dst, src
  for (const NamedValue& a : c.args)
    if (a.type == ArgType::Ptr) ptrs.push_back(std::get<Hex>(a.value).v);
  if (ptrs.size() >= 2 && !memory.pinned(c.pid, ptrs[dir == Direction::HtoD ? 1 : 0], bytes)) {
    t.pageable += n;
    t.pageable_bytes += n * bytes;
    t.pageable_async += sync ? 0 : n;
  }
  if (bytes < kTinyTransferBytes) {
    t.tiny += n;
    t.tiny_bytes += n * bytes;
  }
}

}  // namespace cudatrace
