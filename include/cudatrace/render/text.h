// Pieces of the text format, defined with the trace lines (text_writer.cpp)
// and the summary tables (text_summary.cpp): what more than one rendering
// writes (the timeline describes waits in words too), and the annotations
// on a trace line, one function each.
#pragma once

#include <fmt/format.h>

#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/analysis/summary_report.h"
#include "cudatrace/decode/stack_frame.h"

namespace cudatrace {

// "s1: 2 launches (k x2), 1 copy HtoD 4.0 MiB; s2: ..." or, for events,
// "e1 (recorded on s1) for s1: ...": what was waited for, without a label.
void append_wait_description(fmt::memory_buffer& out, const WaitInfo& w);

// " graph g1: 3 kernels (k x2, add), 1 memset 4.0 KiB" on a graph launch or
// instantiation, " graph g1: contents unknown" when it was built out of
// sight, " captured: ..." on the end of a capture.
void append_graph_text(fmt::memory_buffer& out, const GraphInfo& g);
// " waited: DESCRIPTION" (" waits: " for a stream wait) for a trace line.
void append_wait_text(fmt::memory_buffer& out, const WaitInfo& w);
// ` nvtx[DEPTH]=INNERMOST`; nothing when no range is open.
void append_nvtx_text(fmt::memory_buffer& out, const Call& c);
// " comm_id=... rank=R/N seq=S bytes=B [group]".
void append_nccl_text(fmt::memory_buffer& out, const NcclInfo& n);

// One line per frame: `indent` spaces, "#N 0x<addr> <frame_text>".
void append_stack_text(fmt::memory_buffer& out, const std::vector<StackFrame>& stack, int indent);

// "cudatrace: added ≈ 41.2 ms of CPU time to python3 (PID 812), 1.9 % of its
// CPU time while traced (45,012 probe hits)", one line per process (at most
// five), the budget's lines, and a note when a hit costs much more
// wall-clock than CPU time.
void append_cost_text(fmt::memory_buffer& out, const CostReport& r);

// The summary as text tables, in nsys's layout (docs/summary.md); kernels by
// their whole demangled names with `full_names`.
void append_summary_text(fmt::memory_buffer& out, const SummarySnapshot& s, bool full_names);

}  // namespace cudatrace
