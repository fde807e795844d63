// `cudatrace report TRACE.jsonl`: the summary, insights, timeline and
// annotated trace of a run recorded earlier with --json (docs/json.md). Each
// call line is rebuilt into the record the tracer decoded it from, so the
// decoding, the stream model, the summary and the timeline run on it exactly
// as they do live.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cudatrace/cli/trace_line.h"
#include "cudatrace/trace/tracer.h"

namespace cudatrace {

// Reads `path` ("-": standard input) and writes what `opts` asks for: the
// text or JSON trace with stream annotations, --summary/--hist/--insights
// reports, a --perfetto timeline. Returns the exit status.
int run_report(const Options& opts, const std::string& path);

// How long `report FIFO` waits for a process to open the FIFO for writing
// (the tracer writing it opens it only once it has attached).
inline constexpr std::chrono::seconds kFifoWriterWait{10};

// Opens a trace file for reading; nullptr with `error` set when it cannot,
// also when it is a FIFO that no process opened for writing within
// `writer_wait` (a plain open would wait for one for ever).
std::FILE* open_trace(const std::string& path, std::chrono::milliseconds writer_wait, std::string& error);

}  // namespace cudatrace
