// What tracing cost and what it lost, as plain data: the record stage
// measures and counts it (record/cost.h, record/budget.h, the BPF
// counters), the analyses mark estimates by it, and the writers (render/)
// print it in the end line, the summaries and the metrics. Shared by every
// stage like bpf_abi.h, so that none of them includes another's workings.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cudatrace/bpf_abi.h"

namespace cudatrace {

// Records the kernel side dropped or could not pair (BPF counters, bpf_abi.h).
struct LossCounts {
  std::uint64_t ring_buffer = 0;     // records dropped: ring buffer full
  std::uint64_t thread_table = 0;    // calls not tracked: thread map full
  std::uint64_t depth_overflow = 0;  // calls not tracked: nesting too deep
  std::uint64_t unmatched = 0;       // frames skipped by longjmp/exceptions (not a loss of calls)
  std::uint64_t control = 0;         // loader/exit notifications dropped
  // A saved trace: the records its tracer could not write (lost_detail.output).
  std::uint64_t output = 0;
  // A trace's calls whose records the ring could not take, counted and timed
  // in BPF by API id: with the lines held they give exact per-API counts.
  std::map<std::uint16_t, ct_api_stats> ring_buffer_calls;
  // Call records lost in the kernel (unmatched frames and control records are not calls).
  std::uint64_t calls() const { return ring_buffer + thread_table + depth_overflow; }
  // Call records that tables built from records are missing.
  std::uint64_t records() const { return calls() + output; }
};

// Time one probe hit adds to the probed call, in ns: CPU time of the calling
// thread, which prices the hits, and wall-clock time, which is the same on
// bare metal but larger where a trap exits to a hypervisor that the guest's
// CPU accounting does not see.
struct ProbeCost {
  double entry_ns = 0;    // uprobe at the function's entry, on an instruction the kernel emulates
  double return_ns = 0;   // uretprobe at its return
  double stepped_ns = 0;  // uprobe on an instruction the kernel single-steps (target/prologue.h)
  double entry_wall_ns = 0, return_wall_ns = 0, stepped_wall_ns = 0;
};

struct ProcessCost {
  std::uint32_t pid = 0;
  std::string comm;
  std::uint64_t entry_hits = 0, return_hits = 0;
  std::uint64_t stepped_hits = 0;  // of entry_hits, on single-stepped probes
  double added_ns = 0;
  std::optional<std::uint64_t> cpu_ns;  // its CPU time (user + system) while traced, if known
  // Time it waited for a CPU that cudatrace's own threads held (record/cost.h:
  // waited_for_tracer); nullopt where the two do not contend.
  std::optional<double> waited_ns;
  std::uint64_t hits() const { return entry_hits + return_hits; }
};

// What --max-overhead's controller did (record/budget.h).
struct BudgetReport {
  double max_pct = 0;
  double safety_factor = 1;     // hits were priced at this many times the start-up measurement
  double attached_pct = 100;    // share of the time the hot probes were attached
  double estimated_cost_pct = 0;  // safety factor included
  double seen_ratio = 1;        // Sampling::mean_ratio
  std::uint64_t switches = 0;
  double attach_ms_max = 0, detach_ms_max = 0;  // wall-clock time of the slowest switch each way
  bool unreachable = false;
  std::vector<std::string> sampled_apis;  // attached hot APIs, marked estimated
};

struct CostReport {
  ProbeCost per_hit;
  double workload_factor = 1;  // hits were priced at this many times per_hit
  std::vector<ProcessCost> processes;  // most time added first
  std::optional<BudgetReport> budget;  // --max-overhead
};

// Which calls were counted exactly and which from sampled windows
// (--max-overhead): an API's count estimate is what was counted divided by
// its ratio.
class Sampling {
 public:
  // Fraction of an API's calls that were seen, in (0, 1]; 1: exact.
  double ratio(std::uint16_t api) const {
    const auto it = sampled_.find(api);
    return it == sampled_.end() ? 1.0 : it->second;
  }
  bool estimated(std::uint16_t api) const { return ratio(api) < 1.0; }
  bool any_estimated() const { return !sampled_.empty(); }
  // The mean ratio of the sampled APIs (1 if none).
  double mean_ratio() const {
    if (sampled_.empty()) return 1.0;
    double sum = 0;
    for (const auto& [api, ratio] : sampled_) sum += ratio;
    return sum / double(sampled_.size());
  }
  // Ratios below 1, by API id; every other API is exact.
  void set(const std::map<std::uint16_t, double>& sampled) {
    sampled_.clear();
    for (const auto& [api, ratio] : sampled)
      if (ratio < 1.0) sampled_[api] = ratio;
  }
  const std::map<std::uint16_t, double>& sampled() const { return sampled_; }

 private:
  std::map<std::uint16_t, double> sampled_;
};

// --otlp (render/otlp.h): the spans handed to the exporter and what became
// of them at exit.
struct OtlpLoss {
  std::uint64_t spans = 0;       // calls queued as spans
  std::uint64_t sent = 0;        // accepted by the Collector
  std::uint64_t queue_full = 0;  // dropped: the queue was full (the Collector was slow or down)
  std::uint64_t rejected = 0;    // answered with an error that is not retried (400, 401, ...)
  std::uint64_t unsent = 0;      // still queued or being retried when the exit timeout passed
  std::uint64_t metrics_sent = 0, metrics_failed = 0;  // --prometheus: metrics requests
  std::string last_error;        // the last failure ("HTTP 503", "Couldn't connect to server"), else empty
  std::uint64_t lost() const { return queue_full + rejected + unsent; }
};

// The end of a trace: the JSON end line, or text mode's lines on stderr.
struct EndStats {
  std::uint64_t calls = 0;       // calls written
  std::uint64_t unfinished = 0;  // calls that never returned
  LossCounts kernel;             // what the BPF side lost
  std::uint64_t lost_output = 0;  // records formatted but not written: the output's consumer fell behind,
  std::string output_failure;     // or writing failed: why ("writing F: No space left on device"), else empty
  std::optional<CostReport> cost;  // what tracing cost, if it was measured
  std::string empty_because;       // why nothing was traced, when nothing was ("this selection (-f launch) ...")
  // A trace: whether its lines and the lost calls counted by API (LossCounts::
  // ring_buffer_calls) together count every call exactly. Unset for a summary.
  std::optional<bool> counts_exact;
  std::optional<OtlpLoss> otlp;  // with --otlp: spans not sent (lost_detail.otlp_spans), not calls of the trace
  std::uint64_t lost() const { return kernel.calls() + lost_output; }
};

}  // namespace cudatrace
