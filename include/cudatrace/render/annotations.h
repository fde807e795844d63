// The analyses' annotations on a call (streams.h: WaitInfo, nvtx.h ranges,
// nccl.h: NcclInfo, --stack frames), written for the text trace, JSON
// records and the timeline. docs/json.md and README.md describe them.
#pragma once

#include <fmt/format.h>

#include <vector>

#include "cudatrace/analysis/nccl.h"
#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/target/stack_frame.h"

namespace cudatrace {

// "s1: 2 launches (k x2), 1 copy HtoD 4.0 MiB; s2: ..." or, for events,
// "e1 (recorded on s1) for s1: ...": what was waited for, without a label.
void append_wait_description(fmt::memory_buffer& out, const WaitInfo& w);
// " waited: DESCRIPTION" (" waits: " for a stream wait) for a text line.
void append_wait_text(fmt::memory_buffer& out, const WaitInfo& w);
// ,"waited_for":{...} (docs/json.md)
void append_wait_json(fmt::memory_buffer& out, const WaitInfo& w);

// ` nvtx[DEPTH]=INNERMOST` for a text line; nothing when no range is open.
void append_nvtx_text(fmt::memory_buffer& out, const Call& c);
// `,"nvtx":[...]` and `,"nvtx_process":[...]` for a JSON record; nothing
// when no range is open.
void append_nvtx_json(fmt::memory_buffer& out, const Call& c);

// " comm_id=... rank=R/N seq=S bytes=B [group]" and ,"nccl":{...}.
void append_nccl_text(fmt::memory_buffer& out, const NcclInfo& n);
void append_nccl_json(fmt::memory_buffer& out, const NcclInfo& n);

// One line per frame: `indent` spaces, "#N 0x<addr> <frame_text>".
void append_stack_text(fmt::memory_buffer& out, const std::vector<StackFrame>& stack, int indent);
// A JSON array of {"addr","function","function_offset","module","module_offset"}; unknown parts are null.
void append_stack_json(fmt::memory_buffer& out, const std::vector<StackFrame>& stack);

}  // namespace cudatrace
