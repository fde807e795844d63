// The source of `cudatrace report TRACE.jsonl`: a run recorded earlier with
// --json (docs/json.md). Each call line is rebuilt into the record the
// tracer decoded it from (trace_line.h), so that the decoding, the analyses
// and the writers run on it exactly as they do live.
//
// Whatever the input, memory stays bounded: a line longer than
// kMaxTraceLineBytes is refused, and the calls are put in order (by the
// time they returned, the order the tracer writes them in) within a
// bounded window; a line that the window cannot put in order is refused.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/record/source.h"
#include "cudatrace/record/trace_line.h"

namespace cudatrace {

// How long `report FIFO` waits for a process to open the FIFO for writing
// (the tracer writing it opens it only once it has attached).
inline constexpr std::chrono::seconds kFifoWriterWait{10};
// The longest line `report` reads. The tracer's longest lines are launches
// of kernels with names of a few KiB and calls with 64-frame stacks
// (docs/reliability.md, section 5): far below this.
inline constexpr std::size_t kMaxTraceLineBytes = std::size_t(1) << 20;
// Calls are written when they return, from every CPU: lines can be a
// little out of order (a thread preempted between its return and its
// write). They are sorted by return time within this much trace time, at
// most this many lines and bytes of lines held at once.
inline constexpr std::uint64_t kOrderWindowNs = 1000000000;
inline constexpr std::size_t kOrderWindowLines = 65536;
inline constexpr std::size_t kOrderWindowBytes = std::size_t(64) << 20;
// The largest ts_ns (a clock since boot) and dur_ns a trace can hold, 10^18
// ns (31 years): a call line beyond it is left out, said and counted.
inline constexpr std::uint64_t kMaxTraceNs = 1000000000000000000ull;
// Processes whose state (streams, kernel names, handles, context) is kept
// at once: past this, the eighth whose last calls are oldest are forgotten
// (a trace has no line for a process's exit), counted, and said at the end.
inline constexpr std::size_t kMaxReportProcesses = 4096;
// Call sites named by the trace's warnings that are kept (past them, a
// warning found again names its call site by address).
inline constexpr std::size_t kMaxWarningSites = 65536;

// Opens a trace file for reading; nullptr with `error` set when it cannot,
// also when it is a FIFO that no process opened for writing within
// `writer_wait` (a plain open would wait for one for ever). The stream is
// unbuffered: stdio reads nothing ahead of what is asked of it.
std::FILE* open_trace(const std::string& path, std::chrono::milliseconds writer_wait, std::string& error);

class SavedTrace final : public Source {
 public:
  // `path` "-": standard input.
  explicit SavedTrace(std::string path);
  ~SavedTrace() override;
  SavedTrace(const SavedTrace&) = delete;
  SavedTrace& operator=(const SavedTrace&) = delete;

  // Opens the trace and reads its first window of calls: the earliest
  // call's entry there is time 0 (the trace does not say when tracing
  // started).
  int start(const RecordsNeeded&) override;
  std::uint64_t start_ns() const override { return start_ns_; }
  bool private_trace() const override;
  bool can_wait() const override { return true; }
  int release() override { return 0; }
  bool feed(CallConsumer& to, int wait_ms) override;
  void finish(CallConsumer& to) override;
  bool failed() const override { return failed_; }
  std::uint64_t now_ns() const override { return last_ns_; }
  // The lines' calls, and those the end line says the ring lost (counted by API).
  std::vector<ct_api_stats> api_stats() override;
  LossCounts losses() override { return lost_; }
  bool counts_in_kernel() const override { return false; }
  SiteNames site_names() override { return {}; }  // addresses: no process to look at
  std::string location(std::uint32_t pid, std::uint64_t addr) override;
  // As the trace's failed_launch warnings said them.
  std::string gpu_code(std::uint32_t pid, std::uint64_t addr) override;
  int exit_status() const override;

