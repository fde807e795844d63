// Host-side inferences from the summary's numbers. Each rule, its
// thresholds and why are in docs/summary.md; every insight states the
// numbers it rests on.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/analysis/memory.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/analysis/summary.h"

namespace cudatrace {

struct InsightThresholds {
  // launch-bound: launching fast while synchronisations find nothing to wait for.
  std::uint64_t launch_bound_min_launches = 1000;
  double launch_bound_min_rate = 5000;  // launches per second, first to last launch
  std::uint64_t launch_bound_min_syncs = 10;
  double launch_bound_max_sync_median_ns = 20000;
  // sync storm: many synchronisations that return quickly.
  std::uint64_t short_sync_ns = 50000;
  std::uint64_t sync_storm_min_short_syncs = 1000;
  double sync_storm_min_rate = 100;  // short synchronisations per second traced
  // allocation churn: one call site allocating and freeing one size over and over.
  std::uint64_t churn_min_pairs = 50;
  double churn_max_avg_lifetime_ns = 1e9;
  // pageable copies: host<->device copies from memory that is not page-locked.
  std::uint64_t pageable_min_copies = 10;
  // tiny transfers: host<->device copies below kTinyTransferBytes.
  std::uint64_t tiny_min_copies = 100;
  double tiny_min_share = 0.5;  // of host<->device copies
};

struct ChurnFinding {
  std::string site;  // the allocating call site, symbolised
  std::uint64_t bytes;
  ChurnSite stats;
};

struct InsightInput {
  double traced_s = 0;  // time covered
  ct_api_stats syncs{};  // stream, event and device synchronisations of one API layer, merged
  std::uint64_t launches = 0, launch_span_ns = 0;
  std::array<TransferStats, kDirections> transfers{};
  std::vector<ChurnFinding> churn;
};

struct Insight {
  std::string rule;     // launch-bound, sync-storm, allocation-churn, pageable-copies, tiny-transfers
  std::string message;  // one line, with the numbers
  std::vector<std::pair<std::string, double>> numbers;
};

std::vector<Insight> find_insights(const InsightInput& in, const InsightThresholds& t = {});

}  // namespace cudatrace
