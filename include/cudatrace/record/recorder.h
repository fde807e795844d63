// The live source: loads the BPF object, attaches to the target, drains the
// ring buffer and decodes each record into a Call, and reads what BPF
// counted without records. Knows nothing of analyses or outputs. Its work
// is spread over src/record/ by concern:
//   recorder.cpp          the course: signals, start, release, feed, finish,
//                         the exit status
//   recorder_bpf.cpp      privileges and BTF, loading the object with the
//                         options, the probe-cost measurement, the BPF
//                         counters and maps, the budget
//   recorder_attach.cpp   the target: -p or the command, --dlopen-stop,
//                         attaching to what a process maps, exited processes
//   recorder_records.cpp  ring-buffer records: validation, decoding, calls
//                         still open at the end
//   recorder_node.cpp     --all-processes (every process of the host) and
//                         exporter mode's counts
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cudatrace/clock.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/options.h"
#include "cudatrace/record/bpf_maps.h"
#include "cudatrace/record/budget.h"
#include "cudatrace/record/node_stats.h"
#include "cudatrace/record/cost.h"
#include "cudatrace/record/probes.h"
#include "cudatrace/record/ring_reader.h"
#include "cudatrace/record/source.h"
#include "cudatrace/target/command.h"
#include "cudatrace/target/nvtx_injection.h"
#include "cudatrace/target/stacks.h"
#include "cudatrace/target/symbolizer.h"
#include "cudatrace/terminal.h"

struct cudatrace_bpf;  // the BPF skeleton (cudatrace.skel.h)
struct bpf_link;

namespace cudatrace {

class Recorder final : public Source {
 public:
  explicit Recorder(const Options& opts);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  int start(const RecordsNeeded& needs) override;
  std::uint64_t start_ns() const override { return start_ns_; }
  bool private_trace() const override;
  int release() override;
  bool feed(CallConsumer& to, int wait_ms) override;
  void pass_counted(CallConsumer& to, bool final) override;
  void finish(CallConsumer& to) override;
  std::uint64_t now_ns() const override { return monotonic_ns(); }
  std::vector<ct_api_stats> api_stats() override;
  const Sampling* sampling() const override { return budget_ ? &budget_->sampling() : nullptr; }
  LossCounts losses() override;
  std::optional<CostReport> cost() override;
  std::optional<NodeCounts> node_counts() override;
  SiteNames site_names() override;
  std::string location(std::uint32_t pid, std::uint64_t addr) override;
  std::string gpu_code(std::uint32_t pid, std::uint64_t addr) override;
  int exit_status() const override;

 private:
  // recorder_bpf.cpp
  int load();
  void measure_cost();
  void clear_counters();
  std::vector<__u64> read_counters();
  void read_activity(std::uint64_t below_gen, bool for_report = false);
  void start_budget();

  // recorder_attach.cpp
  void decide_dlopen_stop();
  void start_stop_watchdog();
  int attach_libs(pid_t pid);
  int attach_pid_target();
  int start_command();
  void attach_mappings(pid_t pid);
  bool target_gone();
  void on_map_change(const ct_map_change& m);
  void forget_exited();

  // recorder_records.cpp
  static bool on_record(void* ctx, const void* data, std::size_t size);
  void on_call(const ct_call& rec);
  void report_open_calls();

  // recorder_node.cpp
  int attach_node();
  void rescan_node();
  void probe_ahead();
  void note_process(pid_t pid);

  // recorder.cpp
  bool command_mode() const { return opts_.pid <= 0 && !opts_.all_processes; }
  int stopped_at_start() const;
  void announce() const;

  const Options& opts_;
  RecordsNeeded needs_;  // what the driver's analyses and writers read
  cudatrace_bpf* skel_ = nullptr;
  std::unique_ptr<RingReader> ring_;
  std::unique_ptr<RingReader> control_ring_;  // --all-processes: map changes and execs
  std::unique_ptr<Probes> probes_;
  std::vector<bpf_link*> tp_links_;
  KernelNames names_;
  Symbolizer symbolizer_;
  StackSymbolizer stacks_{symbolizer_};
  std::unique_ptr<NvtxInjection> nvtx_library_;  // --nvtx in command mode
  StringReader read_string_;
  CallConsumer* consumer_ = nullptr;  // where the records being drained go
  ActivityReader activity_;            // summary mode: launches and copies counted in BPF
  std::uint64_t page_locked_changes_ = 0;  // calls that bumped the BPF page-locked generation
  std::uint64_t records_ = 0;              // call records of traced APIs read (-v says how many)
  ProbeCost probe_cost_;
  bool cost_measured_ = false;
  std::unique_ptr<Probes> cost_probes_;  // the measurement's, attached until the end
  AttachMode attach_mode_ = AttachMode::MultiPair;
  std::unique_ptr<BudgetControl> budget_;  // --max-overhead
  // CPU time when tracing began: -p its target, whole node each process found.
  std::map<std::uint32_t, std::uint64_t> cpu_at_start_;
  Call call_;
  std::uint64_t start_ns_ = 0;
  std::uint64_t stop_deadline_ns_ = 0;  // command mode after a stop signal: the command's grace
  HeldCommand command_;  // command mode: the command, held before exec until released
  int child_status_ = 0;
  bool child_reaped_ = false;
  int target_fd_ = -1;   // pidfd of the -p target
  bool stop_at_loads_ = true;      // the loader probe stops processes (--dlopen-stop)
  bool loader_probed_ = false;     // a dynamic loader's _dl_debug_state is probed
  bool waiting_for_cuda_ = false;  // -p target without a CUDA library yet
  std::set<std::tuple<pid_t, std::uint64_t, std::uint64_t>> seen_mappings_;  // pid, inode, start
  std::vector<pid_t> exited_;  // found gone at the last look; forgotten at the next
  std::vector<std::pair<std::uint32_t, std::uint32_t>> exited_threads_;  // pid, tid: the same
  std::uint32_t last_pid_ = 0, last_tid_ = 0;  // of the last call handed on
  std::set<std::uint32_t> tracked_pids_;  // processes whose calls were handed on (exits are looked for)
  std::map<std::uint32_t, std::set<std::uint32_t>> tracked_tids_;
  std::uint64_t next_exit_check_ns_ = 0;
  std::uint64_t next_rescan_ns_ = 0;                // --all-processes
  std::set<std::pair<dev_t, ino_t>> probed_files_;  // files with traced APIs
  std::unique_ptr<NodeStats> node_stats_;           // exporter mode: the in-kernel counts
  std::map<std::uint32_t, ProcessLabel> labels_;    // exporter mode: processes as first seen
};

}  // namespace cudatrace
