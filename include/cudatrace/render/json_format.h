// Pieces of the JSON format, defined with the trace's lines
// (json_writer.cpp) and the summary line (json_summary.cpp): what both
// write, and the annotations on a call's line, one function each. The
// encoding of strings and values is json.h's.
#pragma once

#include <fmt/format.h>

#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/analysis/summary_report.h"
#include "cudatrace/decode/stack_frame.h"

namespace cudatrace {

// ,"waited_for":{...} (docs/json.md)
void append_wait_json(fmt::memory_buffer& out, const WaitInfo& w);
// `,"nvtx":[...]` and `,"nvtx_process":[...]`; nothing when no range is open.
void append_nvtx_json(fmt::memory_buffer& out, const Call& c);
// ,"graph":{"id":..,"known":..,"runs":{...}} (docs/json.md)
void append_graph_json(fmt::memory_buffer& out, const GraphInfo& g);
// ,"nccl":{...}
void append_nccl_json(fmt::memory_buffer& out, const NcclInfo& n);

// A JSON array of {"addr","function","function_offset","module","module_offset"}; unknown parts are null.
void append_stack_json(fmt::memory_buffer& out, const std::vector<StackFrame>& stack);

// {"entry_ns":..,"return_ns":..,"processes":[{"pid":..,...}],"budget":{...}} (docs/json.md)
void append_cost_json(fmt::memory_buffer& out, const CostReport& r);

// The summary as one line of type "summary" (docs/json.md).
void append_summary_json(fmt::memory_buffer& out, const SummarySnapshot& s);

}  // namespace cudatrace
