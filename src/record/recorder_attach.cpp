// The recorder's target: a -p process or the command it starts, whether
// library loads pause it (--dlopen-stop), attaching to what each process
// maps, and forgetting processes and threads that exit.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cudatrace/bpf_abi.h"  // before the skeleton: its struct ct_config
#include "cudatrace.skel.h"
#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/process.h"
#include "cudatrace/target/process_state.h"
#include "cudatrace/record/recorder.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/record/watchdog.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

bool is_loader(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("ld-linux", 0) == 0 || base.rfind("ld-musl", 0) == 0 || base.rfind("ld.so", 0) == 0;
}

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

void Recorder::decide_dlopen_stop() {
  using Mode = Options::DlopenStop;
  // Whole-node mode stops no process (docs/prometheus.md: what can be missed).
  stop_at_loads_ = !opts_.all_processes &&
                   (opts_.dlopen_stop == Mode::Always ||
                    (opts_.dlopen_stop == Mode::Auto && !(opts_.pid > 0 && is_shell_job(opts_.pid))));
  if (opts_.dlopen_stop == Mode::Auto && !stop_at_loads_ && !opts_.all_processes)
    warn_line("process " + std::to_string(opts_.pid) +
              " is a job of an interactive shell, which would report it Stopped: not pausing it at library loads, "
              "so its first calls into a library it loads from now on can be missed (--dlopen-stop=always pauses it)");
}

void Recorder::start_stop_watchdog() {
  if (stop_at_loads_ && start_watchdog(bpf_map__fd(skel_->maps.events)) < 0)
    warn_line(std::string("cannot start the watchdog process: ") + std::strerror(errno) +
              "; if cudatrace is killed while a process waits at a library load, send it SIGCONT");
}

// Attaches to every CUDA-bearing file `pid` maps that was not seen before,
// and to its dynamic loader. In -p mode probes are bound to that process;
// in command mode they cover every process (the BPF side filters by tgid).
// Its paths are the process's to choose: every message escapes them.
void Recorder::attach_mappings(pid_t pid) {
  std::vector<Mapping> maps;
  if (!read_maps(pid, maps)) return;
  symbolizer_.capture(pid, maps);
  const pid_t probe_pid = opts_.pid > 0 ? pid : -1;
  for (const Mapping& m : maps) {
    if (opts_.all_processes && stop_signal()) return;  // a process of many new files takes long
    if (!m.exec || m.path.empty()) continue;
    if (!seen_mappings_.emplace(pid, m.inode, m.start).second) continue;
    const std::string path = host_path(pid, m);
    std::string error;
    if (is_loader(m.path)) {
      if (probes_->attach_loader(path, probe_pid, error))
        loader_probed_ = true;
      else if (!opts_.all_processes || opts_.verbose)  // whole node: often a process that just exited
        warn_line(terminal_safe(error));
      continue;
    }
    Probes::FileResult r;
    if (!probes_->attach_file(path, probe_pid, r, error)) {
      if (opts_.verbose) warn_line(terminal_safe(error));
      continue;
    }
    if (r.apis) {
      struct stat st {};
      if (stat(path.c_str(), &st) == 0) probed_files_.emplace(st.st_dev, st.st_ino);
      if (node_stats_) note_process(pid);
      // Whole node: the cost report's share of a process's CPU time counts
      // from when it was found (it may have run for hours before).
      if (opts_.all_processes && !cpu_at_start_.count(static_cast<std::uint32_t>(pid)))
        if (const auto cpu = process_cpu_ns(pid)) cpu_at_start_[static_cast<std::uint32_t>(pid)] = *cpu;
    }
    if (r.apis && opts_.verbose) {
      std::fprintf(stderr, "cudatrace: pid %d: %s: %d APIs\n", pid, terminal_safe(m.path).c_str(), r.apis);
      std::vector<PlannedProbe> planned;
      if (probes_->plan_file(path, planned, error))
        std::fprintf(stderr, "cudatrace:   %s\n", terminal_safe(probe_summary(m.path, planned)).c_str());
    }
  }
}

