#include "cudatrace/analysis/insights.h"

#include <fmt/format.h>

namespace cudatrace {
namespace {

double us(double ns) { return ns / 1e3; }

void launch_bound(const InsightInput& in, const InsightThresholds& t, std::vector<Insight>& out) {
  if (in.launches < t.launch_bound_min_launches || !in.launch_span_ns) return;
  if (in.syncs.calls < t.launch_bound_min_syncs) return;
  const double rate = double(in.launches) / (double(in.launch_span_ns) / 1e9);
  const double sync_median = percentile_ns(in.syncs, 0.5);
  if (rate < t.launch_bound_min_rate || sync_median > t.launch_bound_max_sync_median_ns) return;
  out.push_back({"launch-bound",
                 fmt::format("launch-bound: {} launches at {:.0f}/s, and the {} synchronisations return after "
                             "{:.1f} us (median): the GPU finishes work as fast as the host submits it; fewer, "
                             "larger kernels or CUDA graphs would help",
                             in.launches, rate, in.syncs.calls, us(sync_median)),
                 {{"launches", double(in.launches)},
                  {"launches_per_s", rate},
                  {"syncs", double(in.syncs.calls)},
                  {"sync_median_ns", sync_median}}});
}

void sync_storm(const InsightInput& in, const InsightThresholds& t, std::vector<Insight>& out) {
  const double short_syncs = count_below(in.syncs, t.short_sync_ns);
  if (short_syncs < double(t.sync_storm_min_short_syncs) || in.traced_s <= 0) return;
  const double rate = short_syncs / in.traced_s;
  if (rate < t.sync_storm_min_rate) return;
  const double per_launch = in.launches ? double(in.syncs.calls) / double(in.launches) : 0;
  out.push_back({"sync-storm",
                 fmt::format("sync storm: {:.0f} of {} synchronisations took under {:.0f} us ({:.0f}/s, {:.2f} per "
                             "launch, {:.1f} ms in all): each one is a host-GPU round trip; synchronise less often",
                             short_syncs, in.syncs.calls, us(double(t.short_sync_ns)), rate, per_launch,
                             double(in.syncs.total_ns) / 1e6),
                 {{"short_syncs", short_syncs},
                  {"syncs", double(in.syncs.calls)},
                  {"short_syncs_per_s", rate},
                  {"syncs_per_launch", per_launch},
                  {"sync_total_ns", double(in.syncs.total_ns)}}});
}

void allocation_churn(const InsightInput& in, const InsightThresholds& t, std::vector<Insight>& out) {
  for (const ChurnFinding& f : in.churn) {
    const ChurnSite& s = f.stats;
    if (s.pairs < t.churn_min_pairs) continue;
    const double lifetime = double(s.lifetime_ns) / double(s.pairs);
    if (lifetime > t.churn_max_avg_lifetime_ns) continue;
    out.push_back({"allocation-churn",
                   fmt::format("allocation churn: {} at {} allocated and freed {} bytes {} times (each lived "
                               "{:.1f} us on average; {:.1f} ms inside the calls): allocate once outside the loop "
                               "or use a pool",
                               s.api ? s.api->symbol : "?", f.site, f.bytes, s.pairs, us(lifetime),
                               double(s.calls_ns) / 1e6),
                   {{"pairs", double(s.pairs)},
                    {"bytes", double(f.bytes)},
                    {"avg_lifetime_ns", lifetime},
                    {"calls_ns", double(s.calls_ns)}}});
  }
}

void pageable_copies(const InsightInput& in, const InsightThresholds& t, std::vector<Insight>& out) {
  std::uint64_t copies = 0, pageable = 0, bytes = 0, async = 0;
  for (Direction d : {Direction::HtoD, Direction::DtoH}) {
    const TransferStats& s = in.transfers[static_cast<int>(d)];
    copies += s.count;
    pageable += s.pageable;
    bytes += s.pageable_bytes;
    async += s.pageable_async;
  }
  if (pageable < t.pageable_min_copies) return;
  out.push_back({"pageable-copies",
                 fmt::format("pageable copies: {} of {} host<->device copies ({} bytes) used pageable host memory, "
                             "{} of them async calls that cannot overlap; use cudaMallocHost or cudaHostRegister",
                             pageable, copies, bytes, async),
                 {{"pageable_copies", double(pageable)},
                  {"host_device_copies", double(copies)},
                  {"pageable_bytes", double(bytes)},
                  {"pageable_async", double(async)}}});
}

void tiny_transfers(const InsightInput& in, const InsightThresholds& t, std::vector<Insight>& out) {
  std::uint64_t copies = 0, tiny = 0, bytes = 0;
  for (Direction d : {Direction::HtoD, Direction::DtoH}) {
    const TransferStats& s = in.transfers[static_cast<int>(d)];
    copies += s.count;
    tiny += s.tiny;
    bytes += s.tiny_bytes;
  }
  if (tiny < t.tiny_min_copies || double(tiny) < t.tiny_min_share * double(copies)) return;
  const double share = double(tiny) / double(copies), avg = double(bytes) / double(tiny);
  out.push_back({"tiny-transfers",
                 fmt::format("tiny transfers: {} of {} host<->device copies ({:.0f}%) moved under {} bytes, "
                             "{:.0f} bytes on average: per-copy overhead dominates; batch them into larger copies",
                             tiny, copies, 100 * share, kTinyTransferBytes, avg),
                 {{"tiny_copies", double(tiny)},
                  {"host_device_copies", double(copies)},
                  {"share", share},
                  {"avg_bytes", avg}}});
}

}  // namespace

std::vector<Insight> find_insights(const InsightInput& in, const InsightThresholds& t) {
  std::vector<Insight> out;
  launch_bound(in, t, out);
  sync_storm(in, t, out);
  allocation_churn(in, t, out);
  pageable_copies(in, t, out);
  tiny_transfers(in, t, out);
  return out;
}

}  // namespace cudatrace
