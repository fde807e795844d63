// What every kind of target shares: attaching to what a process maps, the
// --lib files, the stop watchdog, forgetting a process that exited; and
// the choice of a kind.
#include "cudatrace/record/tracee.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cudatrace/clock.h"
#include <fmt/format.h>

#include "cudatrace/record/cost.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/record/watchdog.h"
#include "cudatrace/target/process.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

// The C library (or the old libdl) defines dlsym and dlvsym.
bool is_c_library(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("libc.so", 0) == 0 || base.rfind("libdl.so", 0) == 0;
}

bool is_loader(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("ld-linux", 0) == 0 || base.rfind("ld-musl", 0) == 0 || base.rfind("ld.so", 0) == 0;
}

}  // namespace

std::unique_ptr<Tracee> make_tracee(const Options& opts, Symbolizer& symbolizer) {
  if (opts.all_processes) return make_node_tracee(opts, symbolizer);
  if (opts.pid > 0) return make_pid_tracee(opts, symbolizer);
  return make_command_tracee(opts, symbolizer);
}

void Tracee::on_map_change(pid_t pid, std::uint64_t wanted, std::uint64_t wanted_by) {
  if (wanted) {
    if (!bpf_ || !bpf_->probes()) return;
    std::string why = "looked up";
    if (opts_.verbose) {
      const Symbolizer::Location at = symbolizer_.locate(pid, wanted_by);
      if (!at.module.empty())
        why += fmt::format(" at {}+{:#x}", at.module.substr(at.module.rfind('/') + 1), at.module_offset);
    }
    probe_on_demand(pid, {wanted}, why);
    return;
  }
  if (bpf_ && bpf_->probes()) attach_mappings(pid);  // not after the end's detach
  for (const auto& c : captures_) c->library_loaded(pid);
}

void Tracee::use_bpf(BpfObject& bpf) {
  bpf_ = &bpf;
  captures_ = make_process_captures({bpf, bpf.settings(), symbolizer_, opts_, policy_.bound_to_process});
  for (const auto& c : captures_) c->name_facet(facet_names_);
}

void Tracee::say_what_was_missed() const {
  for (const auto& c : captures_) c->say_what_was_missed();
}

void Tracee::forget_process(pid_t pid) {
  for (const auto& c : captures_) c->forget(pid);  // a reused pid is another program
  if (const auto d = demand_.find(pid); d != demand_.end()) {
    if (bpf_) bpf_->forget_driver_fns(static_cast<std::uint32_t>(pid), d->second.told, d->second.runtime_ranges);
    demand_.erase(d);
  }
  seen_mappings_.erase(seen_mappings_.lower_bound({pid, 0, 0}), seen_mappings_.lower_bound({pid + 1, 0, 0}));
}

void Tracee::attach_mappings(pid_t pid) {
  std::vector<Mapping> maps;
  if (!read_maps(pid, maps)) return;
  symbolizer_.capture(pid, maps);
  for (const auto& c : captures_) c->look(pid, maps);
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
    if (probes().defers_driver() && is_c_library(m.path) && !probes().attach_lookups(path, probe_pid, error) &&
        !error.empty())
      warn_line(terminal_safe(error + " (driver functions a library looks up with dlsym may be missed)"));
    Probes::FileResult r;
    if (!probes().attach_file(path, probe_pid, r, error)) {
      if (opts_.verbose) warn_line(terminal_safe(error));
      continue;
    }
    if (probes().defers_driver()) note_for_demand(pid, m, path, r);
    if (r.apis) {
      note_probed_file(path);
      if (probed_process_) probed_process_(pid);
      if (!times_at_start_.count(static_cast<std::uint32_t>(pid)))
        if (std::optional<ProcessTimes> t = process_times(pid)) {
          if (!policy_.unasked_processes) t->cpu_ns = t->run_delay_ns = 0;  // all of its life is traced
          times_at_start_[static_cast<std::uint32_t>(pid)] = *t;
        }
    }
    if (r.apis && opts_.verbose) {
      std::fprintf(stderr, "cudatrace: pid %d: %s: %d APIs\n", pid, terminal_safe(m.path).c_str(), r.apis);
      std::vector<PlannedProbe> planned;
      if (probes().plan_file(path, planned, error))
        std::fprintf(stderr, "cudatrace:   %s\n", terminal_safe(probe_summary(m.path, planned)).c_str());
      if (!r.deferred.empty())
        std::fprintf(stderr, "cudatrace:   %zu of them probed once code other than a CUDA runtime may call them\n",
                     r.deferred.size());
    }
  }
  if (const auto d = demand_.find(pid); d != demand_.end() && !d->second.imported.empty()) {
    std::vector<std::uint64_t> addrs;
    for (const auto& [addr, u] : d->second.unprobed)
      if (d->second.imported.count(u.function.api)) addrs.push_back(addr);
    probe_on_demand(pid, addrs, "imported");
  }
}

