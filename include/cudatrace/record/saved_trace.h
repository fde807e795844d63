// The source of `cudatrace report TRACE.jsonl`: a run recorded earlier with
// --json (docs/json.md). Each call line is rebuilt into the record the
// tracer decoded it from (trace_line.h), so that the decoding, the analyses
// and the writers run on it exactly as they do live.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/record/source.h"
#include "cudatrace/record/trace_line.h"

namespace cudatrace {

// How long `report FIFO` waits for a process to open the FIFO for writing
// (the tracer writing it opens it only once it has attached).
inline constexpr std::chrono::seconds kFifoWriterWait{10};

// Opens a trace file for reading; nullptr with `error` set when it cannot,
// also when it is a FIFO that no process opened for writing within
// `writer_wait` (a plain open would wait for one for ever).
std::FILE* open_trace(const std::string& path, std::chrono::milliseconds writer_wait, std::string& error);

class SavedTrace final : public Source {
 public:
  // `path` "-": standard input.
  explicit SavedTrace(std::string path);
  ~SavedTrace() override;
  SavedTrace(const SavedTrace&) = delete;
  SavedTrace& operator=(const SavedTrace&) = delete;

  // Opens the trace and reads up to its first call line: its time is time
  // 0 (the trace does not say when tracing started). What a live source
  // must record is no matter: the trace holds what it holds.
  int start(const RecordsNeeded&) override;
  std::uint64_t start_ns() const override { return start_ns_; }
  bool private_trace() const override;
  bool can_wait() const override { return true; }
  int release() override { return 0; }
  bool feed(CallConsumer& to, int wait_ms) override;
  void finish(CallConsumer& to) override;
  bool failed() const override { return failed_; }
  std::uint64_t now_ns() const override { return last_ns_; }
  std::vector<ct_api_stats> api_stats() override { return api_stats_; }
  LossCounts losses() override { return lost_; }
  SiteNames site_names() override { return {}; }  // addresses: no process to look at
  std::string location(std::uint32_t pid, std::uint64_t addr) override;
  // As the trace's failed_launch warnings said them.
  std::string gpu_code(std::uint32_t pid, std::uint64_t addr) override;
  int exit_status() const override;

 private:
  // The next line that is not empty, parsed into line_; false at the end
  // of the trace or on a line that is not one (failed_).
  bool next_line();
  bool fail(const std::string& why);
  void hand_on(CallConsumer& to);

  std::string path_, name_;
  std::FILE* in_ = nullptr;
  char* buf_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t number_ = 0;  // of the line read last
  TraceLine line_;
  bool call_pending_ = false;  // line_ is a call not handed on yet
  bool ended_ = false;         // the end line was read
  bool failed_ = false;
  std::uint64_t start_ns_ = 0, last_ns_ = 0;
  KernelNames names_;
  Call call_;
  std::vector<ct_api_stats> api_stats_;  // what BPF counts live, by API id
  LossCounts lost_;                      // as the end line says
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::string> locations_;  // (pid, caller): warnings' sites
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::string> gpu_codes_;  // (pid, caller): failed launches'
};

}  // namespace cudatrace
