// The analysis stage: every decoded call goes through here once, and each
// analysis sees it once, in this order:
//   1. the stream model (short handle ids, what synchronisations waited for,
//      the pageable-copy check against the page-locked registry);
//   2. NVTX ranges (--nvtx: the ranges each call was made in);
//   3. NCCL (communicator, rank and sequence of each collective), and
//      failed launches (the first of each cause in a process is told);
//   then, for calls of displayed APIs only (the ones the outputs show):
//   4. memory accounting, which owns the one page-locked registry (that
//      registry follows every call: a copy is judged by allocations that
//      are not shown too);
//   5. the per-range summary (--by-range) and the kernel and transfer
//      tables (summary mode);
//   6. the facets' analyses (facet_analysis.h), which also see every call
//      after the stream model.
// What one call did is returned for the writers (render/writer.h). Analyses
// count an operation once, at its outermost call (Call::counted).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "cudatrace/analysis/gpu_time.h"
#include "cudatrace/analysis/launch_failures.h"
#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/analysis/summary.h"
#include "cudatrace/analysis/facet_analysis.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/selection.h"

namespace cudatrace {

struct PipelineOptions {
  Selection display;      // APIs whose calls reach the writers and the tables
  bool nvtx = false;      // --nvtx: keep range stacks, annotate calls with them
  bool by_range = false;  // --by-range: CUDA work per NVTX range
  bool tables = false;    // summary mode: kernels and transfers, for the run and for the -i window
  bool gpu_time = false;  // --gpu-time: GPU time bounds and estimates from host events (gpu_time.h)
  bool by_span = false;   // --by-span: CUDA work per trace and span attribute (a span facet analysis)
};

// What one call did, beyond the annotations the analyses put on it (handle
// ids, waits, NCCL info, NVTX ranges). Valid until the next call.
struct CallAnalysis {
  bool displayed = false;  // of a displayed API: the writers get it
  const StreamActivity* streams = nullptr;
  std::optional<NvtxClosed> closed_range;  // an NVTX range this call ended
  // The process's live device memory (managed included) after a counted
  // allocation, or a free of an allocation that was seen.
  std::optional<std::uint64_t> device_bytes;
  // --gpu-time: the synchronisation windows this call closed; nullptr without it.
  const std::vector<GpuWindow>* gpu_windows = nullptr;
  // A launch that failed for a cause its process had not shown yet: worth a warning.
  bool first_failed_launch = false;
};

class Pipeline {
 public:
  explicit Pipeline(PipelineOptions opts);

  const CallAnalysis& on_call(Call& c);
  // `counted.calls` counted calls like `c` that BPF counted without sending
  // records (summary.h: activity_record): to the kernel and transfer tables.
  void on_activity(const Call& c, const ct_activity& counted);

  // State kept for a process or a thread that exited goes.
  void forget_process(std::uint32_t pid);
  void forget_thread(std::uint32_t pid, std::uint32_t tid);
  // Processes and threads with state, for the caller to check which exited.
  std::vector<std::uint32_t> processes() const { return streams_.processes(); }
  std::vector<std::uint32_t> threads(std::uint32_t pid) const { return streams_.threads(pid); }

  const PipelineOptions& options() const { return opts_; }
  StreamTracker& streams() { return streams_; }
  const StreamTracker& streams() const { return streams_; }
  const MemoryTracker& memory() const { return memory_; }
  const NcclTracker& nccl() const { return nccl_; }
  const RangeSummary* by_range() const { return by_range_.get(); }
  // The facets' analyses these options ask for, in the facets' order (a
  // saved trace may carry any facet: `report` takes no facet option).
  const std::vector<std::unique_ptr<FacetAnalysis>>& facet_analyses() const { return facet_analyses_; }
  const GpuTimeTracker* gpu_time() const { return gpu_time_.get(); }
  // Kernel and transfer tables (with `tables`): the whole run, and the
  // window since start_window().
  const Activity& run_activity() const { return run_; }
  const Activity& window_activity() const { return window_; }
  void start_window() { window_ = Activity{}; }

 private:
  std::uint64_t live_device_bytes(std::uint32_t pid) const;

  PipelineOptions opts_;
  MemoryTracker memory_;
  StreamTracker streams_{memory_.page_locked()};
  NcclTracker nccl_;
  LaunchFailures launch_failures_;
  std::unique_ptr<NvtxTracker> nvtx_;
  std::unique_ptr<RangeSummary> by_range_;
  std::vector<std::unique_ptr<FacetAnalysis>> facet_analyses_;
  std::unique_ptr<GpuTimeTracker> gpu_time_;
  Activity run_, window_;
  CallAnalysis analysis_;
};

}  // namespace cudatrace
