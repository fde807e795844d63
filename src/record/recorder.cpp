// The recorder's course: start() loads and attaches (recorder_bpf.cpp,
// recorder_attach.cpp), release() lets the command run, feed() drains the
// ring until the target ends or a signal comes, finish() detaches and
// reads the ring to its end; then the outcome is an exit status.
#include "cudatrace/record/recorder.h"

#include <bpf/libbpf.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cudatrace/bpf_abi.h"  // before the skeleton: its struct ct_config
#include "cudatrace.skel.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/target/process_state.h"

namespace cudatrace {

namespace {

// Whole-node mode with perf-event uprobes (kernels before 6.6) holds a link
// per probe of every CUDA file: thousands, past the usual 1024 descriptors.
void raise_file_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

// After Ctrl-C in command mode, how long the command (which got the signal
// too) has to exit, so that its last calls are still traced.
constexpr std::uint64_t kCommandGraceNs = 2000000000ull;

}  // namespace

Recorder::Recorder(const Options& opts) : opts_(opts) {}

Recorder::~Recorder() {
  budget_.reset();
  probes_.reset();  // detach before the programs go away
  cost_probes_.reset();
  for (bpf_link* l : tp_links_) bpf_link__destroy(l);
  cudatrace_bpf__destroy(skel_);
  abandon_command(command_);
  if (target_fd_ >= 0) close(target_fd_);
}

// A stop during the start-up: the command (never released) has not run.
int Recorder::stopped_at_start() const { return command_mode() ? 128 + stop_signal() : kExitOk; }

bool Recorder::private_trace() const { return trace_is_private(opts_.pid); }

int Recorder::start(const RecordsNeeded& needs) {
  needs_ = needs;
  start_ns_ = monotonic_ns();
  catch_stop_signals();  // first: a stop is honoured at any moment of the start-up
  if (opts_.all_processes) raise_file_limit();
  names_.set_symbolizer(
      [this](std::uint32_t pid, std::uint64_t addr) { return symbolizer_.function_at(static_cast<pid_t>(pid), addr); });
  read_string_ = [this](std::uint32_t pid, std::uint64_t addr, std::string& out) {
    return symbolizer_.string_at(static_cast<pid_t>(pid), addr, CT_MAX_PAYLOAD, out);
  };
  const std::uint64_t load_start_ns = monotonic_ns();
  decide_dlopen_stop();
  int loaded = kExitOk;
  {
    // Nothing started yet needs undoing: the kernel frees the object at exit.
    const ExitAtStop exit_at_stop([this](int signal) { return command_mode() ? 128 + signal : kExitOk; });
    loaded = load();
  }
  if (stop_signal()) return stopped_at_start();
  if (loaded) return loaded;
  // -p: before the loader probe can stop the target. Command mode: after
  // the command is forked (it waits to be released), so it is the first child.
  if (opts_.pid > 0) start_stop_watchdog();
  if (int rc = opts_.all_processes ? attach_node() : opts_.pid > 0 ? attach_pid_target() : start_command()) return rc;
  if (stop_signal()) return stopped_at_start();
  if (opts_.pid <= 0) start_stop_watchdog();
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: BPF loaded and %zu probes attached in %.1f ms (%s)\n", probes_->probe_count(),
                 double(monotonic_ns() - load_start_ns) / 1e6,
                 probes_->mode() == AttachMode::MultiSession ? "uprobe sessions"
                 : probes_->mode() == AttachMode::PerfPair   ? "perf-event uprobe + uretprobe pairs"
                                                             : "uprobe + uretprobe pairs");
  signal(SIGPIPE, SIG_IGN);  // after the command's fork: it keeps its own
  return kExitOk;
}

// Said once the outputs exist (the driver opens them between start and
// release): whoever waits for this line finds the -o file there.
void Recorder::announce() const {
  if (opts_.all_processes)
    std::fprintf(stderr, "cudatrace: tracing every process of this host (%zu files probed); Ctrl-C to stop\n",
                 probed_files_.size());
  if (waiting_for_cuda_)
    std::fprintf(stderr,
                 "cudatrace: process %d has no CUDA library loaded yet; waiting for it to load one (Ctrl-C to stop)\n",
                 opts_.pid);
  else if (opts_.pid > 0)
    std::fprintf(stderr, "cudatrace: tracing process %d (%zu probes); Ctrl-C to stop\n", opts_.pid,
                 probes_->probe_count());
}

int Recorder::release() {
  if (command_mode() && stop_signal()) return stopped_at_start();  // not started after all
  announce();
  std::string error;
  if (!release_command(command_, error)) {
    error_line(error);
    return kExitTarget;
  }
  if (opts_.max_overhead_pct > 0) start_budget();
  return kExitOk;
}

bool Recorder::feed(CallConsumer& to, int wait_ms) {
  consumer_ = &to;
  // Library loads and execs first: they are waited for by no one, but a
  // late attach misses calls (docs/prometheus.md).
  if (control_ring_) control_ring_->drain();
  // Most records are submitted without a wake-up: the timeout collects them.
  if (!ring_->poll(budget_ ? budget_->timeout_ms(monotonic_ns(), wait_ms) : wait_ms)) {
    error_line(std::string("reading the ring buffer: ") + std::strerror(errno));
    return false;
  }
  if (budget_) budget_->tick(monotonic_ns());
  forget_exited();
  if (opts_.all_processes) rescan_node();
  if (target_gone()) return false;
  const int stop = stop_signal();
  if (!stop) return true;
  if (command_.pid <= 0) return false;
  // SIGTERM was sent to cudatrace alone (Ctrl-C reaches the command too): pass it on.
  if (!stop_deadline_ns_ && stop == SIGTERM) kill(command_.pid, SIGTERM);
  if (!stop_deadline_ns_) stop_deadline_ns_ = monotonic_ns() + kCommandGraceNs;
  return monotonic_ns() <= stop_deadline_ns_;
}

void Recorder::finish(CallConsumer& to) {
  consumer_ = &to;
  ring_->drain();
  // Detach first, then read the ring to its end: every record written is
  // seen, and a process stopped at a library load is continued.
  if (budget_) budget_->stop(monotonic_ns());
  probes_.reset();
  cost_probes_.reset();
  for (bpf_link* l : tp_links_) bpf_link__destroy(l);
  tp_links_.clear();
  ring_->drain();
  report_open_calls();
  const std::vector<__u64> totals = read_counters();
  if (totals[CT_CNT_ACTIVITY_FULL])
    warn_line(std::to_string(totals[CT_CNT_ACTIVITY_FULL]) + " launches and copies were sent as records: the BPF "
              "activity table (" + std::to_string(CT_ACTIVITY_ENTRIES) + " entries) was full; nothing is lost");
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: read %llu call records\n", static_cast<unsigned long long>(records_));
}

// The command's own status in command mode: 128 + the signal that ended it,
// or that stopped cudatrace while it still ran (as a shell shows it).
int Recorder::exit_status() const {
  if (command_.pid > 0) {
    if (!child_reaped_) return stop_signal() ? 128 + stop_signal() : kExitOk;
    if (WIFEXITED(child_status_)) return WEXITSTATUS(child_status_);
    if (WIFSIGNALED(child_status_)) return 128 + WTERMSIG(child_status_);
  }
  return kExitOk;
}

}  // namespace cudatrace
