// PrometheusMetrics on prometheus-cpp (core): one registry, families created
// up front, series added as identities and APIs appear. Counters only grow
// by the deltas they are given; gauges are set. /metrics is served by
// MetricsServer (render/metrics_server.h says why not prometheus-cpp's own).
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "cudatrace/render/metrics.h"
#include "cudatrace/render/metrics_server.h"

namespace cudatrace {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Labels;

class PromCpp final : public PrometheusMetrics {
 public:
  PromCpp()
      : registry_(std::make_shared<prometheus::Registry>()),
        calls_(BuildCounter().Name("cuda_api_calls_total").Help("CUDA, NCCL and NVTX API calls by API, layer and status "
                                                                 "(error: success, the error's name, or other)")
                   .Register(*registry_)),
        duration_(BuildHistogram().Name("cuda_api_duration_seconds")
                      .Help("Time inside each API call, entry to return (fixed buckets, docs/prometheus.md)")
                      .Register(*registry_)),
        launches_(BuildCounter().Name("cuda_kernel_launches_total")
                      .Help("Successful outermost kernel launches (a runtime launch nesting a driver launch counts once)")
                      .Register(*registry_)),
        transfer_(BuildCounter().Name("cuda_transfer_bytes_total")
                      .Help("Bytes of successful outermost copies by direction (cudaMemcpyKind; default: unified "
                            "addressing decides)")
                      .Register(*registry_)),
        memory_(BuildGauge().Name("cuda_device_memory_bytes")
                    .Help("Device memory allocated and not yet freed by the running processes")
                    .Register(*registry_)),
        memory_peak_(BuildGauge().Name("cuda_device_memory_peak_bytes")
                         .Help("Highest cuda_device_memory_bytes seen for these labels since cudatrace started")
                         .Register(*registry_)),
        lost_(BuildCounter().Name("cudatrace_lost_records_total")
                  .Help("Calls or records cudatrace could not count, by reason").Register(*registry_)),
        hits_(BuildCounter().Name("cudatrace_probe_hits_total")
                  .Help("Uprobe hits (entries and returns) in the traced processes").Register(*registry_)),
        added_(BuildCounter().Name("cudatrace_added_seconds_total")
                   .Help("Estimated time tracing added to the traced processes: hits times the cost of a hit "
                         "measured at start-up")
                   .Register(*registry_)),
        folded_(BuildCounter().Name("cudatrace_folded_identities_total")
                    .Help("Process identities beyond the label limit, counted under comm=\"other\"")
                    .Register(*registry_)
                    .Add({})),
        node_(BuildGauge().Name("cudatrace_traced_processes")
                  .Help("Processes with traced calls that are running").Register(*registry_).Add({})),
        files_(BuildGauge().Name("cudatrace_probed_files")
                   .Help("Distinct library and program files with probes attached").Register(*registry_).Add({})),
        tracing_since_(BuildGauge().Name("cudatrace_tracing_since_seconds")
                           .Help("Unix time at which tracing began (probes attached): calls before it were not seen")
                           .Register(*registry_).Add({})),
        hit_cost_(BuildGauge().Name("cudatrace_probe_hit_cost_seconds")
                      .Help("CPU time one probe hit adds to a call, measured at start-up").Register(*registry_)),
        seen_ratio_(BuildGauge().Name("cudatrace_api_seen_ratio")
                        .Help("Share of an API's calls seen under --max-overhead: below 1, its call, duration, "
                              "launch and byte counts are estimates (what was seen divided by this)")
                        .Register(*registry_)),
        budget_max_(BuildGauge().Name("cudatrace_budget_max_ratio")
                        .Help("--max-overhead as a fraction of each process's time").Register(*registry_)),
        budget_cost_(BuildGauge().Name("cudatrace_budget_estimated_cost_ratio")
                         .Help("The budget's estimated cost so far, hits priced at the safety factor "
                               "(docs/fleet.md), as a fraction of the most affected process's time")
                         .Register(*registry_)),
        budget_attached_(BuildGauge().Name("cudatrace_budget_hot_attached_ratio")
                             .Help("Share of the time the launch-rate (hot) probes were attached")
                             .Register(*registry_)) {
    bounds_.assign(std::begin(kDurationBounds), std::end(kDurationBounds));
  }

  bool serve(const std::string& address, std::string& error) override {
    server_ = MetricsServer::start(address, [this] { return text(); }, error);
    return server_ != nullptr;
  }

  int port() const override { return server_ ? server_->port() : 0; }

  void tracing_began(double unix_seconds) override {
    tracing_since_.Set(unix_seconds);
    if (server_) server_->ready();
  }

  void add_calls(const MetricsIdentity& who, const Api& api, std::uint16_t status, std::uint8_t direction,
                 const ct_export_value& d) override {
    Labels process = labels(who);
    Labels call = process;
    call["api"] = api.spec->name;
    call["layer"] = layer_name(api.layer());
    if (d.calls) {
      Labels with_status = call;
      with_status["error"] = status_label(api, status);
      calls_.Add(with_status).Increment(double(d.calls));
      std::vector<double> buckets(d.buckets, d.buckets + CT_EXPORT_BUCKETS);
      duration_.Add(call, bounds_).ObserveMultiple(buckets, double(d.total_ns) / 1e9);
    }
    if (api.effect() == Effect::Launch && d.outer_ok) launches_.Add(process).Increment(double(d.outer_ok));
    if (d.bytes) {
      Labels with_direction = process;
      with_direction["direction"] = direction_label(direction);
      transfer_.Add(with_direction).Increment(double(d.bytes));
    }
  }

