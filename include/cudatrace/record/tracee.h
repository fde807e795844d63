// What cudatrace traces: a command it starts (`cudatrace -- CMD`, held
// before exec, its children followed), a running process (-p) or every
// process of the host (--all-processes). Each kind owns its processes, when
// and how probes are attached to their files and kept up to date (library
// loads, --dlopen-stop, rescans, probing ahead), and when tracing ends;
// make_tracee chooses the kind once. The recorder takes a target through
// its stages: prepare (before the BPF object loads), attach, release, then
// refresh and keep_tracing at each feed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "cudatrace/decode/facet.h"
#include "cudatrace/options.h"
#include "cudatrace/record/bpf_object.h"
#include "cudatrace/record/cost.h"
#include "cudatrace/record/process_capture.h"
#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

class Tracee {
 public:
  virtual ~Tracee() = default;
  Tracee(const Tracee&) = delete;
  Tracee& operator=(const Tracee&) = delete;

  // Before the BPF object loads: which processes it traces and whether it
  // stops them at library loads (said where a process that could be is not).
  virtual TracedProcesses prepare() = 0;
  // Attaches probes to the target's files; a command is started, held
  // before it runs (its output kept off a trace on standard output, as
  // `needs` says). An exit status (options.h), said on stderr.
  virtual int attach(BpfObject& bpf, const RecordsNeeded& needs) = 0;
  // Lets the target run (a command is released) and says what is traced.
  // `stop_signal` (0: none) came during the start-up. An exit status.
  virtual int release(int stop_signal) = 0;
  // At each feed: looks for files to probe that no loader probe told of.
  virtual void refresh() {}
  // At each feed: whether tracing goes on; no once the target has ended,
  // or a stop was asked for (`stop_signal`, 0: none).
  virtual bool keep_tracing(int stop_signal) = 0;
  // Once tracing has ended: the exit status (a command's own).
  virtual int exit_status(int /*stop_signal*/) const { return kExitOk; }
  // A stop signal came before the target ran: the exit status.
  virtual int stopped_at_start(int /*stop_signal*/) const { return kExitOk; }
  // Whether the trace is not everyone's to read (source.h).
  virtual bool private_trace() const { return false; }

  // A process's dynamic loader changed its maps (the loader probe): its new
  // files are probed. Or (`wanted` not 0) it looked up the driver function
  // at that address (Probes::defer_driver), at `wanted_by`: that function is probed.
  void on_map_change(pid_t pid, std::uint64_t wanted = 0, std::uint64_t wanted_by = 0);
  // A process exited: what is kept of it goes (a reused pid is found afresh).
  void forget_process(pid_t pid);
  // Called with each process in which a file with traced APIs is probed
  // (exporter mode reads who it is while it runs).
  void on_probed_process(std::function<void(pid_t)> probed) { probed_process_ = std::move(probed); }
  // The traced processes' times when tracing began: those started traced
  // have CPU time and run delay 0 (cost.h: price_hits), and the CPUs they
  // were given when first probed.
  const std::map<std::uint32_t, ProcessTimes>& times_at_start() const { return times_at_start_; }
  // How this source names what BPF captured while its records are decoded:
  // its process captures install their facets' namers (process_capture.h).
  FacetNames& facet_names() { return facet_names_; }
  // Distinct files with traced APIs probed.
  std::size_t probed_files() const { return probed_files_.size(); }
  // Once tracing has ended: what the process captures could not read.
  void say_what_was_missed() const;

 protected:
  // How a kind of target attaches to what its processes map.
  struct AttachPolicy {
    // Probes attached for a process fire in it alone (-p); else in every
    // process that maps the file, and BPF filters.
    bool bound_to_process = false;
    // Processes come and go unasked (the whole host): a stop signal cuts a
    // scan short, a loader that cannot be probed (often a process that just
    // exited) is said only with -v, and a process's cost counts from when
    // it is found (it may have run for hours before).
    bool unasked_processes = false;
  };
  Tracee(const Options& opts, Symbolizer& symbolizer, AttachPolicy policy)
      : opts_(opts), symbolizer_(symbolizer), policy_(policy) {}

  // Attaches to every CUDA-bearing file `pid` maps that was not seen
  // before, and to its dynamic loader. Its paths are the process's to
  // choose: every message escapes them.
  void attach_mappings(pid_t pid);
  // The --lib files, for `pid` (-1: every process); an exit status.
  int attach_libs(pid_t pid);
  // At attach: the BPF object, and the process captures made for its settings.
  void use_bpf(BpfObject& bpf);
  // A file with traced APIs was probed.
  void note_probed_file(const std::string& path);
  // Where processes are stopped at library loads: a watchdog that continues
  // them should cudatrace die (watchdog.h).
  void start_stop_watchdog();
  // The BPF object's probes, from attach on until the end detaches them.
  Probes& probes() const { return *bpf_->probes(); }

  const Options& opts_;
  Symbolizer& symbolizer_;
  BpfObject* bpf_ = nullptr;    // from attach on
  bool stop_at_loads_ = false;  // the loader probe stops processes (--dlopen-stop)
  bool loader_probed_ = false;  // a dynamic loader's _dl_debug_state is probed
  std::map<std::uint32_t, ProcessTimes> times_at_start_;

 private:
  AttachPolicy policy_;
  std::set<std::tuple<pid_t, std::uint64_t, std::uint64_t>> seen_mappings_;  // pid, inode, start
  std::set<std::pair<dev_t, ino_t>> probed_files_;
  std::function<void(pid_t)> probed_process_;
  // What is read in each process for the contexts BPF captures, at each look at its maps.
  std::vector<std::unique_ptr<ProcessCapture>> captures_;
  FacetNames facet_names_;
  // Driver functions probed on demand (Probes::defer_driver), per process:
  // those not probed yet by their address there, and the driver functions
  // its files import that no driver file of it defined yet.
  struct DemandProcess {
    struct Unprobed {
      std::string path;  // the driver's file, openable from here
      Probes::Deferred function;
    };
    std::map<std::uint64_t, Unprobed> unprobed;
    std::set<const Api*> imported;
    std::vector<std::uint64_t> told;  // addresses told to BPF
    std::uint32_t runtime_ranges = 0;
  };
  void note_for_demand(pid_t pid, const Mapping& m, const std::string& path, const Probes::FileResult& r);
  // Probes `pid`'s functions at `addrs` (and those it imports); `why` for -v.
  void probe_on_demand(pid_t pid, const std::vector<std::uint64_t>& addrs, const std::string& why);
  std::map<pid_t, DemandProcess> demand_;
};

// The kinds, one file each in src/record/.
std::unique_ptr<Tracee> make_command_tracee(const Options& opts, Symbolizer& symbolizer);
std::unique_ptr<Tracee> make_pid_tracee(const Options& opts, Symbolizer& symbolizer);
std::unique_ptr<Tracee> make_node_tracee(const Options& opts, Symbolizer& symbolizer);

// The one that `opts` asks for: --all-processes, -p PID or the command after --.
std::unique_ptr<Tracee> make_tracee(const Options& opts, Symbolizer& symbolizer);

}  // namespace cudatrace
