// The --summary / --hist / --insights report: per-API table (from the BPF
// api_stats map), kernels, transfers, device memory, allocations never
// freed, insights and latency histograms, as text tables or one JSON line
// (docs/summary.md, docs/json.md).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cudatrace/analysis/insights.h"
#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/trace/overhead.h"
#include "cudatrace/decode/selection.h"
#include "cudatrace/record.h"
#include "cudatrace/analysis/summary.h"

namespace cudatrace {

class StackSymbolizer;

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
};

class Reporter {
 public:
  // Reports what `pipeline` found (its memory, kernel and transfer tables,
  // NCCL) with the per-API statistics. `stacks` names call sites and --stack
  // stacks; may be null (addresses only).
  Reporter(ReportOptions opts, Pipeline& pipeline, StackSymbolizer* stacks)
      : opts_(std::move(opts)), pipeline_(pipeline), stacks_(stacks) {}
  // Appends a report. `run` is api_stats summed over CPUs, indexed by API id,
  // as read now. An interval report covers the calls since the previous one
  // (memory and insights: the whole run so far); the final one covers the
  // whole run and lists the allocations never freed. `cost`: what tracing
  // has cost so far, if known.
  void report(fmt::memory_buffer& out, const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final,
              const CostReport* cost = nullptr);
  // Completed calls of displayed APIs in `run`.
  std::uint64_t calls(const std::vector<ct_api_stats>& run) const;

 private:
  InsightInput insight_input(const std::vector<ct_api_stats>& run, std::uint64_t now_ns) const;

  ReportOptions opts_;
  Pipeline& pipeline_;
  StackSymbolizer* stacks_;
  std::vector<ct_api_stats> previous_;  // api_stats at the last interval report
  std::uint64_t previous_ns_ = 0;
  int intervals_ = 0;
};

// Reads the per-CPU "api_stats" map (fd) and sums each API over CPUs.
bool read_api_stats(int map_fd, std::size_t apis, std::vector<ct_api_stats>& out);

// Reads the BPF "activity" map (record.h: ct_activity_key) incrementally:
// BPF never deletes an entry, and each read passes on what an entry counted
// since the previous read.
class ActivityReader {
 public:
  using Sink = std::function<void(const ct_activity_key&, const ct_activity&)>;
  // Calls `sink` for every entry that counted calls since the last read,
  // with those calls, except copies of page-locked generation `below_gen`
  // or later, which stay for a later read. Returns false if the map cannot
  // be read.
  bool read(int map_fd, std::uint64_t below_gen, const Sink& sink);

 private:
  struct KeyHash {
    std::size_t operator()(const ct_activity_key& k) const;
  };
  struct KeyEq {
    bool operator()(const ct_activity_key& a, const ct_activity_key& b) const;
  };
  std::unordered_map<ct_activity_key, ct_activity, KeyHash, KeyEq> seen_;
};

// "1,234,567" and (one decimal) "1,234.5", as nsys prints numbers.
std::string group_digits(std::uint64_t v);
std::string group_tenths(double v);

}  // namespace cudatrace