int Recorder::attach_libs(pid_t pid) {
  for (const std::string& lib : opts_.libs) {
    Probes::FileResult r;
    std::string error;
    if (!probes_->attach_file(lib, pid, r, error)) {
      error_line(terminal_safe(error));
      return kExitTarget;
    }
    if (r.apis == 0) {
      error_line(lib + ": no traced CUDA API symbol in it (a stripped program has no symbol table left to find them in)");
      return kExitTarget;
    }
    struct stat st {};
    if (stat(lib.c_str(), &st) == 0) probed_files_.emplace(st.st_dev, st.st_ino);
  }
  return kExitOk;
}

int Recorder::attach_pid_target() {
  if (!process_exists(opts_.pid)) {
    error_line("no such process: " + std::to_string(opts_.pid));
    return kExitTarget;
  }
  target_fd_ = pidfd_open(opts_.pid);
  if (const auto cpu = process_cpu_ns(opts_.pid)) cpu_at_start_[static_cast<std::uint32_t>(opts_.pid)] = *cpu;
  if (opts_.nvtx && !started_with_nvtx_injection(opts_.pid))
    warn_line("process " + std::to_string(opts_.pid) +
              " was started without NVTX_INJECTION64_PATH: its NVTX calls do nothing and no range will be seen "
              "(docs/nvtx.md, -p mode)");
  if (int rc = attach_libs(opts_.pid)) return rc;
  const std::string pid = std::to_string(opts_.pid);
  std::string comm;
  switch (process_kind(opts_.pid, comm)) {
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
  // Readable by root unless the process is out of its reach (another user
  // namespace's, or kept from ptrace by Yama or an LSM): say so, not "no CUDA".
  if (std::vector<Mapping> maps; !read_maps(opts_.pid, maps)) {
    const int why = errno;
    error_line("cannot read /proc/" + pid + "/maps: " + std::strerror(why) +
               (why == EACCES || why == EPERM
                    ? ": cudatrace may not inspect process " + pid +
                          " (it needs ptrace access to it; it may be in another user namespace, or protected by Yama "
                          "or an LSM)"
                    : std::string()));
    return why == EACCES || why == EPERM ? kExitPermission : kExitTarget;
  }
  attach_mappings(opts_.pid);
  const std::size_t api_probes = probes_->probe_count() - (loader_probed_ ? 1 : 0);
  if (api_probes == 0 && opts_.libs.empty() && loader_probed_) {
    // Like a command that dlopens its CUDA library later: the loader probe
    // reports the load, and probes are attached then.
    waiting_for_cuda_ = true;
    return kExitOk;
  }
  if (api_probes == 0 && opts_.libs.empty()) {
    // Nothing to probe, and no dynamic loader that could map it later.
    std::vector<Mapping> maps;
    read_maps(opts_.pid, maps);
    std::set<std::string> files;
    for (const Mapping& m : maps)
      if (m.exec && !m.path.empty()) files.insert(m.path);
    std::string examples;
    int n = 0;
    for (const std::string& f : files)
      if (n++ < 3) examples += (examples.empty() ? "" : ", ") + terminal_safe(f);
    error_line("no CUDA runtime or driver API found in process " + std::to_string(opts_.pid) + ": looked in the " +
               std::to_string(files.size()) + " executable files it maps (" + examples + (n > 3 ? ", ..." : "") +
               ") via /proc/" + std::to_string(opts_.pid) +
               "/maps, and it has no dynamic loader to load one later; name the library with --lib PATH");
    return kExitTarget;
  }
  return kExitOk;
}

int Recorder::start_command() {
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
  CommandSetup setup{exe, opts_.command, needs_.trace_on_stdout, nvtx_library_ ? nvtx_library_->path() : "",
                     inherited_stop_signals()};
  std::string error;
  if (!fork_held_command(setup, command_, error)) {
    error_line(error);
    return kExitTarget;
  }

  const __u32 tgid = static_cast<__u32>(command_.pid);
  const __u8 one = 1;
  if (bpf_map__update_elem(skel_->maps.traced_tgids, &tgid, sizeof tgid, &one, sizeof one, BPF_ANY) != 0) {
    error_line(std::string("cannot register the command's pid: ") + std::strerror(errno));
    return kExitKernel;
  }
  if (int rc = attach_libs(-1)) return rc;
  Probes::FileResult r;
  // Before the command runs: its first range is traced even with --no-dlopen-stop.
  if (nvtx_library_ && !probes_->attach_file(nvtx_library_->path(), -1, r, error)) {
    error_line(error);
    return kExitKernel;
  }
  if (!probes_->attach_file(exe, -1, r, error)) {
    // A script or an unreadable binary: its interpreter's loader still tells us about libraries.
    if (opts_.verbose) warn_line(terminal_safe(error));
  }
  const std::string interp = program_interpreter(exe);
  if (!interp.empty() && !probes_->attach_loader(interp, -1, error))
    warn_line(terminal_safe(error + " (libraries loaded by " + exe + " will be missed)"));
  return kExitOk;
}

bool Recorder::target_gone() {
  if (opts_.all_processes) return false;  // until stopped
  if (command_.pid > 0) {
    if (child_reaped_) return true;
    int status = 0;
    const pid_t r = waitpid(command_.pid, &status, WNOHANG);
    if (r == command_.pid) {
      child_status_ = status;
      child_reaped_ = true;
      return true;
    }
    return r < 0 && errno == ECHILD;
  }
  if (target_fd_ >= 0) {
    pollfd p{target_fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return !process_exists(opts_.pid);
}

void Recorder::on_map_change(const ct_map_change& m) {
  if (probes_) attach_mappings(static_cast<pid_t>(m.pid));
  stacks_.forget(static_cast<pid_t>(m.pid));
  if (m.stopped) kill(static_cast<pid_t>(m.pid), SIGCONT);
}

// What is kept per process and per thread goes when they exit, here and
// past the consumer. A process found gone is forgotten one look later (a
// second on), after the ring has been read past every record it wrote.
void Recorder::forget_exited() {
  const std::uint64_t now = monotonic_ns();
  if (now < next_exit_check_ns_) return;
  next_exit_check_ns_ = now + 1000000000ull;
  for (pid_t pid : exited_) {
    const auto id = static_cast<std::uint32_t>(pid);
    symbolizer_.forget(pid);
    names_.forget(id);
    stacks_.forget(pid);
    cpu_at_start_.erase(id);  // whole node: a reused pid is found afresh
    seen_mappings_.erase(seen_mappings_.lower_bound({pid, 0, 0}), seen_mappings_.lower_bound({pid + 1, 0, 0}));
    tracked_pids_.erase(id);
    tracked_tids_.erase(id);
    consumer_->forget_process(id);
  }
  for (auto [pid, tid] : exited_threads_) {
    tracked_tids_[pid].erase(tid);
    consumer_->forget_thread(pid, tid);
  }
  exited_.clear();
  exited_threads_.clear();
  last_pid_ = last_tid_ = 0;  // a reused pid or tid is tracked afresh
  std::set<pid_t> known;
  for (pid_t pid : symbolizer_.processes()) known.insert(pid);
  for (std::uint32_t pid : tracked_pids_) known.insert(static_cast<pid_t>(pid));
  for (pid_t pid : known) {
    if (!process_exists(pid)) {
      exited_.push_back(pid);
      continue;
    }
    const auto threads = tracked_tids_.find(static_cast<std::uint32_t>(pid));
    if (threads == tracked_tids_.end()) continue;
    for (std::uint32_t tid : threads->second)
      if (access(fmt::format("/proc/{}/task/{}", pid, tid).c_str(), F_OK) != 0)
        exited_threads_.emplace_back(static_cast<std::uint32_t>(pid), tid);
  }
}

}  // namespace cudatrace
