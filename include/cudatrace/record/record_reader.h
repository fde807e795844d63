// The records BPF sends, read: the ring buffers drained, each record checked
// against its size and decoded into a Call for the consumer, kernel names
// learnt from registrations and lookups, stacks symbolised, the launches and
// copies BPF counted rebuilt into calls, the processes and threads that exit
// told, and, at the end, the calls still open handed on as unfinished.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/record/bpf_maps.h"
#include "cudatrace/record/ring_reader.h"
#include "cudatrace/record/source.h"
#include "cudatrace/target/stacks.h"
#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

class BpfObject;
class BudgetControl;
class Tracee;

// The processes and threads calls came from, and those of them that exited:
// found gone at one look, told at the next (a second on), after the ring
// has been read past every record they wrote.
class ExitWatch {
 public:
  struct Gone {
    std::vector<pid_t> processes;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> threads;  // pid, tid
  };
  // A call came from this thread.
  void saw(std::uint32_t pid, std::uint32_t tid);
  // At most once a second: what the previous look found gone, no longer
  // tracked here; nullopt when no look is due.
  std::optional<Gone> take_due(std::uint64_t now_ns);
  // Looks for exits among the processes calls came from and `mapped`.
  void look(const std::vector<pid_t>& mapped);

 private:
  std::uint32_t last_pid_ = 0, last_tid_ = 0;  // of the last call seen
  std::set<std::uint32_t> pids_;
  std::map<std::uint32_t, std::set<std::uint32_t>> tids_;
  Gone gone_;
  std::uint64_t next_look_ns_ = 0;
};

class RecordReader {
 public:
  // Reads what `bpf` sends as `needs` asked; a process's map changes and
  // exits go to `target`, names of its code come from `symbolizer`.
  RecordReader(BpfObject& bpf, Tracee& target, Symbolizer& symbolizer, const RecordsNeeded& needs);
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Opens the calls' ring buffer and the control ring (map changes, and
  // execs of the whole node). An exit status, said on stderr.
  int open();
  // Where what is read goes from now on.
  void hand_to(CallConsumer& consumer) { consumer_ = &consumer; }

  // The control ring's map changes: a process may be stopped until its new
  // files are probed, and on the whole node a late attach misses calls
  // (docs/prometheus.md). The calls' ring is read while files are probed.
  void drain_control();
  // How long the next poll may wait, at most `wait_ms`: with --py-stack a
  // millisecond while records with Python frames come, else until the next
  // one wakes the reader (their code objects are named from the process's
  // memory, which is gone once it exits).
  int wait_ms(int wait_ms);
  // Waits up to `timeout_ms` for records, then reads them; false (said) on
  // a wait error.
  bool poll(int timeout_ms);
  // Reads the records present now.
  void drain();
  // After the last drain: the calls still in progress, as unfinished ones.
  void report_open_calls();

  // --max-overhead: launches counted in BPF are scaled by its sampling.
  void sample_with(BudgetControl& budget) { budget_ = &budget; }
  // Hands on what BPF counted without records (summary mode): all of it
  // when `final`, else what no page-locked change still unread can judge.
  void pass_counted(bool final);
  // At most once a second: forgets (here, in the target and past the
  // consumer) the processes and threads found gone at the previous look,
  // after the ring has been read past every record they wrote; then looks
  // again.
  void forget_exited();

  // Call records of traced APIs read.
  std::uint64_t records() const { return records_; }
  SiteNames site_names();

 private:
  static bool on_record(void* ctx, const void* data, std::size_t size);
  void on_call(const ct_call& rec);
  void on_map_change(const ct_map_change& m);
  void read_activity(std::uint64_t below_gen, bool for_report = false);

  BpfObject& bpf_;
  Tracee& target_;
  Symbolizer& symbolizer_;
  StackSymbolizer stacks_{symbolizer_};
  KernelNames names_;
  std::uint64_t handle_layouts_seen_ = 0;  // Symbolizer::handle_layouts_learnt() when last looked
  StringReader read_string_;
  std::unique_ptr<RingReader> ring_;
  std::unique_ptr<RingReader> control_ring_;  // whole node: map changes and execs
  CallConsumer* consumer_ = nullptr;
  Call call_;
  std::uint64_t records_ = 0;
  std::uint64_t python_records_ = 0, python_records_before_wait_ = 0;  // with Python frames
  // Summary mode: launches and copies counted in BPF.
  bool counted_activity_;
  ActivityReader activity_;
  std::uint64_t page_locked_changes_ = 0;  // calls that bumped the BPF page-locked generation
  BudgetControl* budget_ = nullptr;
  ExitWatch exits_;
};

}  // namespace cudatrace
