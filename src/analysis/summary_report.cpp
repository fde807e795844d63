#include "cudatrace/analysis/summary_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>


namespace cudatrace {
namespace {

std::vector<SummarySnapshot::Kernel> kernel_rows(const Activity& a) {
  std::vector<SummarySnapshot::Kernel> rows;
  for (const auto& [name, k] : a.kernels) {
    SummarySnapshot::Kernel row{name, k.short_name, k.launches, k.in_graphs, {k.shapes.begin(), k.shapes.end()}};
    std::stable_sort(row.shapes.begin(), row.shapes.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& x, const auto& y) { return x.launches + x.in_graphs > y.launches + y.in_graphs; });
  return rows;
}

}  // namespace

std::string SummaryReport::call_site(std::uint32_t pid, std::uint64_t caller) const {
  return names_.call_site && caller ? names_.call_site(pid, caller) : fmt::format("{:#x}", caller);
}

std::uint64_t SummaryReport::calls(const std::vector<ct_api_stats>& run) const {
  std::uint64_t n = 0;
  for (const ApiRow& r : api_rows(run, opts_.display)) n += r.stats.calls;
  return n;
}

InsightInput SummaryReport::insight_input(const std::vector<ct_api_stats>& run, std::uint64_t now_ns) const {
  InsightInput in;
  in.traced_s = double(now_ns - std::min(now_ns, opts_.start_ns)) / 1e9;
  // Runtime synchronisations nest driver ones: merge one layer, the runtime's when it has any.
  ct_api_stats per_layer[kLayerCount] = {};
  for (std::size_t id = 0; id < run.size(); ++id) {
    const Api* api = api_by_id(static_cast<std::uint16_t>(id));
    if (!api || !opts_.display.wants(*api)) continue;
    const Effect e = api->effect();
    if (e == Effect::StreamSync || e == Effect::EventSync || e == Effect::DeviceSync)
      add_stats(per_layer[static_cast<int>(api->layer())], run[id]);
  }
  const ct_api_stats& runtime = per_layer[static_cast<int>(Layer::Runtime)];
  in.syncs = runtime.calls ? runtime : per_layer[static_cast<int>(Layer::Driver)];
  const Activity& whole_run = pipeline_.run_activity();
  in.launches = whole_run.launches;
  in.launch_span_ns = whole_run.last_launch_ns - whole_run.first_launch_ns;
  in.transfers = whole_run.transfers;
  for (const auto& [key, site] : pipeline_.memory().churn()) {
    const auto& [pid, caller, bytes] = key;
    in.churn.push_back({call_site(pid, caller), bytes, site});
  }
  return in;
}

namespace {
// Whether an insight's numbers come from call records (and so fall short
// when records are lost): all but those read from the BPF counters.
bool rests_on_records(const Insight& i, bool activity_counted) {
  if (i.rule == "sync-storm") return false;  // the per-API statistics
  if (activity_counted && (i.rule == "launch-bound" || i.rule == "pageable-copies" || i.rule == "tiny-transfers"))
    return false;
  return true;
}
}  // namespace

SummarySnapshot SummaryReport::snapshot(const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final,
                                        std::optional<CostReport> cost, const Sampling* sampling,
                                        std::uint64_t records_lost) {
  if (previous_.empty()) {
    previous_.assign(run.size(), ct_api_stats{});
    previous_ns_ = opts_.start_ns;
  }
  SummarySnapshot s;
  s.sampling = sampling;
  s.final = final;
  s.now_ns = now_ns;
  s.start_ns = opts_.start_ns;
  const std::uint64_t from_ns = final ? opts_.start_ns : previous_ns_;
  s.covered_ns = now_ns - std::min(now_ns, from_ns);
  s.tables = opts_.tables;
  s.with_insights = opts_.tables || opts_.insights;
  s.hist = opts_.hist;
  s.cost = std::move(cost);
  s.records_lost = records_lost;
  s.activity_counted = opts_.activity_counted;

  std::vector<ct_api_stats> shown = run;
  if (!final)
    for (std::size_t id = 0; id < run.size() && id < previous_.size(); ++id) shown[id] = stats_since(run[id], previous_[id]);
  s.apis = api_rows(shown, opts_.display);
  const Activity& activity = final ? pipeline_.run_activity() : pipeline_.window_activity();
  s.kernels = kernel_rows(activity);
  s.transfers = activity.transfers;
  const MemoryTracker& memory = pipeline_.memory();
  s.memory.assign(memory.devices().begin(), memory.devices().end());
  s.untracked = memory.untracked();
  if (final && opts_.tables && !s.leaks_unknown()) {
    for (const Allocation* a : memory.outstanding()) {
      SummarySnapshot::Leak leak{*a, call_site(a->pid, a->caller), {}};
      if (names_.stack && !a->stack.empty()) leak.stack = names_.stack(a->pid, a->stack);
      s.leaks.push_back(std::move(leak));
    }
  }
  if (opts_.collectives) s.collectives = &pipeline_.nccl();
  if (final) s.by_range = pipeline_.by_range();
  for (const auto& a : pipeline_.facet_analyses())
    if (std::shared_ptr<const SummaryPart> part = a->part({memory, final, records_lost}))
      if (opts_.tables || part->place() != SummaryPlace::Tables) s.parts.push_back(std::move(part));
  if (s.with_insights) {
    s.insights = find_insights(insight_input(run, now_ns), opts_.thresholds);
    if (opts_.collectives)
      for (Insight& i : nccl_insights(pipeline_.nccl().skew())) s.insights.push_back(std::move(i));
  }
  if (const GpuTimeTracker* gpu_time = pipeline_.gpu_time()) {
    s.gpu_time = gpu_time->report();
    if (s.with_insights)
      for (Insight& i : gpu_time_insights(*s.gpu_time)) s.insights.push_back(std::move(i));
  }
  if (records_lost)
    for (Insight& i : s.insights)
      if (rests_on_records(i, opts_.activity_counted)) {
        i.message += fmt::format(" (incomplete: {} call records were lost)", records_lost);
        i.numbers.emplace_back("records_lost", double(records_lost));
      }
  if (!final) {
    s.interval = ++intervals_;
    previous_ = run;
    previous_ns_ = now_ns;
    pipeline_.start_window();  // after the window's tables were copied above
  }
  return s;
}

}  // namespace cudatrace
