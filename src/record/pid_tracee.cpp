// -p PID: a process that runs already. Probes are bound to it; library
// loads stop it until its new files are probed (--dlopen-stop), unless it
// is a job of an interactive shell. Tracing ends when it exits.
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "cudatrace/record/cost.h"
#include "cudatrace/record/tracee.h"
#include "cudatrace/target/process.h"
#include "cudatrace/target/process_state.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

class PidTracee final : public Tracee {
 public:
  PidTracee(const Options& opts, Symbolizer& symbolizer) : Tracee(opts, symbolizer, bound()), pid_(opts.pid) {}
  ~PidTracee() override {
    if (pidfd_ >= 0) close(pidfd_);
  }

  TracedProcesses prepare() override {
    using Mode = Options::DlopenStop;
    stop_at_loads_ = opts_.dlopen_stop == Mode::Always || (opts_.dlopen_stop == Mode::Auto && !is_shell_job(pid_));
    if (opts_.dlopen_stop == Mode::Auto && !stop_at_loads_)
      warn_line("process " + std::to_string(pid_) +
                " is a job of an interactive shell, which would report it Stopped: not pausing it at library loads, "
                "so its first calls into a library it loads from now on can be missed (--dlopen-stop=always pauses "
                "it)");
    TracedProcesses traced;
    traced.only = pid_;
    traced.stop_at_loads = stop_at_loads_;
    return traced;
  }

  int attach(BpfObject& bpf, const RecordsNeeded&) override {
    use_bpf(bpf);
    start_stop_watchdog();  // before the loader probe can stop the process
    if (!process_exists(pid_)) {
      error_line("no such process: " + std::to_string(pid_));
      return kExitTarget;
    }
    pidfd_ = pidfd_open(pid_);
    if (const auto t = process_times(pid_)) times_at_start_[static_cast<std::uint32_t>(pid_)] = *t;
    if (opts_.nvtx && !started_with_nvtx_injection(pid_))
      warn_line("process " + std::to_string(pid_) +
                " was started without NVTX_INJECTION64_PATH: its NVTX calls do nothing and no range will be seen "
                "(docs/nvtx.md, -p mode)");
    if (int rc = attach_libs(pid_)) return rc;
    if (int rc = refuse_untraceable()) return rc;
    attach_mappings(pid_);
    const std::size_t api_probes = probes().probe_count() - (loader_probed_ ? 1 : 0);
    if (api_probes == 0 && opts_.libs.empty() && loader_probed_) {
      // Like a command that dlopens its CUDA library later: the loader probe
      // reports the load, and probes are attached then.
      waiting_for_cuda_ = true;
      return kExitOk;
    }
    if (api_probes == 0 && opts_.libs.empty()) return no_cuda();
    return kExitOk;
  }

  int release(int /*stop_signal*/) override {
    if (waiting_for_cuda_)
      std::fprintf(stderr,
                   "cudatrace: process %d has no CUDA library loaded yet; waiting for it to load one (Ctrl-C to "
                   "stop)\n",
                   pid_);
    else
      std::fprintf(stderr, "cudatrace: tracing process %d (%zu probes); Ctrl-C to stop\n", pid_,
                   probes().probe_count());
    return kExitOk;
  }

  bool keep_tracing(int stop_signal) override { return !exited() && !stop_signal; }

  bool private_trace() const override { return trace_is_private(pid_); }

 private:
  static AttachPolicy bound() {
    AttachPolicy policy;
    policy.bound_to_process = true;
    return policy;
  }

  bool exited() const {
    if (pidfd_ < 0) return !process_exists(pid_);
    pollfd p{pidfd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }

  // A kernel thread or a zombie has nothing to trace; a process out of
  // root's reach (another user namespace's, or kept from ptrace by Yama or
  // an LSM) is said to be so, not to have no CUDA.
  int refuse_untraceable() const {
    const std::string pid = std::to_string(pid_);
    std::string comm;
    switch (process_kind(pid_, comm)) {
      case ProcessKind::KernelThread:
        error_line("process " + pid + " (" + terminal_safe(comm) +
                   ") is a kernel thread: it runs no user-space code to trace");
        return kExitTarget;
      case ProcessKind::Zombie:
        error_line("process " + pid + " (" + terminal_safe(comm) +
                   ") has exited: its parent has not reaped it yet, and nothing of it is left to trace");
        return kExitTarget;
      case ProcessKind::User:
        break;
    }
    if (std::vector<Mapping> maps; !read_maps(pid_, maps)) {
      const int why = errno;
      error_line("cannot read /proc/" + pid + "/maps: " + std::strerror(why) +
                 (why == EACCES || why == EPERM
                      ? ": cudatrace may not inspect process " + pid +
                            " (it needs ptrace access to it; it may be in another user namespace, or protected by "
                            "Yama or an LSM)"
                      : std::string()));
      return why == EACCES || why == EPERM ? kExitPermission : kExitTarget;
    }
    return kExitOk;
  }

  // Nothing to probe, and no dynamic loader that could map it later.
  int no_cuda() const {
    std::vector<Mapping> maps;
    read_maps(pid_, maps);
    std::set<std::string> files;
    for (const Mapping& m : maps)
      if (m.exec && !m.path.empty()) files.insert(m.path);
    std::string examples;
    int n = 0;
    for (const std::string& f : files)
      if (n++ < 3) examples += (examples.empty() ? "" : ", ") + terminal_safe(f);
    error_line("no CUDA runtime or driver API found in process " + std::to_string(pid_) + ": looked in the " +
               std::to_string(files.size()) + " executable files it maps (" + examples + (n > 3 ? ", ..." : "") +
               ") via /proc/" + std::to_string(pid_) +
               "/maps, and it has no dynamic loader to load one later; name the library with --lib PATH");
    return kExitTarget;
  }

  pid_t pid_;
  int pidfd_ = -1;
  bool waiting_for_cuda_ = false;  // no CUDA library mapped yet: the loader probe waits for one
};

}  // namespace

std::unique_ptr<Tracee> make_pid_tracee(const Options& opts, Symbolizer& symbolizer) {
  return std::make_unique<PidTracee>(opts, symbolizer);
}

}  // namespace cudatrace
