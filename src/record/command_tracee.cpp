// `cudatrace -- CMD`: the command is forked at once and held before exec
// until released, so that its first instruction runs probed. Probes cover
// every process (the BPF side follows the command's forks by tgid); each
// library load stops the loading process until its files are probed
// (--dlopen-stop). Tracing ends when the command exits, or a short grace
// after a stop signal; the exit status is the command's own.
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cudatrace/clock.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/record/tracee.h"
#include "cudatrace/target/command.h"
#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/nvtx_injection.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

// After Ctrl-C, how long the command (which got the signal too) has to
// exit, so that its last calls are still traced.
constexpr std::uint64_t kCommandGraceNs = 2000000000ull;

class CommandTracee final : public Tracee {
 public:
  CommandTracee(const Options& opts, Symbolizer& symbolizer) : Tracee(opts, symbolizer, {}) {}
  ~CommandTracee() override { abandon_command(command_); }

  TracedProcesses prepare() override {
    stop_at_loads_ = opts_.dlopen_stop != Options::DlopenStop::Never;
    TracedProcesses traced;
    traced.registered = true;
    traced.stop_at_loads = stop_at_loads_;
    // Seen from its start, the command's lookups of driver functions are
    // seen too: each is probed once code other than a runtime may call it
    // (its stops are the library loads'). Not when driver lines are asked
    // for, nor with --max-overhead, whose hot groups are fixed at attach.
    traced.driver_on_demand = stop_at_loads_ && !opts_.every_layer &&
                              opts_.selection.layer[static_cast<int>(Layer::Runtime)] &&
                              opts_.selection.layer[static_cast<int>(Layer::Driver)] && opts_.max_overhead_pct <= 0;
    return traced;
  }

  int attach(BpfObject& bpf, const RecordsNeeded& needs) override {
    use_bpf(bpf);
    std::string exe;
    if (const std::string problem = command_problem(opts_.command[0], exe); !problem.empty()) {
      error_line(problem);
      return kExitTarget;
    }
    if (opts_.nvtx) {
      std::string error;
      nvtx_library_ = NvtxInjection::create(error);
      if (!nvtx_library_) {
        error_line(error);
        return kExitTarget;
      }
      if (const char* other = std::getenv("NVTX_INJECTION64_PATH"))
        warn_line(std::string("--nvtx replaces NVTX_INJECTION64_PATH=") + other + " for the command");
    }
    CommandSetup setup{exe, opts_.command, needs.trace_on_stdout, nvtx_library_ ? nvtx_library_->path() : "",
                       inherited_stop_signals(), bpf.tracer_exit_fd()};
    std::string error;
    if (!fork_held_command(setup, command_, error)) {
      error_line(error);
      return kExitTarget;
    }
    if (!bpf.trace_process(command_.pid)) {
      error_line(std::string("cannot register the command's pid: ") + std::strerror(errno));
      return kExitKernel;
    }
    if (int rc = attach_libs(-1)) return rc;
    Probes::FileResult r;
    // Before the command runs: its first range is traced even with --no-dlopen-stop.
    if (nvtx_library_ && !probes().attach_file(nvtx_library_->path(), -1, r, error)) {
      error_line(error);
      return kExitKernel;
    }
    if (!probes().attach_file(exe, -1, r, error)) {
      // A script or an unreadable binary: its interpreter's loader still tells us about libraries.
      if (opts_.verbose) warn_line(terminal_safe(error));
    }
    const std::string interp = program_interpreter(exe);
    if (!interp.empty() && !probes().attach_loader(interp, -1, error))
      warn_line(terminal_safe(error + " (libraries loaded by " + exe + " will be missed)"));
    // After the fork, so that the command is the first child; none when a
    // stop came meanwhile: the command will never run.
    if (!stop_signal()) start_stop_watchdog();
    return kExitOk;
  }

  int release(int stop_signal) override {
    if (stop_signal) return stopped_at_start(stop_signal);  // not started after all
    std::string error;
    if (!release_command(command_, error)) {
      error_line(error);
      return kExitTarget;
    }
    return kExitOk;
  }

  bool keep_tracing(int stop_signal) override {
    if (exited()) return false;
    if (!stop_signal) return true;
    // SIGTERM or SIGHUP was sent to cudatrace alone (Ctrl-C reaches the command too): pass it on.
    if (!stop_deadline_ns_ && stop_signal != SIGINT) kill(command_.pid, stop_signal);
    if (!stop_deadline_ns_) stop_deadline_ns_ = monotonic_ns() + kCommandGraceNs;
    return monotonic_ns() <= stop_deadline_ns_;
  }

  // 128 + the signal that ended the command, or that stopped cudatrace
  // while it still ran (as a shell shows it).
  int exit_status(int stop_signal) const override {
    if (command_.pid <= 0) return kExitOk;
    if (!reaped_) return stop_signal ? 128 + stop_signal : kExitOk;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
    return kExitOk;
  }

  // The command (never released) has not run: as if the signal ended it.
  int stopped_at_start(int stop_signal) const override { return 128 + stop_signal; }

 private:
  bool exited() {
    if (reaped_) return true;
    int status = 0;
    const pid_t r = waitpid(command_.pid, &status, WNOHANG);
    if (r == command_.pid) {
      status_ = status;
      reaped_ = true;
    }
    return reaped_ || (r < 0 && errno == ECHILD);
  }

  HeldCommand command_;  // held before exec until released
  std::unique_ptr<NvtxInjection> nvtx_library_;  // --nvtx
  int status_ = 0;
  bool reaped_ = false;
  std::uint64_t stop_deadline_ns_ = 0;  // after a stop signal: the command's grace
};

}  // namespace

std::unique_ptr<Tracee> make_command_tracee(const Options& opts, Symbolizer& symbolizer) {
  return std::make_unique<CommandTracee>(opts, symbolizer);
}

}  // namespace cudatrace
