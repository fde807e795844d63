#include "cudatrace/record/exporter_counts.h"

#include <string>
#include <vector>

#include "cudatrace/record/bpf_object.h"
#include "cudatrace/record/cost.h"
#include "cudatrace/target/identity.h"
#include "cudatrace/target/process.h"
#include "cudatrace/target/thread_context.h"
#include "cudatrace/terminal.h"

namespace cudatrace {

ExporterCounts::ExporterCounts(const BpfObject& bpf, bool forget_exited_hits)
    : stats_(bpf.export_stats_fd(), bpf.process_cost_fd(), bpf.threads_fd(), forget_exited_hits) {}

void ExporterCounts::note_process(pid_t pid) {
  ProcessIdentity id;
  if (!read_identity(pid, id)) return;
  ProcessLabel& label = labels_[static_cast<std::uint32_t>(pid)];
  label = {id.comm, id.cgroup.container_id, id.cgroup.pod_uid};
  read_service_labels(pid, label);
}

NodeCounts ExporterCounts::read(const ProbeCost& per_hit) {
  NodeCounts s;
  // Processes gone before this read: their last deltas come in it, then
  // their labels go. One that exits during the read keeps its label to the
  // next: its calls made after this read would be "unknown" else.
  for (const auto& [pid, label] : labels_)
    if (!process_exists(static_cast<pid_t>(pid))) s.gone.push_back(pid);
  std::vector<NodeStats::CallDelta> calls;
  std::vector<NodeStats::HitDelta> hits;
  std::string error;
  if (!stats_.read([](std::uint32_t pid) { return process_exists(static_cast<pid_t>(pid)); }, calls, hits, error))
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
    s.hits.push_back({h.pid, h.entry_hits + h.return_hits, added_ns(per_hit, h.entry_hits, 0, h.return_hits) / 1e9});
  }
  for (const NodeStats::CallDelta& d : calls) {
    label(d.key.tgid, {});
    s.calls.push_back({d.key, d.grew});
  }
  s.labels = labels_;
  s.traced_processes = stats_.processes().size();
  s.per_hit = per_hit;
  for (std::uint32_t pid : s.gone) labels_.erase(pid);
  return s;
}

}  // namespace cudatrace
