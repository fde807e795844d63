// Exporter mode's writer (--prometheus): the in-kernel counts of each look
// (node_counts.h), live device memory from the allocation and free calls
// (the analyses' MemoryTracker), losses and what tracing cost, as
// PrometheusMetrics labelled by process identity (docs/prometheus.md).
#include <algorithm>
#include <chrono>
#include <map>

#include "cudatrace/render/metrics.h"

namespace cudatrace {

std::unique_ptr<MetricsWriter> MetricsWriter::serve(const std::string& address, std::string& error) {
  std::unique_ptr<PrometheusMetrics> metrics = PrometheusMetrics::create(error);
  if (!metrics || !metrics->serve(address, error)) return nullptr;
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(std::move(metrics)));
}

std::unique_ptr<MetricsWriter> MetricsWriter::unserved(std::string& error) {
  std::unique_ptr<PrometheusMetrics> metrics = PrometheusMetrics::create(error);
  return metrics ? std::unique_ptr<MetricsWriter>(new MetricsWriter(std::move(metrics))) : nullptr;
}

void MetricsWriter::tracing_began() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  metrics_->tracing_began(std::chrono::duration<double>(since_epoch).count());
}

void MetricsWriter::counts(const NodeCounts& s, const MemoryTracker& memory) {
  const auto who = [&s](std::uint32_t pid) {
    const auto it = s.labels.find(pid);
    return it == s.labels.end() ? MetricsIdentity{"unknown", {}, {}}
                                : MetricsIdentity{it->second.comm,           it->second.container_id,
                                                  it->second.pod_uid,        it->second.service_name,
                                                  it->second.service_namespace, it->second.deployment_environment};
  };
  for (const NodeCounts::Hits& h : s.hits) metrics_->add_cost(who(h.pid), h.hits, h.added_s);
  for (const NodeCounts::Calls& d : s.calls) {
    const Api* api = api_by_id(d.key.api);
    if (!api) continue;
    calls_counted_ += d.grew.calls;
    metrics_->add_calls(who(d.key.tgid), *api, d.key.status, d.key.direction, d.grew);
  }
  // Under --max-overhead the sampled APIs' series hold what the sampled
  // windows saw (a counter cannot follow an estimate that moves with the
  // duty cycle without lasting errors: the ratio is cumulative); their
  // ratio is published beside them. One sampled once stays published (at 1
  // when it is exact again) so that its series never looks exact by absence.
  if (s.sampling)
    for (const auto& [id, ratio] : s.sampling->sampled()) sampled_apis_.insert(id);
  for (std::uint16_t id : sampled_apis_)
    if (const Api* api = api_by_id(id)) metrics_->set_seen_ratio(*api, s.sampling ? s.sampling->ratio(id) : 1.0);
  if (s.budget) metrics_->set_budget(s.budget->max_pct / 100, s.budget->estimated_cost_pct / 100,
                                     s.budget->attached_pct / 100);
  // Live device memory of the running processes, summed by identity; the
  // peak is the highest any one of its processes held (exact, not sampled).
  std::map<MetricsIdentity, std::uint64_t> live;
  for (const auto& [key, mem] : memory.devices()) {
    const MetricsIdentity id = who(key.first);
    std::uint64_t& peak = peaks_[id];
    peak = std::max(peak, mem.peak_bytes);
    if (std::find(s.gone.begin(), s.gone.end(), key.first) == s.gone.end()) live[id] += mem.live_bytes;
  }
  for (const auto& [id, peak] : peaks_) metrics_->set_memory(id, live[id], peak);
  metrics_->set_lost(LossReason::RingFull, s.lost.ring_buffer);
  metrics_->set_lost(LossReason::ThreadTableFull, s.lost.thread_table);
  metrics_->set_lost(LossReason::DepthOverflow, s.lost.depth_overflow);
  metrics_->set_lost(LossReason::ControlRecord, s.lost.control);
  metrics_->set_lost(LossReason::AggregationFull, s.aggregation_full);
  metrics_->set_node(s.traced_processes, s.probed_files, s.per_hit.entry_ns / 1e9, s.per_hit.return_ns / 1e9);
}

}  // namespace cudatrace
