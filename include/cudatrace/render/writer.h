// The render stage: one value model, one writer per output format.
//
// The values are what the stages before produce, as plain data:
//   a call          decode/decode.h Call, with the analyses' annotations on
//                   it (waits, NVTX ranges, NCCL fields, stack) and what it
//                   did (analysis/pipeline.h CallAnalysis)
//   a warning       a problem found in the traced program at a call
//   an NVTX range   one that ended (analysis/nvtx.h NvtxClosed)
//   a summary       analysis/summary_report.h SummarySnapshot
//   the end         accounting.h EndStats: counts, losses, what tracing cost
//   node counts     node_counts.h NodeCounts (exporter mode), with the
//                   live device memory of analysis/memory.h
// A writer renders each value it has a form for and ignores the others; the
// driver (drive/driver.h) decides which values reach which writer. A new
// output format is a new Writer in its own file, made by a factory here.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cudatrace/accounting.h"
#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/analysis/summary_report.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/render/output_file.h"

namespace cudatrace {

struct NodeCounts;

// A problem the analyses found in the traced program, at a call. The
// driver prints `message` on stderr too.
struct Warning {
  const char* kind;        // "pageable_async_copy", "failed_launch"
  std::uint64_t host_ptr;  // pageable_async_copy: the host memory concerned; else 0
  std::string location;    // the call site: "app+0x1234 (main+0x2a)"
  std::string message;     // one line, without "cudatrace: warning: "
  // failed_launch of a program without code for the GPU: the GPU code of
  // the file that launched ("app holds sm_80 only, no PTX"); else empty.
  std::string gpu_code = {};
};

class Writer {
 public:
  virtual ~Writer() = default;
  // The trace's first line (text: the column headers).
  virtual void header() {}
  // A call of a displayed API (Call::unfinished: one that never returned).
  virtual void call(const Call&, const CallAnalysis&) {}
  virtual void warning(const Call&, const Warning&) {}
  virtual void nvtx_range(const NvtxClosed&) {}
  virtual void summary(const SummarySnapshot&) {}
  // The closing record. Text mode writes it to `messages` (stderr), not
  // into the trace.
  virtual void end(const EndStats&, fmt::memory_buffer& /*messages*/) {}
  virtual void counts(const NodeCounts&, const MemoryTracker&) {}
  // Where a buffered writer's output waits to be handed on (the trace
  // writers: the driver's output thread writes it); nullptr for writers
  // that write their own file.
  virtual fmt::memory_buffer* buffer() { return nullptr; }
  // Ends the output (a document's closing bracket) and closes it; false with
  // `error` set when any write failed.
  virtual bool finish(std::string& /*error*/) { return true; }
};

// The trace as bcc-style text columns; `start_ns` (CLOCK_MONOTONIC) is
// shown as time 0. Kernels by their short names (KernelNames::short_name)
// unless `full_names`. README.md and docs/guide.md show the layout.
std::unique_ptr<Writer> make_text_writer(std::uint64_t start_ns, bool full_names);
// JSON Lines, documented in docs/json.md.
std::unique_ptr<Writer> make_json_writer();
// --perfetto FILE: the timeline (docs/timeline.md), written to `fd`, the
// file `path` opened as the -o file is (output_file.h), which the writer
// then owns; nullptr with `error` set when it cannot be written.
std::unique_ptr<Writer> make_perfetto_writer(int fd, const std::string& path, std::uint64_t start_ns,
                                             std::string& error);

// The end of a trace as text lines (text mode's stderr; the JSON writer's
// fallback when its end line could not be written).
void append_end_text(fmt::memory_buffer& out, const EndStats& s);

}  // namespace cudatrace
