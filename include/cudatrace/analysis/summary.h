// Summary statistics: per-API latency statistics from the BPF "api_stats"
// map (record.h: ct_api_stats, a log-linear histogram), and the kernel and
// transfer tables built from decoded calls. docs/summary.md explains the
// columns and their precision.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/transfer.h"
#include "cudatrace/decode/selection.h"
#include "cudatrace/record.h"

namespace cudatrace {

class MemoryTracker;

// ---- Histogram and statistics of ct_api_stats ----------------------------

// Lowest latency (ns) bucket `b` holds; b == CT_HIST_BUCKETS gives the end of
// the last regular bucket (which also holds everything longer).
std::uint64_t ct_hist_bucket_low(unsigned b);
// The bucket holding a latency of `ns` (what the BPF side computes).
unsigned ct_hist_bucket(std::uint64_t ns);
// Counts one call into `s`, as the BPF side does in summary mode: for
// reports made from a saved trace (cudatrace report).
void add_call(ct_api_stats& s, std::uint64_t dur_ns, bool failed);
// Adds `part` (one CPU's or one API's statistics) into `total`.
void add_stats(ct_api_stats& total, const ct_api_stats& part);
// The calls counted in `now` but not in `before`, an earlier reading of the
// same counters. Min and max of those calls are exact when they are new
// extremes of the run, otherwise the bounds of their histogram buckets.
ct_api_stats stats_since(const ct_api_stats& now, const ct_api_stats& before);
// The q-quantile (0..1) of the latencies, interpolated linearly inside its
// histogram bucket and clamped to [min, max]; 0 without calls.
double percentile_ns(const ct_api_stats& s, double q);
// Sample standard deviation (n - 1); 0 for fewer than two calls.
double stddev_ns(const ct_api_stats& s);
// How many calls took less than `ns` (interpolated inside the bucket holding `ns`).
double count_below(const ct_api_stats& s, std::uint64_t ns);

// The histogram in bcc's log2 rows: row i >= 1 holds [2^(i-1), 2^i - 1] ns,
// row 1 also 0 (row 0 stays empty).
std::vector<std::uint64_t> log2_rows(const ct_api_stats& s);
inline std::uint64_t log2_row_low(unsigned i) { return i <= 1 ? 0 : std::uint64_t(1) << (i - 1); }
inline std::uint64_t log2_row_high(unsigned i) { return (std::uint64_t(1) << i) - 1; }

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
  std::map<std::array<std::uint32_t, 6>, std::uint64_t> shapes;  // grid xyz, block xyz -> launches
};

// Kernel launches and transfers, counted at the outermost probed call and
// only when it succeeded.
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

// ---- Launches and copies counted in BPF (record.h: ct_activity_key) --------

// How BPF counts calls of `api` in summary mode: by the arguments Activity
// reads (the kernel, grid and block of launches; sizes and direction of
// copies and memsets, and the host side of host<->device copies); allocations
// and frees of page-locked memory bump the page-locked generation.
ct_activity_api activity_api(const Api& api);

// A call record rebuilt from an activity key: the key's process, API and
// arguments, a launch config holding the key's grid and block, the counted
// calls' total duration and first entry time. Decodes like a record.
struct ActivityRecord {
  alignas(8) unsigned char bytes[sizeof(ct_call) + CT_LAUNCH_CONFIG_SIZE];
  const ct_call& call() const { return *reinterpret_cast<const ct_call*>(bytes); }
};
void activity_record(const ct_activity_key& key, const ct_activity& counted, ActivityRecord& out);

}  // namespace cudatrace
