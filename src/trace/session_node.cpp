// Whole-node mode (--all-processes) and the exporter's ticks (--prometheus);
// docs/prometheus.md.
//
// Probes belong to files, not processes: a uprobe attached to a file without
// a pid fires in every process that maps it, now or later. So each distinct
// CUDA file (by device and inode; container copies through /proc/PID/root
// or /proc/PID/map_files) is probed once. Files that appear later are found
// from the dynamic loader's probe (start-up and dlopen), the record every
// exec sends and, should both miss one (a lost record, the first process of
// a container whose own loader was not probed yet), a rescan of /proc every
// kNodeRescanNs. No process is ever stopped.
#include <dirent.h>
#include <unistd.h>

#include <cstdlib>

#include "cudatrace/trace/session.h"

namespace cudatrace {

namespace {
constexpr std::uint64_t kNodeRescanNs = 5000000000ull;
constexpr std::uint64_t kExportTickNs = 1000000000ull;
}  // namespace

void Session::rescan_node() {
  const std::uint64_t now = monotonic_ns();
  if (now < next_rescan_ns_) return;
  next_rescan_ns_ = now + kNodeRescanNs;
  DIR* proc = opendir("/proc");
  if (!proc) return;
  const pid_t self = getpid();
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    attach_mappings(static_cast<pid_t>(pid));
  }
  closedir(proc);
}

int Session::attach_node() {
  if (int rc = attach_libs(-1)) return rc;
  rescan_node();
  return kExitOk;
}

void Session::export_tick() {
  const std::uint64_t now = monotonic_ns();
  if (now < next_export_ns_) return;
  next_export_ns_ = now + kExportTickNs;
  std::string error;
  exporter_->tick(read_counters(), probed_files_.size(), budget_.get(), error);
  if (!error.empty()) warn_line(error);
}

}  // namespace cudatrace
