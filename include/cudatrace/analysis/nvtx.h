// NVTX ranges as framework operators (--nvtx, docs/nvtx.md). The traced
// command loads cudatrace's injection library (src/target/nvtx_inject.c) through
// NVTX_INJECTION64_PATH; its range calls arrive as ordinary records of the
// nvtx layer. This file keeps each thread's range stack from them, gives each
// CUDA call the ranges it was made in, and sums CUDA work per range.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

struct NvtxRange {
  std::string message;
  std::uint64_t domain = 0;  // the NVTX domain handle; 0: the default domain
  std::uint64_t id = 0;      // start/end ranges: NVTX's range id; push ranges: 0
  std::uint64_t start_ns = 0;
};

// A range that just closed, for the timeline.
struct NvtxClosed {
  NvtxRange range;
  std::uint32_t pid = 0, tid = 0;  // tid: the pushing thread; start/end ranges: the ending thread
  std::uint64_t end_ns = 0;
  bool process_wide = false;  // a start/end range, not on one thread's stack
};

class NvtxTracker {
 public:
  // An nvtx-layer call: updates the ranges; returns the range it closed.
  // A pop with nothing open on its thread in its domain (its push came before
  // tracing started) closes nothing.
  std::optional<NvtxClosed> on_call(const Call& c);
  // Points c.nvtx / c.nvtx_process at the ranges open for a CUDA call (both
  // nullptr when none is); NVTX calls get none. Valid until the next on_call.
  void annotate(Call& c) const;

 private:
  std::unordered_map<std::uint32_t, std::vector<NvtxRange>> threads_;    // by tid, outermost first
  std::unordered_map<std::uint32_t, std::vector<NvtxRange>> processes_;  // start/end ranges by pid, in start order
};


// --summary --by-range: CUDA work per NVTX range, from the recorded calls.
class RangeSummary {
 public:
  void on_call(const Call& c);  // a CUDA call annotated by NvtxTracker

  struct Stats {
    std::uint64_t calls = 0, api_ns = 0, launches = 0, bytes = 0;  // innermost range (self)
    std::uint64_t total_calls = 0, total_api_ns = 0, total_launches = 0;  // anywhere on the stack
  };
  const std::map<std::string, Stats>& ranges() const { return ranges_; }
  const Stats& outside() const { return outside_; }
  // The ranges, most total API time first (the tables' order).
  std::vector<std::pair<const std::string*, const Stats*>> by_total_time() const;

 private:
  std::map<std::string, Stats> ranges_;
  Stats outside_;  // calls made outside every range
};

}  // namespace cudatrace
