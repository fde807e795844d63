// Whole-node mode (--all-processes) and exporter mode's counts
// (--prometheus); docs/prometheus.md.
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

#include "cudatrace/record/recorder.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/target/identity.h"
#include "cudatrace/target/library_locations.h"
#include "cudatrace/target/process.h"

namespace cudatrace {

namespace {
constexpr std::uint64_t kNodeRescanNs = 5000000000ull;
}  // namespace

void Recorder::rescan_node() {
  const std::uint64_t now = monotonic_ns();
  if (now < next_rescan_ns_) return;
  next_rescan_ns_ = now + kNodeRescanNs;
  DIR* proc = opendir("/proc");
  if (!proc) return;
  const pid_t self = getpid();
  while (dirent* e = readdir(proc)) {
    if (stop_signal()) break;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    attach_mappings(static_cast<pid_t>(pid));
  }
  closedir(proc);
}

int Recorder::attach_node() {
  if (int rc = attach_libs(-1)) return rc;
  rescan_node();  // the files of the processes running now first: they may be calling
  probe_ahead();
  return kExitOk;
}

void Recorder::probe_ahead() {
  const std::uint64_t start_ns = monotonic_ns();
  const std::vector<std::string> files = find_cuda_libraries(host_root());
  std::size_t probed = 0;
  for (const std::string& path : files) {
    if (stop_signal()) return;
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

// Exporter mode: who a process is, read while it runs (a short-lived one
// may be gone by the next look).
void Recorder::note_process(pid_t pid) {
  ProcessIdentity id;
  if (read_identity(pid, id))
    labels_[static_cast<std::uint32_t>(pid)] = {id.comm, id.cgroup.container_id, id.cgroup.pod_uid};
}

std::optional<NodeCounts> Recorder::node_counts() {
  if (!node_stats_) return std::nullopt;
  NodeCounts s;
  // Processes gone before this read: their last deltas come in it, then
  // their labels go. One that exits during the read keeps its label to the
  // next: its calls made after this read would be "unknown" else.
  for (const auto& [pid, label] : labels_)
    if (!process_exists(static_cast<pid_t>(pid))) s.gone.push_back(pid);
  std::vector<NodeStats::CallDelta> calls;
  std::vector<NodeStats::HitDelta> hits;
  std::string error;
  if (!node_stats_->read([](std::uint32_t pid) { return process_exists(static_cast<pid_t>(pid)); }, calls, hits,
                         error))
    warn_line(error);
  // A process never looked at before: /proc's names now, or, gone already, BPF's.
  const auto label = [&](std::uint32_t pid, const std::string& bpf_comm) {
    if (labels_.count(pid)) return;
    note_process(static_cast<pid_t>(pid));
    if (!labels_.count(pid)) labels_[pid].comm = bpf_comm.empty() ? "unknown" : bpf_comm;
  };
  for (const NodeStats::HitDelta& h : hits) {
    label(h.pid, h.comm);
    // (The exporter keeps no single-stepped counts: every entry hit at the emulated price.)
    s.hits.push_back({h.pid, h.entry_hits + h.return_hits, added_ns(probe_cost_, h.entry_hits, 0, h.return_hits) / 1e9});
  }
  for (const NodeStats::CallDelta& d : calls) {
    label(d.key.tgid, {});
    s.calls.push_back({d.key, d.grew});
  }
  s.labels = labels_;
  s.traced_processes = node_stats_->processes().size();
  s.probed_files = probed_files_.size();
  s.per_hit = probe_cost_;
  s.lost = losses();
  s.aggregation_full = read_counters()[CT_CNT_EXPORT_FULL];
  s.sampling = sampling();
  if (budget_) s.budget = budget_->report();
  for (std::uint32_t pid : s.gone) labels_.erase(pid);
  return s;
}

}  // namespace cudatrace
