// Summary statistics: the per-API table of the per-API statistics
// (decode/api_stats.h), and the kernel and transfer tables built from
// decoded calls. docs/summary.md explains the
// columns and their precision.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cudatrace/decode/api_stats.h"
#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/transfer.h"
#include "cudatrace/decode/selection.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

class MemoryTracker;

struct ApiRow {
  const Api* api;
  ct_api_stats stats;
  double time_pct, avg_ns, med_ns, p99_ns, stddev_ns;
};
// One row per displayed API with calls, largest total time first. `by_id` is
// indexed by API id.
std::vector<ApiRow> api_rows(const std::vector<ct_api_stats>& by_id, const Selection& display);

// ---- Kernels and transfers from decoded calls ------------------------------

// Host<->device copies smaller than this are "tiny" (insights.h).
inline constexpr std::uint64_t kTinyTransferBytes = 64 * 1024;

struct TransferStats {
  std::uint64_t count = 0, bytes = 0;
  std::uint64_t sync_count = 0, sync_bytes = 0, sync_ns = 0;  // calls without a stream argument
  std::uint64_t pageable = 0, pageable_bytes = 0, pageable_async = 0;  // host side not page-locked
  std::uint64_t tiny = 0, tiny_bytes = 0;                              // below kTinyTransferBytes
};

struct KernelStats {
  std::string short_name;  // KernelNames::short_name, or the key when it is not a name
  std::uint64_t launches = 0;
  std::uint64_t in_graphs = 0;  // runs inside graph launches (their captured kernels), not in `launches`
  std::map<std::array<std::uint32_t, 6>, std::uint64_t> shapes;  // grid xyz, block xyz -> launches
};

// Kernel launches and transfers, counted at the outermost probed call and
// only when it succeeded. Work captured into a graph does not run then: a
// launch of the graph counts its kernels (KernelStats::in_graphs).
class Activity {
 public:
  void on_call(const Call& c, const MemoryTracker& memory);
  // `counted.calls` successful outermost calls like `c` that BPF counted in
  // its activity map (c is rebuilt from their key by activity_record); the
  // durations and entry times are theirs.
  void on_calls(const Call& c, const MemoryTracker& memory, const ct_activity& counted);

  std::map<std::string, KernelStats> kernels;  // by demangled name
  std::array<TransferStats, kDirections> transfers{};
  std::uint64_t launches = 0, first_launch_ns = 0, last_launch_ns = 0;

 private:
  void count(const Call& c, const MemoryTracker& memory, const ct_activity& counted);
};

}  // namespace cudatrace
