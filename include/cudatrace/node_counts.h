// Exporter mode's counts (--prometheus, docs/prometheus.md): what the
// in-kernel aggregation grew by since the last look, per process, as plain
// data for the metrics writer (render/metrics.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

// Who a process is, as the metrics label it (read from /proc at first sight).
struct ProcessLabel {
  std::string comm, container_id, pod_uid;
  // From its OpenTelemetry process context (docs/correlation.md), when it
  // published one: service.name, service.namespace, deployment.environment.name.
  std::string service_name, service_namespace, deployment_environment;
};

struct NodeCounts {
  struct Calls {
    ct_export_key key;     // process, API, status, copy direction
    ct_export_value grew;  // what its counters grew by
  };
  std::vector<Calls> calls;
  struct Hits {
    std::uint32_t pid;
    std::uint64_t hits;   // probe hits, entries and returns
    double added_s;       // what they cost the process (accounting.h prices)
  };
  std::vector<Hits> hits;
  // Every process these counts name (and the running ones), by pid; a
  // process gone before this look is in it for the last time.
  std::map<std::uint32_t, ProcessLabel> labels;
  std::vector<std::uint32_t> gone;  // of those, the ones that exited
  std::size_t traced_processes = 0, probed_files = 0;
  ProbeCost per_hit;
  LossCounts lost;
  std::uint64_t aggregation_full = 0;  // entries the aggregation map had no room for
  const Sampling* sampling = nullptr;  // --max-overhead: the sampled APIs' ratios; null: exact
  std::optional<BudgetReport> budget;
};

}  // namespace cudatrace
