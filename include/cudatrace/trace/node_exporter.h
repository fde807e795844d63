// Exporter mode (--prometheus): turns the in-kernel aggregation (NodeStats),
// the allocation and free records (live device memory), the loss counters
// and the probe hits into PrometheusMetrics, once a second, labelled by
// process identity (comm, container id, pod UID from /proc; identity.h).
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cudatrace/analysis/memory.h"
#include "cudatrace/render/metrics.h"
#include "cudatrace/trace/budget.h"
#include "cudatrace/trace/node_stats.h"
#include "cudatrace/trace/overhead.h"

namespace cudatrace {

// --prometheus ADDRESS: HOST:PORT, HOST an IPv4 address or empty (every
// address), PORT 0 (any free port) to 65535. False with `error` set.
bool parse_listen_address(const std::string& text, sockaddr_in& addr, std::string& error);
// Whether the metrics can be served there now (a valid address of this host,
// the port not in use): said at once, not after the BPF programs are loaded.
bool check_listen_address(const std::string& text, std::string& error);

class NodeExporter {
 public:
  struct Maps {
    int export_stats = -1, export_apis = -1, process_cost = -1, threads = -1;
  };
  // Fills "export_apis" from the API table; nullptr with `error` set when the
  // metrics cannot be served (no exporter in this build, address in use...).
  static std::unique_ptr<NodeExporter> start(const Maps& maps, const std::string& address, std::string& error);

  // The cost of one probe hit (overhead.h), once measured.
  void set_probe_cost(const ProbeCost& cost) { cost_ = cost; }
  // A process seen mapping files or calling: its identity is read now, while
  // it runs (a short-lived one may be gone by the next tick).
  void note_process(pid_t pid);
  // An allocation or free record (the only records exporter mode sends).
  void on_call(const Call& c) { memory_.on_call(c); }
  // Reads the maps and updates the metrics. `lost` is the "counters" array
  // summed over CPUs (CT_CNT_*); `probed_files` what the attacher holds.
  // `budget`: --max-overhead's controller, its ratios and state (nullptr:
  // no budget, every API exact).
  void tick(const std::vector<__u64>& lost, std::size_t probed_files, const BudgetControl* budget,
            std::string& error);

  const NodeStats& stats() const { return stats_; }  // per-process counters (budget work)
  std::uint64_t calls_counted() const { return calls_counted_; }  // by every tick so far
  int port() const { return metrics_->port(); }

  // The export_apis row of an API (record.h ct_export_api).
  static ct_export_api export_api(const Api& api);

 private:
  NodeExporter(const Maps& maps, std::unique_ptr<PrometheusMetrics> metrics)
      : metrics_(std::move(metrics)), stats_(maps.export_stats, maps.process_cost, maps.threads) {}
  const MetricsIdentity& identity(std::uint32_t pid, const std::string& bpf_comm);

  std::unique_ptr<PrometheusMetrics> metrics_;
  NodeStats stats_;
  ProbeCost cost_;
  MemoryTracker memory_;
  std::map<std::uint32_t, MetricsIdentity> identities_;  // running processes (and those gone this tick)
  std::map<MetricsIdentity, std::uint64_t> peaks_;
  std::uint64_t calls_counted_ = 0;
  std::set<std::uint16_t> sampled_apis_;  // APIs the budget ever sampled
};

}  // namespace cudatrace
