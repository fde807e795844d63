// --perfetto FILE: a timeline in Chrome trace-event JSON, which
// ui.perfetto.dev and chrome://tracing open (docs/timeline.md). Written as
// the calls arrive; only the per-process bookkeeping stays in memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/render/output_file.h"
#include "cudatrace/render/sink.h"

namespace cudatrace {

// Stream lanes are pseudo-threads of their process with this tid + lane
// number: above any Linux tid (pid_max is at most 2^22).
inline constexpr std::uint32_t kStreamLaneTidBase = 1u << 30;

class PerfettoWriter final : public Sink {
 public:
  // Creates `path` as the -o file is created (output_file.h) and writes the
  // document's start; nullptr with `error` set if it cannot. `start_ns`
  // (CLOCK_MONOTONIC) becomes timestamp 0.
  static std::unique_ptr<PerfettoWriter> open(const std::string& path, const OutputFileOptions& file,
                                              std::uint64_t start_ns, std::string& error);
  ~PerfettoWriter();

  // One call: its API slice, the work it queued on a stream lane, the event
  // flow it consumed, and the process's live device memory it changed.
  void on_call(const Call& c, const CallAnalysis& a) override;
  // An NVTX range that ended (--nvtx): a slice on its thread's track, around
  // the calls made in it; start/end ranges are async slices of the process.
  void on_nvtx_range(const NvtxClosed& r) override;
  // Ends the JSON document and closes the file; later calls do nothing.
  // False (with `error`) if any write failed: the file is then left empty.
  bool finish(std::string& error);

 private:
  PerfettoWriter(std::FILE* f, const std::string& path, std::uint64_t start_ns);
  void begin_event(const char* ph, std::uint32_t pid, std::uint32_t tid, std::uint64_t ts_ns);
  void name_threads(const Call& c);
  void api_slice(const Call& c);
  void queued_slice(const Call& c, const StreamActivity::Queued& q);
  void flow(const Call& c, const StreamActivity::Consumed& from);
  void memory_counter(const Call& c, std::uint64_t device_bytes);
  void end_event();
  void flush_if_large();
  void write_buffer();

  std::FILE* file_;
  std::string path_;
  std::uint64_t start_ns_;
  fmt::memory_buffer buf_;
  bool first_event_ = true;
  int write_errno_ = 0;  // of the first write that failed
  std::set<std::uint32_t> named_processes_;
  std::set<std::pair<std::uint32_t, std::uint32_t>> named_threads_;  // pid, tid (lanes included)
};

}  // namespace cudatrace
