// The live source: a composition of the tracee (tracee.h: what is traced,
// how its files are probed, when tracing ends), the BPF object
// (bpf_object.h: configured for the records the driver needs) and the
// record reader (record_reader.h: ring buffers into decoded calls), with
// what tracing costs and --max-overhead's budget on it. Knows nothing of
// analyses or outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cudatrace/clock.h"
#include "cudatrace/options.h"
#include "cudatrace/record/bpf_object.h"
#include "cudatrace/record/budget.h"
#include "cudatrace/record/exporter_counts.h"
#include "cudatrace/record/record_reader.h"
#include "cudatrace/record/source.h"
#include "cudatrace/record/tracee.h"
#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

class Recorder final : public Source {
 public:
  explicit Recorder(const Options& opts);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  int start(const RecordsNeeded& needs) override;
  int stopped_before_start() const override;
  std::uint64_t start_ns() const override { return start_ns_; }
  bool private_trace() const override { return target_->private_trace(); }
  int release() override;
  bool feed(CallConsumer& to, int wait_ms) override;
  void pass_counted(CallConsumer& to, bool final) override;
  void finish(CallConsumer& to) override;
  std::uint64_t now_ns() const override { return monotonic_ns(); }
  std::vector<ct_api_stats> api_stats() override;
  const Sampling* sampling() const override { return budget_ ? &budget_->sampling() : nullptr; }
  LossCounts losses() override;
  std::optional<CostReport> cost() override;
  std::optional<NodeCounts> node_counts() override;
  SiteNames site_names() override { return reader_->site_names(); }
  std::string location(std::uint32_t pid, std::uint64_t addr) override;
  std::string gpu_code(std::uint32_t pid, std::uint64_t addr) override;
  int exit_status() const override;

 private:
  void start_budget();

  const Options& opts_;
  Symbolizer symbolizer_;  // the traced processes' mappings: the target fills it, the reader names with it
  std::unique_ptr<Tracee> target_;
  std::unique_ptr<BpfObject> bpf_;
  std::unique_ptr<RecordReader> reader_;
  std::unique_ptr<ExporterCounts> exporter_;  // exporter mode
  std::unique_ptr<BudgetControl> budget_;     // --max-overhead
  std::optional<ProbeCost> per_hit_;          // what a probe hit costs, when it could be measured
  std::uint64_t tracer_cpu_at_release_ns_ = 0;  // cudatrace's CPU time when the target was let run
  std::uint64_t start_ns_ = 0;
  bool trace_records_ = false;  // a record per call: the statistics map counts only the lost ones
};

}  // namespace cudatrace
