// The tracing session behind run_tracer(): one object per run, its work
// spread over src/trace/ by concern:
//   session.cpp          run(): the order of the steps, signals, the drain
//                        loop, the end of the trace and the exit status
//   session_bpf.cpp      privileges and BTF, loading the BPF object, the
//                        probe-cost measurement, BPF counters and maps
//   session_attach.cpp   the target: -p or the command, --dlopen-stop,
//                        attaching to what a process maps, exited processes
//   session_records.cpp  ring-buffer records: validation, decoding and
//                        dispatch of each call, unfinished calls
//   session_output.cpp   the -o file, handing output to the writer thread,
//                        summary reports (-i)
//   session_node.cpp     --all-processes (every process of the host) and
//                        --prometheus (the exporter's ticks)
// Helpers that know nothing of a session live with their stage: the command
// start in target/command.h, job control in target/process_state.h, the -o
// file in render/output_file.h.
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

#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/render/output.h"
#include "cudatrace/render/output_writer.h"
#include "cudatrace/render/perfetto.h"
#include "cudatrace/render/report.h"
#include "cudatrace/trace/bpf_maps.h"
#include "cudatrace/render/sink.h"
#include "cudatrace/target/command.h"
#include "cudatrace/target/stacks.h"
#include "cudatrace/target/symbolizer.h"
#include "cudatrace/trace/node_exporter.h"
#include "cudatrace/trace/budget.h"
#include "cudatrace/trace/overhead.h"
#include "cudatrace/trace/probes.h"
#include "cudatrace/trace/ring_reader.h"
#include "cudatrace/trace/tracer.h"

struct cudatrace_bpf;  // the BPF skeleton (cudatrace.skel.h)
struct bpf_link;

namespace cudatrace {

// "cudatrace: MSG" and "cudatrace: warning: MSG" on stderr.
void error_line(const std::string& msg);
void warn_line(const std::string& msg);
std::uint64_t monotonic_ns();

class Session {
 public:
  explicit Session(const Options& opts) : opts_(opts) {}
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int run();

 private:
  // session_bpf.cpp
  int load();
  void measure_cost();
  void clear_counters();
  std::vector<__u64> read_counters();
  CostReport cost_so_far();
  void read_activity(std::uint64_t below_gen, bool for_report = false);
  void start_budget();

  // session_attach.cpp
  void decide_dlopen_stop();
  void start_stop_watchdog();
  int attach_libs(pid_t pid);
  int attach_pid_target();
  int start_command();
  void attach_mappings(pid_t pid);
  bool target_gone();
  void on_map_change(const ct_map_change& m);
  void forget_exited();

  // session_records.cpp
  static bool on_record(void* ctx, const void* data, std::size_t size);
  void on_call(const ct_call& rec);
  void warn_pageable_copy(std::uint64_t host_ptr);
  void report_open_calls();

  // session_output.cpp
  int open_output();
  bool flush();
  void hand_over_output();
  bool output_ok();
  void count_unwritten(const RecordCount& n);
  void summary_report(bool final);

  // session_node.cpp
  int attach_node();
  void rescan_node();
  void probe_ahead();
  void export_tick();

  // session.cpp
  bool command_mode() const { return opts_.pid <= 0 && !opts_.all_processes; }
  bool stop_requested() const;  // SIGINT or SIGTERM came
  static std::vector<std::pair<int, struct sigaction>> inherited_stop_signals();
  int stopped_at_start() const;
  void drain_loop();
  void finish();
  int exit_status() const;

  const Options& opts_;
  int out_fd_ = STDOUT_FILENO;
  std::unique_ptr<Output> out_;
  std::unique_ptr<OutputWriter> writer_;
  Chunk chunk_;  // where the records in out_'s buffer end; its bytes while handed over
  cudatrace_bpf* skel_ = nullptr;
  std::unique_ptr<RingReader> ring_;
  std::unique_ptr<RingReader> control_ring_;  // --all-processes: map changes and execs
  std::unique_ptr<Probes> probes_;
  std::vector<bpf_link*> tp_links_;
  KernelNames names_;
  Symbolizer symbolizer_;
  StackSymbolizer stacks_{symbolizer_};
  std::unique_ptr<Pipeline> pipeline_;     // every analysis, fed each call once
  std::vector<std::unique_ptr<Sink>> sinks_;  // where analysed calls go: trace or summary, timeline
  std::unique_ptr<Reporter> reporter_;  // summary mode
  std::uint64_t next_report_ns_ = 0;    // with -i
  unsigned reports_ = 0;
  bool count_reached_ = false;          // -c reports made: stop tracing, leave the command running
  PerfettoWriter* perfetto_ = nullptr;           // --perfetto: one of sinks_
  std::unique_ptr<NvtxInjection> nvtx_library_;  // --nvtx in command mode
  StringReader read_string_;
  ActivityReader activity_;                 // summary mode: launches and copies counted in BPF
  bool activity_in_bpf_ = false;
  std::uint64_t page_locked_changes_ = 0;   // calls that bumped the BPF page-locked generation
  std::uint64_t records_ = 0;               // call records of traced APIs read (-v says how many)
  // -p's naming window (Probes::start_naming_window): when it began, and
  // when a launch was last named by its runtime launch.
  std::uint64_t naming_since_ns_ = 0, last_named_ns_ = 0;
  void end_naming_window_when_done();
  void find_program_caller();
  ProbeCost probe_cost_;
  bool cost_measured_ = false;
  std::unique_ptr<Probes> cost_probes_;  // the measurement's, attached until the end
  AttachMode attach_mode_ = AttachMode::MultiPair;
  std::unique_ptr<BudgetControl> budget_;  // --max-overhead
  BudgetReport budget_report_;
  std::map<std::uint32_t, std::uint64_t> cpu_at_start_;  // CPU time when tracing began: -p its target, whole node each process found
  Call call_;
  EndStats stats_;
  std::uint64_t start_ns_ = 0;
  HeldCommand command_;  // command mode: the command, held before exec until released
  int child_status_ = 0;
  bool child_reaped_ = false;
  int target_fd_ = -1;   // pidfd of the -p target
  bool output_failed_ = false;  // writing the output failed (said on stderr)
  bool output_closed_ = false;  // the output's reader went away (| head): end quietly
  bool timeline_failed_ = false;  // writing the --perfetto file failed (said on stderr)
  bool stop_at_loads_ = true;      // the loader probe stops processes (--dlopen-stop)
  bool loader_probed_ = false;     // a dynamic loader's _dl_debug_state is probed
  bool waiting_for_cuda_ = false;  // -p target without a CUDA library yet
  std::set<std::tuple<pid_t, std::uint64_t, std::uint64_t>> seen_mappings_;  // pid, inode, start
  std::vector<pid_t> exited_;  // found gone at the last look; forgotten at the next
  std::vector<std::pair<std::uint32_t, std::uint32_t>> exited_threads_;  // pid, tid: the same
  std::uint64_t next_exit_check_ns_ = 0;
  std::unique_ptr<NodeExporter> exporter_;    // --prometheus
  std::uint64_t next_export_ns_ = 0;
  std::uint64_t next_rescan_ns_ = 0;          // --all-processes
  std::set<std::pair<dev_t, ino_t>> probed_files_;  // files with traced APIs
};

}  // namespace cudatrace
