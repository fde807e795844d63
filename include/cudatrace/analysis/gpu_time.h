// --gpu-time: what the GPU was doing, from host events alone (docs/gpu-time.md).
//
// Per stream, the work queued since the stream was last known complete is a
// window; the synchronisation (or successful query) that proves it complete
// closes it. For each closed window: bounds on the GPU time of its work that
// hold whatever the GPU did (under the assumptions docs/gpu-time.md states),
// and whether the host waited for the GPU (the closing call blocked) or the
// GPU waited for the host (it returned at once: the queue had drained).
// Across windows, per-kernel GPU times are estimated by non-negative least
// squares, with an uncertainty; and each thread's time is split into waiting
// for kernels, waiting for transfers, synchronisation overhead and host work.
//
// Memory stays bounded: a window is a summary (counts per kernel shape and
// bytes per direction), at most kMaxSegments per stream between event
// records; the fit is kMaxColumns wide whatever the run.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cudatrace/analysis/insights.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/decode/decode.h"

namespace cudatrace {

struct GpuTimeOptions {
  // A synchronisation shorter than this returned "at once": it found the work
  // done. About the cost of a synchronisation that waits for nothing (a few
  // microseconds) with room for a wake-up; docs/gpu-time.md says why.
  std::uint64_t immediate_ns = 20000;
  // Work a launch has handed over may reach the GPU this much later: the
  // lower bound gives that time away (docs/gpu-time.md).
  std::uint64_t launch_latency_ns = 50000;
};

// A synchronisation window of one stream, as it closed.
struct GpuWindow {
  enum class Bound : std::uint8_t {
    Gpu,   // the closing call blocked: the host waited for the GPU
    Host,  // it returned at once with work outstanding: the queue drained first, the GPU waited for the host
  };
  std::uint32_t pid = 0;
  std::uint32_t lane = 0;     // the stream model's lane (StreamActivity::Queued::lane)
  std::string stream;         // short id
  std::uint64_t first_launch_ns = 0;  // entry of the first enqueue call: no work of the window started before
  std::uint64_t close_entry_ns = 0, close_end_ns = 0;  // the closing call
  std::uint64_t lower_ns = 0, upper_ns = 0;  // bounds on the GPU time of the window's work
  // Why the lower bound is 0, when it is (docs/gpu-time.md): empty when it rests on evidence.
  const char* lower_bound_note = "";
  Bound bound = Bound::Gpu;
  std::uint32_t kernels = 0, transfers = 0, host_functions = 0;
  // The fit's estimate of the window's GPU time, clamped to the bounds; absent
  // while some of its work has no separable estimate yet.
  std::optional<std::uint64_t> estimate_ns;
};

// A kernel as the estimator tells kernels apart: name x grid x block.
struct KernelShape {
  std::string name, short_name;
  std::array<std::uint32_t, 6> dims{};  // grid xyz, block xyz; zeros when the call does not say
  bool operator<(const KernelShape& o) const { return std::tie(name, dims) < std::tie(o.name, o.dims); }
};

struct GpuTimeEstimate {
  std::string column;  // kernel short name with its shape, "HtoD per MiB", "per-window overhead"
  std::string name;    // kernels: the demangled name; else the column
  std::array<std::uint32_t, 6> dims{};
  bool kernel = false;
  std::uint64_t launches = 0;  // kernels: launches in the fitted windows; transfers: MiB, rounded up per window
  bool separable = false;      // the windows tell it apart from the other columns
  double estimate_ns = 0;      // per launch (per MiB for transfers); meaningful when separable
  double stderr_ns = 0;        // one standard error
};

struct GpuTimeReport {
  std::uint64_t windows = 0, gpu_bound_windows = 0, host_bound_windows = 0;
  std::uint64_t lower_ns = 0, upper_ns = 0;  // sums of the windows' bounds
  std::uint64_t fitted_windows = 0;          // blocked windows the fit used
  std::uint64_t unfitted_windows = 0;        // blocked windows it could not use (docs/gpu-time.md)
  bool overhead_fitted = false;              // a per-window constant was separable and fitted
  std::vector<GpuTimeEstimate> estimates;    // kernels by estimated total time, then transfers
  // Each thread's time between its first and last CUDA call, summed over threads.
  std::uint64_t thread_ns = 0;
  std::uint64_t gpu_wait_ns = 0;       // blocked in synchronisations that waited for kernels
  std::uint64_t transfer_wait_ns = 0;  // blocked in synchronous copies or waits for copies only
  std::uint64_t sync_ns = 0;           // in synchronisations that did not block
  std::uint64_t host_ns() const { return thread_ns - std::min(thread_ns, gpu_wait_ns + transfer_wait_ns + sync_ns); }
};

class GpuTimeTracker {
 public:
  explicit GpuTimeTracker(GpuTimeOptions opts = {});

