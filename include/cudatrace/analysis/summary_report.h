// The summary report's content (--summary, --hist, --insights), as one
// snapshot: what the text and the JSON renderers (render/text_summary.cpp,
// render/json_summary.cpp) print, computed once. The per-API statistics
// come from BPF (or, for `cudatrace report`, from the trace); the rest from
// the pipeline.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/analysis/gpu_time.h"
#include "cudatrace/analysis/insights.h"
#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/analysis/summary.h"
#include "cudatrace/decode/selection.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/stack_frame.h"

namespace cudatrace {

struct ReportOptions {
  Selection display;        // APIs shown
  bool tables = false;      // --summary: APIs, kernels, transfers, memory, leaks, insights
  bool hist = false;        // --hist
  bool insights = false;    // --insights (also part of tables)
  bool json = false;
  std::uint64_t start_ns = 0;  // CLOCK_MONOTONIC time shown as 0
  InsightThresholds thresholds;
  bool full_names = false;  // text tables: kernels by their whole demangled names
  bool collectives = false;  // the NCCL collectives table and the rank-skew insight
  // Launches, copies and memsets are counted in BPF (RecordsNeeded::
  // counted_activity): their tables are exact even when records are lost.
  bool activity_counted = false;
};

struct SummarySnapshot {
  bool final = false;         // the whole run, at exit; else an interval (-i)
  int interval = 0;           // intervals: 1, 2, ...
  std::uint64_t now_ns = 0;   // CLOCK_MONOTONIC
  std::uint64_t covered_ns = 0;  // time the report covers (intervals: since the previous one)
  std::uint64_t start_ns = 0;    // tracing start (time 0)

  // What the report holds: the tables (--summary), insights, histograms.
  bool tables = false, with_insights = false, hist = false;

  std::vector<ApiRow> apis;  // largest total time first

  struct Kernel {
    std::string name, short_name;
    std::uint64_t launches = 0;
    std::uint64_t in_graphs = 0;  // run by graph launches (KernelStats::in_graphs)
    std::vector<std::pair<std::array<std::uint32_t, 6>, std::uint64_t>> shapes;  // most launched first
  };
  std::vector<Kernel> kernels;  // most run first (launches and in graphs)
  std::array<TransferStats, kDirections> transfers{};
  std::vector<std::pair<MemoryTracker::DeviceKey, DeviceMemory>> memory;

  // Call records lost so far (ring buffer full, untracked threads, lines
  // a saved trace's tracer could not write). The tables built from records
  // (memory, the facet analyses' parts, and launches and transfers unless
  // activity_counted) are then incomplete and say so; allocations never
  // freed are not listed (the lost records may be their frees), nor are
  // the Python call sites' bytes never freed.
  std::uint64_t records_lost = 0;
  bool activity_counted = false;  // ReportOptions::activity_counted
  bool leaks_unknown() const { return final && records_lost; }

  // Final report only: allocations never freed, largest first.
  struct Leak {
    Allocation allocation;
    std::string call_site;          // symbolised when known, else the address
    std::vector<StackFrame> stack;  // with --stack
  };
  std::vector<Leak> leaks;
  MemoryTracker::Untracked untracked;

  const NcclTracker* collectives = nullptr;  // with collectives
  const RangeSummary* by_range = nullptr;    // final report with --by-range
  // The parts of the facets' analyses (facet_analysis.h), in the pipeline's
  // order: the tables by Python call site, the processes' resources, the work per span.
  std::vector<std::shared_ptr<const SummaryPart>> parts;
  std::vector<Insight> insights;
  std::optional<GpuTimeReport> gpu_time;  // --gpu-time: the whole run so far
  std::optional<CostReport> cost;  // interval reports: what tracing has cost so far, if known
  // --max-overhead: which APIs' counts are estimates from sampled windows;
  // null: every count is exact.
  const Sampling* sampling = nullptr;

  double covered_s() const { return double(covered_ns) / 1e9; }
  // Seconds since tracing started, of a CLOCK_MONOTONIC time.
  double since_start_s(std::uint64_t ts_ns) const { return double(ts_ns - std::min(ts_ns, start_ns)) / 1e9; }
};

// Keeps what an interval report needs of the previous one and builds the
// snapshots.
class SummaryReport {
 public:
  SummaryReport(ReportOptions opts, Pipeline& pipeline, SiteNames names)
      : opts_(std::move(opts)), pipeline_(pipeline), names_(std::move(names)) {}

  // `run` is api_stats summed over CPUs, indexed by API id, as read now. An
  // interval snapshot covers the calls since the previous one (memory and
  // insights: the whole run so far) and starts the next interval; the final
  // one covers the whole run and lists the allocations never freed.
  // `sampling` (--max-overhead) says which counts are estimates; null: all exact.
  // `records_lost`: call records lost so far (LossCounts::records()).
  SummarySnapshot snapshot(const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final,
                           std::optional<CostReport> cost, const Sampling* sampling, std::uint64_t records_lost = 0);
  // Completed calls of displayed APIs in `run`.
  std::uint64_t calls(const std::vector<ct_api_stats>& run) const;
  const ReportOptions& options() const { return opts_; }

 private:
  InsightInput insight_input(const std::vector<ct_api_stats>& run, std::uint64_t now_ns) const;
  std::string call_site(std::uint32_t pid, std::uint64_t caller) const;

  ReportOptions opts_;
  Pipeline& pipeline_;
  SiteNames names_;
  std::vector<ct_api_stats> previous_;  // api_stats at the last interval report
  std::uint64_t previous_ns_ = 0;
  int intervals_ = 0;
};

}  // namespace cudatrace