  void set_seen_ratio(const Api& api, double ratio) override {
    seen_ratio_.Add({{"api", std::string(api.spec->name)}, {"layer", layer_name(api.layer())}}).Set(ratio);
  }

  void set_budget(double max, double estimated_cost, double hot_attached) override {
    budget_max_.Add({}).Set(max);
    budget_cost_.Add({}).Set(estimated_cost);
    budget_attached_.Add({}).Set(hot_attached);
  }

  void add_cost(const MetricsIdentity& who, std::uint64_t probe_hits, double added_seconds) override {
    const Labels l = labels(who);
    if (probe_hits) hits_.Add(l).Increment(double(probe_hits));
    if (added_seconds > 0) added_.Add(l).Increment(added_seconds);
  }

  void set_memory(const MetricsIdentity& who, std::uint64_t live_bytes, std::uint64_t peak_bytes) override {
    const Labels l = labels(who);
    memory_.Add(l).Set(double(live_bytes));
    memory_peak_.Add(l).Set(double(peak_bytes));
  }

  void set_lost(LossReason reason, std::uint64_t total) override {
    static const char* const names[kLossReasons] = {"ring_buffer_full", "thread_table_full", "depth_overflow",
                                                    "control_record", "aggregation_map_full"};
    const int i = static_cast<int>(reason);
    prometheus::Counter& c = lost_.Add({{"reason", names[i]}});
    if (total > lost_seen_[i]) c.Increment(double(total - lost_seen_[i]));
    lost_seen_[i] = std::max(lost_seen_[i], total);
  }

  void set_node(std::size_t traced_processes, std::size_t probed_files, double entry_hit_seconds,
                double return_hit_seconds) override {
    node_.Set(double(traced_processes));
    files_.Set(double(probed_files));
    hit_cost_.Add({{"probe", "entry"}}).Set(entry_hit_seconds);
    hit_cost_.Add({{"probe", "return"}}).Set(return_hit_seconds);
  }

  std::string text() const override {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return out.str();
  }

 private:
  // The labels of a process; an identity past the limit is folded into "other".
  Labels labels(const MetricsIdentity& who) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (identities_.count(who) == 0) {
      if (identities_.size() >= kMaxIdentities) {
        if (folded_seen_.size() < kMaxFoldedRemembered && folded_seen_.insert(who).second) folded_.Increment();
        return {{"comm", "other"}, {"container_id", ""}, {"pod_uid", ""}};
      }
      identities_.insert(who);
    }
    Labels out{{"comm", utf8_label(who.comm)}, {"container_id", utf8_label(who.container_id)},
               {"pod_uid", utf8_label(who.pod_uid)}};
    // A process that publishes OpenTelemetry's process context: its service
    // (docs/correlation.md). Never trace or span ids: one series per request.
    if (!who.service_name.empty() || !who.service_namespace.empty() || !who.deployment_environment.empty()) {
      out["service_name"] = utf8_label(who.service_name);
      out["service_namespace"] = utf8_label(who.service_namespace);
      out["deployment_environment"] = utf8_label(who.deployment_environment);
    }
    return out;
  }

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Counter>& launches_;
  prometheus::Family<prometheus::Counter>& transfer_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Family<prometheus::Gauge>& memory_peak_;
  prometheus::Family<prometheus::Counter>& lost_;
  prometheus::Family<prometheus::Counter>& hits_;
  prometheus::Family<prometheus::Counter>& added_;
  prometheus::Counter& folded_;
  prometheus::Gauge& node_;
  prometheus::Gauge& files_;
  prometheus::Gauge& tracing_since_;
  prometheus::Family<prometheus::Gauge>& hit_cost_;
  prometheus::Family<prometheus::Gauge>& seen_ratio_;
  // Their one series each appears with the first set_budget.
  prometheus::Family<prometheus::Gauge>& budget_max_;
  prometheus::Family<prometheus::Gauge>& budget_cost_;
  prometheus::Family<prometheus::Gauge>& budget_attached_;
  prometheus::Histogram::BucketBoundaries bounds_;
  std::uint64_t lost_seen_[kLossReasons] = {};
  std::mutex mutex_;
  std::set<MetricsIdentity> identities_;
  static constexpr std::size_t kMaxFoldedRemembered = 65536;  // then new ones are no longer counted
  std::set<MetricsIdentity> folded_seen_;  // each counted once; never a label
  std::unique_ptr<MetricsServer> server_;  // last: stops before what it serves goes
};

}  // namespace

std::unique_ptr<PrometheusMetrics> PrometheusMetrics::create(std::string&) { return std::make_unique<PromCpp>(); }

}  // namespace cudatrace