  // Every call, after the stream model (whose activity says what it queued
  // and on which lane). Returns the windows the call closed: valid until the
  // next call.
  const std::vector<GpuWindow>& on_call(const Call& c, const StreamActivity& activity);

  GpuTimeReport report() const;
  void forget_process(std::uint32_t pid);

  static constexpr std::size_t kMaxSegments = 256;
  static constexpr std::size_t kMaxColumns = 64;  // kernel shapes, transfer directions and the overhead

 private:
  // Work queued on one stream between two points an event record can name.
  struct Segment {
    std::uint64_t last_seq = 0;  // of the stream's latest enqueue in it
    std::uint64_t first_launch_ns = 0;
    std::map<std::uint32_t, double> columns;  // fit column -> launches, or MiB for transfers
    std::uint32_t kernels = 0, transfers = 0, host_functions = 0;
    bool unfittable = false;   // work outside the fit's columns
    bool waits_on_other = false;  // a cudaStreamWaitEvent: may wait for another stream
    bool merged = false;          // holds work from either side of an event record
  };
  struct Stream {
    std::uint32_t lane = 0;
    std::string id;
    std::uint64_t seq = 0;  // enqueues so far
    std::deque<Segment> pending;  // a deque: the oldest go first
    bool sealed = true;
    bool next_waits = false;  // a cudaStreamWaitEvent came after the open segment
    // The newest enqueue's return, an upper bound on when it was submitted;
    // unknown (max) until its thread's next call for an enqueue recorded at entry.
    std::uint64_t last_submit_by_ns = 0;
    std::uint32_t last_enqueue_tid = 0;
    std::uint64_t last_enqueue_ns = 0;
    unsigned last_enqueue_depth = 0;
    // Earlier work may have run until then: the return of the call that closed it.
    std::uint64_t settled_ns = 0;
    // A query found the work not done at this time (0: none since the last close).
    std::uint64_t outstanding_at_ns = 0;
  };
  struct EventPoint {
    std::uint32_t lane = 0;
    std::uint64_t seq = 0;
  };
  struct Thread {
    std::uint64_t first_ns = 0, last_ns = 0;
  };
  struct Process {
    std::map<std::uint32_t, Stream> streams;  // by lane
    std::map<std::tuple<std::string, std::uint32_t>, std::uint32_t> lanes;  // (id, tid for per-thread) -> lane
    std::unordered_map<std::string, EventPoint> events;                      // by event id
    std::unordered_map<std::uint32_t, Thread> threads;
    std::set<std::uint32_t> awaiting_submit;  // lanes whose last enqueue's return is not known yet
    bool device_switched = false;  // more than one device or context: a device synchronisation covers one
    std::optional<std::uint64_t> device, context;  // the last set
  };

  Stream* stream_of(Process& p, const Call& c);
  void enqueue(Process& p, const Call& c, const StreamActivity::Queued& q);
  std::uint32_t column_of(const KernelShape& k);
  std::uint32_t transfer_column(Direction d);
  // Closes the segments of `s` up to `seq` (all of them: max), at call `c`.
  void close(Process& p, Stream& s, std::uint64_t seq, const Call& c, bool blocked);
  void add_row(const std::map<std::uint32_t, double>& columns, double y_ns);
  void account_wait(const Call& c, bool blocked, bool kernels, bool transfers);
  void note_thread(Process& p, const Call& c);
  void refit() const;

  GpuTimeOptions opts_;
  std::unordered_map<std::uint32_t, Process> procs_;
  std::vector<GpuWindow> closed_;
  GpuTimeReport totals_;  // counts and time shares; estimates are filled by report()

  // The fit: normal equations over the columns, summed row by row.
  std::map<KernelShape, std::uint32_t> kernel_columns_;
  std::array<std::uint32_t, kDirections> transfer_columns_{};  // column + 1; 0: none yet
  std::vector<std::string> column_names_;
  std::vector<KernelShape> column_kernels_;  // per column; empty name for transfers and the overhead
  std::vector<std::uint64_t> column_counts_;
  std::vector<double> gram_, rhs_;  // kMaxColumns^2, kMaxColumns: sum a a^T, sum a y (microseconds)
  double yy_ = 0;
  std::uint64_t rows_ = 0;
  mutable std::uint64_t fitted_rows_ = 0;
  mutable std::vector<GpuTimeEstimate> fit_;
  mutable bool fit_overhead_ = false;
};

// The run's shares and the estimate as insights (docs/summary.md): gpu-bound,
// host-bound, transfer-bound, sync-bound, when one share dominates.
std::vector<Insight> gpu_time_insights(const GpuTimeReport& r);

}  // namespace cudatrace
