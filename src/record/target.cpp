// What every kind of target shares: attaching to what a process maps, the
// --lib files, the stop watchdog, forgetting a process that exited; and
// the choice of a kind.
#include "cudatrace/record/target.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <bpf/bpf.h>

#include "cudatrace/clock.h"
#include <fmt/format.h>

#include "cudatrace/record/cost.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/record/watchdog.h"
#include "cudatrace/target/process.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

bool is_loader(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("ld-linux", 0) == 0 || base.rfind("ld-musl", 0) == 0 || base.rfind("ld.so", 0) == 0;
}

}  // namespace

std::unique_ptr<Target> make_target(const Options& opts, Symbolizer& symbolizer) {
  if (opts.all_processes) return make_node_target(opts, symbolizer);
  if (opts.pid > 0) return make_pid_target(opts, symbolizer);
  return make_command_target(opts, symbolizer);
}

void Target::on_map_change(pid_t pid) {
  if (bpf_ && bpf_->probes()) attach_mappings(pid);  // not after the end's detach
  // A process stopped at a library load waits while its process context is
  // read: one that exits before the reader reaches its first call is still found.
  if (opts_.otel) process_context(static_cast<std::uint32_t>(pid), true);
}

void Target::find_thread_context(pid_t pid, const std::vector<Mapping>& maps) {
  const int fd = bpf_->otel_tls_fd();
  const auto key = static_cast<std::uint32_t>(pid);
  ct_tls_target t{};
  std::string why;
  if (thread_contexts_.find(pid, maps, t, why)) {
    ct_tls_target old{};
    // Kept as it is when BPF already found the offsets (a later library load).
    if (bpf_map_lookup_elem(fd, &key, &old) == 0 && old.link_map == t.link_map && old.st_value == t.st_value) return;
    if (bpf_map_update_elem(fd, &key, &t, BPF_ANY) != 0 && opts_.verbose)
      warn_line("pid " + std::to_string(pid) + ": cannot tell BPF of its thread context");
    else if (opts_.verbose)
      std::fprintf(stderr, "cudatrace: pid %d: OpenTelemetry thread context found\n", pid);
  } else {
    bpf_map_delete_elem(fd, &key);  // after an exec
  }
}

const ProcessContext* Target::process_context(std::uint32_t pid, bool now_anyway) {
  if (!opts_.otel) return nullptr;
  OtelProcess& p = otel_[pid];
  if (p.context) return p.context.get();
  const std::uint64_t now = monotonic_ns();
  if (now < p.next_look_ns && !now_anyway) return nullptr;
  p.next_look_ns = now + 1000000000ull;
  std::vector<Mapping> maps;
  ProcessContext ctx;
  if (!read_maps(static_cast<pid_t>(pid), maps) || !read_process_context(static_cast<pid_t>(pid), maps, ctx))
    return nullptr;
  p.context = std::make_unique<ProcessContext>(std::move(ctx));
  return p.context.get();
}

void Target::forget_process(pid_t pid) {
  otel_.erase(static_cast<std::uint32_t>(pid));
  if (bpf_ && bpf_->thread_ctx()) {  // a reused pid is another program
    const auto key = static_cast<std::uint32_t>(pid);
    bpf_map_delete_elem(bpf_->otel_tls_fd(), &key);
  }
  cpu_at_start_.erase(static_cast<std::uint32_t>(pid));
  if (opts_.py_stack && bpf_) bpf_->forget_python(static_cast<std::uint32_t>(pid));
  python_unreadable_.erase(pid);
  seen_mappings_.erase(seen_mappings_.lower_bound({pid, 0, 0}), seen_mappings_.lower_bound({pid + 1, 0, 0}));
}

void Target::attach_mappings(pid_t pid) {
  std::vector<Mapping> maps;
  if (!read_maps(pid, maps)) return;
  symbolizer_.capture(pid, maps);
  if (bpf_->thread_ctx()) find_thread_context(pid, maps);
  if (opts_.py_stack) look_for_python(pid);
  const pid_t probe_pid = policy_.bound_to_process ? pid : -1;
  for (const Mapping& m : maps) {
    if (stop_signal()) return;  // many new files take long to probe (seconds as perf events); Ctrl-C must not wait
    if (!m.exec || m.path.empty()) continue;
    if (!seen_mappings_.emplace(pid, m.inode, m.start).second) continue;
    const std::string path = host_path(pid, m);
    std::string error;
    if (is_loader(m.path)) {
      if (probes().attach_loader(path, probe_pid, error))
        loader_probed_ = true;
      else if (!policy_.unasked_processes || opts_.verbose)
        warn_line(terminal_safe(error));
      continue;
    }
    Probes::FileResult r;
    if (!probes().attach_file(path, probe_pid, r, error)) {
      if (opts_.verbose) warn_line(terminal_safe(error));
      continue;
    }
    if (r.apis) {
      note_probed_file(path);
      if (probed_process_) probed_process_(pid);
      if (policy_.unasked_processes && !cpu_at_start_.count(static_cast<std::uint32_t>(pid)))
        if (const auto cpu = process_cpu_ns(pid)) cpu_at_start_[static_cast<std::uint32_t>(pid)] = *cpu;
    }
    if (r.apis && opts_.verbose) {
      std::fprintf(stderr, "cudatrace: pid %d: %s: %d APIs\n", pid, terminal_safe(m.path).c_str(), r.apis);
      std::vector<PlannedProbe> planned;
      if (probes().plan_file(path, planned, error))
        std::fprintf(stderr, "cudatrace:   %s\n", terminal_safe(probe_summary(m.path, planned)).c_str());
    }
  }
}

int Target::attach_libs(pid_t pid) {
  for (const std::string& lib : opts_.libs) {
    Probes::FileResult r;
    std::string error;
    if (!probes().attach_file(lib, pid, r, error)) {
      error_line(terminal_safe(error));
      return kExitTarget;
    }
    if (r.apis == 0) {
      error_line(lib + ": no traced CUDA API symbol in it (a stripped program has no symbol table left to find them in)");
      return kExitTarget;
    }
    note_probed_file(lib);
  }
  return kExitOk;
}

void Target::look_for_python(pid_t pid) {
  if (!bpf_ || symbolizer_.python().knows(pid) || python_unreadable_.count(pid)) return;
  std::string why;
  const std::optional<PyInterpreter> py = symbolizer_.find_python(pid, why);
  if (!py) {
    if (why.empty()) return;  // no Python (yet: a library loaded later may bring it)
    python_unreadable_.insert(pid);
    warn_line(fmt::format("pid {}: {}; its calls are traced without Python stacks", pid, why));
    return;
  }
  if (!bpf_->set_python(static_cast<std::uint32_t>(pid), py->bpf)) {
    python_unreadable_.insert(pid);
    warn_line(fmt::format("pid {}: cannot tell BPF where Python {} keeps its frames: {}; its calls are traced "
                          "without Python stacks", pid, py->version, std::strerror(errno)));
    return;
  }
  symbolizer_.python().set(pid, py->code);
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: pid %d: Python %s, _PyRuntime at 0x%llx\n", pid, py->version.c_str(),
                 static_cast<unsigned long long>(py->bpf.runtime));
}

void Target::note_probed_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) probed_files_.emplace(st.st_dev, st.st_ino);
}

void Target::start_stop_watchdog() {
  if (stop_at_loads_ && start_watchdog(bpf_->events_fd(), bpf_->tracer_exit_fd()) < 0)
    warn_line(std::string("cannot start the watchdog process: ") + std::strerror(errno) +
              "; if cudatrace is killed while a process waits at a library load, send it SIGCONT");
}

}  // namespace cudatrace
