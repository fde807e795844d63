// The in-kernel aggregation of exporter mode ("export_stats", bpf_abi.h) and
// the probe hits of "process_cost"/"threads", read as per-process counters.
// Each read() returns what grew since the previous one (for Prometheus
// counters) and keeps cumulative totals per running process (processes(),
// for whatever needs per-process rates: the exporter, a cost budget).
// A process found gone is read one last time, then its entries are deleted
// from the maps, so that they stay bounded on a node with churn; its probe
// hits stay where something else prices them at the end (a trace's end line).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

struct ProcessCounters {
  std::uint32_t pid = 0;
  std::string comm;  // as BPF saw it (the exporter takes /proc's at first sight)
  std::uint64_t calls = 0, total_ns = 0;  // every traced call, nested ones included
  std::uint64_t entry_hits = 0, return_hits = 0;
};

class NodeStats {
 public:
  NodeStats(int export_stats_fd, int process_cost_fd, int threads_fd, bool forget_exited_hits)
      : export_fd_(export_stats_fd), cost_fd_(process_cost_fd), threads_fd_(threads_fd),
        forget_exited_hits_(forget_exited_hits) {}

  struct CallDelta {
    ct_export_key key;
    ct_export_value grew;
  };
  struct HitDelta {
    std::uint32_t pid;
    std::string comm;
    std::uint64_t entry_hits, return_hits;
  };
  // `alive(pid)`: whether the process still runs. False on a map read error.
  bool read(const std::function<bool(std::uint32_t)>& alive, std::vector<CallDelta>& calls,
            std::vector<HitDelta>& hits, std::string& error);

  // Cumulative counters of the processes seen running at the last read.
  const std::map<std::uint32_t, ProcessCounters>& processes() const { return processes_; }

 private:
  struct KeyLess {
    bool operator()(const ct_export_key& a, const ct_export_key& b) const;
  };
  int export_fd_, cost_fd_, threads_fd_;
  bool forget_exited_hits_;
  std::map<ct_export_key, ct_export_value, KeyLess> last_;
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> last_hits_;  // pid -> entry, return
  std::map<std::uint32_t, ProcessCounters> processes_;
};

// The export_apis row of an API (bpf_abi.h ct_export_api): what BPF counts of it.
ct_export_api export_api(const Api& api);

// The grown part of `now` over `before`, field by field (never negative).
ct_export_value export_delta(const ct_export_value& now, const ct_export_value& before);

}  // namespace cudatrace