void Tracee::note_for_demand(pid_t pid, const Mapping& m, const std::string& path, const Probes::FileResult& r) {
  DemandProcess& d = demand_[pid];
  const auto key = static_cast<std::uint32_t>(pid);
  const auto in_mapping = [&m](std::uint64_t offset, std::uint64_t& vaddr) {
    if (offset < m.offset || offset - m.offset >= m.end - m.start) return false;
    vaddr = m.start + (offset - m.offset);
    return true;
  };
  for (const Probes::Deferred& f : r.deferred) {
    std::uint64_t vaddr = 0;
    if (!in_mapping(f.entry, vaddr) || d.unprobed.count(vaddr)) continue;
    d.unprobed[vaddr] = {path, f};
    if (bpf_->set_driver_fn(key, vaddr, false)) {
      d.told.push_back(vaddr);
    } else {  // BPF cannot watch its lookups: probed now
      probe_on_demand(pid, {vaddr}, "no room to watch its lookups");
    }
  }
  if (r.runtime) {
    if (d.runtime_ranges < CT_RUNTIME_RANGES &&
        bpf_->set_runtime_range(key, d.runtime_ranges, m.start, m.end, r.runtime_library))
      ++d.runtime_ranges;
    else if (opts_.verbose)  // its own lookups then probe what they look up: dearer, never wrong
      warn_line(fmt::format("pid {}: {}: too many CUDA runtimes to tell their own driver lookups", pid,
                            terminal_safe(m.path)));
  }
  d.imported.insert(r.imports.begin(), r.imports.end());
}

void Tracee::probe_on_demand(pid_t pid, const std::vector<std::uint64_t>& addrs, const std::string& why) {
  const auto d = demand_.find(pid);
  if (d == demand_.end()) return;
  std::map<std::string, std::vector<Probes::Deferred>> by_file;
  std::vector<std::uint64_t> probed;
  for (std::uint64_t addr : addrs) {
    const auto u = d->second.unprobed.find(addr);
    if (u == d->second.unprobed.end()) continue;
    by_file[u->second.path].push_back(u->second.function);
    probed.push_back(addr);
  }
  const pid_t probe_pid = policy_.bound_to_process ? pid : -1;
  for (const auto& [path, functions] : by_file) {
    std::string error;
    if (!probes().attach_deferred(path, probe_pid, functions, error)) {
      warn_line(terminal_safe(error));
      continue;
    }
    if (opts_.verbose)
      for (const Probes::Deferred& f : functions)
        std::fprintf(stderr, "cudatrace: pid %d: %s probed (%s)\n", pid, f.api->symbol.c_str(),
                     terminal_safe(why).c_str());
  }
  for (std::uint64_t addr : probed) {
    bpf_->set_driver_fn(static_cast<std::uint32_t>(pid), addr, true);
    d->second.imported.erase(d->second.unprobed[addr].function.api);
    d->second.unprobed.erase(addr);
  }
}

int Tracee::attach_libs(pid_t pid) {
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

void Tracee::note_probed_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) probed_files_.emplace(st.st_dev, st.st_ino);
}

void Tracee::start_stop_watchdog() {
  if (stop_at_loads_ && start_watchdog(bpf_->control_fd(), bpf_->tracer_exit_fd()) < 0)
    warn_line(std::string("cannot start the watchdog process: ") + std::strerror(errno) +
              "; if cudatrace is killed while a process waits at a library load, send it SIGCONT");
}

}  // namespace cudatrace
