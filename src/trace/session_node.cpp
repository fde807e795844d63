// Whole-node mode (--all-processes) and the exporter's ticks (--prometheus);
// docs/prometheus.md.
//
// Probes belong to files, not processes: a uprobe attached to a file without
// a pid fires in every process that maps it, now or later. So each distinct
// CUDA file (by device and inode; container copies through /proc/PID/root
// or /proc/PID/map_files) is probed once. At start, the files processes map
// and those the host keeps where CUDA libraries are kept (probed ahead: a
// program that maps one later is seen from its first call). Files that
// appear later are found from the dynamic loader's probe (start-up and
// dlopen), the record every exec sends and, should both miss one (a lost
// record, the first process of a container whose own loader was not probed
// yet), a rescan of /proc every kNodeRescanNs. No process is ever stopped.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cudatrace/target/library_locations.h"
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
    if (stop_requested()) break;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    attach_mappings(static_cast<pid_t>(pid));
  }
  closedir(proc);
}

int Session::attach_node() {
  if (int rc = attach_libs(-1)) return rc;
  rescan_node();  // the files of the processes running now first: they may be calling
  probe_ahead();
  return kExitOk;
}

void Session::probe_ahead() {
  const std::uint64_t start_ns = monotonic_ns();
  const std::vector<std::string> files = find_cuda_libraries(host_root());
  std::size_t probed = 0;
  for (const std::string& path : files) {
    if (stop_requested()) return;
    const std::uint64_t file_start_ns = monotonic_ns();
    Probes::FileResult r;
    std::string error;
    if (!probes_->attach_file(path, -1, r, error)) {
      if (opts_.verbose) warn_line(error);
      continue;
    }
    if (!r.apis) continue;
    ++probed;
    struct stat st {};
    if (stat(path.c_str(), &st) == 0) probed_files_.emplace(st.st_dev, st.st_ino);
    if (opts_.verbose)
      std::fprintf(stderr, "cudatrace: %s: %d APIs, probed ahead in %.1f ms\n", path.c_str(), r.apis,
                   double(monotonic_ns() - file_start_ns) / 1e6);
  }
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: probed ahead %zu of the %zu CUDA library files found on this host in %.1f ms\n",
                 probed, files.size(), double(monotonic_ns() - start_ns) / 1e6);
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
