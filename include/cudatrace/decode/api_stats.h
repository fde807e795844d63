// The per-API statistics of summary mode (bpf_abi.h: ct_api_stats, a
// log-linear histogram), as the BPF side fills them: adding calls and
// readings up, and what they say (quantiles, spread). docs/summary.md
// explains their precision.
#pragma once

#include <cstdint>
#include <vector>

#include "cudatrace/bpf_abi.h"

namespace cudatrace {

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

}  // namespace cudatrace