 private:
  // Lines of at most kMaxTraceLineBytes, read with read(2) into a buffer
  // of fixed size: a pipe's lines come as they are written.
  class LineReader {
   public:
    // CutLine: the input's last line, with no newline at its end (a
    // tracer whose disk filled up stopped in the middle of it).
    enum Result { Line, CutLine, End, TooLong, Error };
    explicit LineReader(std::FILE* in);
    // The next line, without its newline; valid until the next call.
    Result next(std::string_view& line);

   private:
    int fd_;
    int first_;  // the byte open_trace put back, EOF once taken
    std::vector<char> buf_;
    std::size_t begin_ = 0, end_ = 0;  // what is read and not yet handed out
    bool eof_ = false;
  };
  // A call line read, waiting for its turn.
  struct Pending {
    std::uint64_t returned_ns;  // when the tracer wrote it (an unfinished call: where it stood)
    std::size_t number;         // its line: ties keep the trace's order
    std::size_t bytes;
    std::uint32_t slot;  // in slots_
    bool operator>(const Pending& o) const {
      return returned_ns != o.returned_ns ? returned_ns > o.returned_ns : number > o.number;
    }
  };

  // Reads the next line that is not empty: a call goes into the window, a
  // warning or the end line is taken in. False at the end of the trace or
  // on a line that is not one (failed_).
  bool read_line();
  // The next call in order into current_; false when there is none (the
  // trace ended, or failed_).
  bool next_call();
  const Pending* earliest() const;  // in the window; nullptr when it is empty
  bool window_full() const;
  bool fail(const std::string& why);
  void leave_out(std::uint64_t& count, bool ts, const ct_call& rec);
  void hand_on(CallConsumer& to);
  // The call's process is the most recent; past kMaxReportProcesses, the
  // least recent are forgotten.
  void note_process(std::uint32_t pid, CallConsumer& to);

  std::string path_, name_;
  std::FILE* in_ = nullptr;
  std::unique_ptr<LineReader> reader_;
  std::size_t number_ = 0;  // of the line read last
  // Parsed lines, kept in place while the heap moves their Pendings.
  std::vector<TraceLine> slots_;
  FacetLines facet_lines_;  // what the facets keep from line to line (their lines of their own)
  std::vector<std::uint32_t> free_slots_;
  // The window: the calls read in order (each returned no earlier than
  // those before it), and a min-heap of the others, fewer.
  std::deque<Pending> in_order_;
  std::vector<Pending> late_;
  std::size_t window_bytes_ = 0;
  std::uint64_t newest_ns_ = 0;  // the latest return read so far
  std::uint64_t released_ns_ = 0;  // the return time of the call handed on last...
  std::size_t released_line_ = 0;  // ...and its line (0: none yet)
  static constexpr std::uint32_t kNoSlot = ~std::uint32_t(0);
  std::uint32_t current_ = kNoSlot;  // the slot of the call being handed on
  bool ended_ = false;             // the end line was read
  bool read_to_end_ = false;       // of the input
  bool failed_ = false;
  std::size_t cut_line_ = 0;       // the number of a last line cut short and left out (0: none)
  std::uint64_t start_ns_ = 0, last_ns_ = 0;
  std::uint64_t calls_read_ = 0, unfinished_read_ = 0;  // checked against the end line's counts
  std::uint64_t end_calls_ = 0, end_unfinished_ = 0;
  std::uint64_t impossible_ts_ = 0, impossible_dur_ = 0;  // calls left out (kMaxTraceNs)
  KernelNames names_;
  Call call_;
  std::vector<ct_api_stats> api_stats_;  // what BPF counts live, by API id
  LossCounts lost_;                      // as the end line says
  std::list<std::uint32_t> processes_;   // least recent call first
  std::unordered_map<std::uint32_t, std::list<std::uint32_t>::iterator> process_at_;
  std::uint64_t forgotten_processes_ = 0;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::string> locations_;  // (pid, caller): warnings' sites
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::string> gpu_codes_;  // (pid, caller): failed launches'
};

}  // namespace cudatrace
