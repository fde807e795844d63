// The --summary / --hist / --insights report: per-API table (from the BPF
// api_stats map), kernels, transfers, device memory, allocations never
// freed, insights and latency histograms, as text tables or one JSON line
// (docs/summary.md, docs/json.md). The content is the analysis stage's
// snapshot (analysis/summary_report.h); this picks its renderer.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "cudatrace/analysis/summary_report.h"
#include "cudatrace/render/format.h"

namespace cudatrace {

class Reporter {
 public:
  // Reports what `pipeline` found; `stacks` names call sites and --stack
  // stacks, and may be null (addresses only).
  Reporter(ReportOptions opts, Pipeline& pipeline, StackSymbolizer* stacks) : summary_(std::move(opts), pipeline, stacks) {}

  // Appends a report (SummaryReport::snapshot says what it covers). `cost`:
  // what tracing has cost so far, if known.
  void report(fmt::memory_buffer& out, const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final,
              const CostReport* cost = nullptr);
  // Completed calls of displayed APIs in `run`.
  std::uint64_t calls(const std::vector<ct_api_stats>& run) const { return summary_.calls(run); }
  // --max-overhead: which APIs' counts are estimates (trace/budget.h), marked.
  void set_sampling(const Sampling* sampling) { summary_.set_sampling(sampling); }

 private:
  SummaryReport summary_;
};

}  // namespace cudatrace
