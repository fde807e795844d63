// The recorder's course: start() prepares the target, loads the BPF object
// for what the driver needs, opens the reader and attaches; release() lets
// the target run; feed() reads until the target says tracing is over;
// finish() detaches and reads the ring to its end.
#include "cudatrace/record/recorder.h"

#include <fmt/format.h>

#include <signal.h>

#include <cstdio>

#include "cudatrace/record/cost.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/terminal.h"

namespace cudatrace {

// The stop signals are caught first: a stop is honoured at any moment, the
// wait for an output's reader (before start) included.
Recorder::Recorder(const Options& opts) : opts_(opts), target_(make_tracee(opts, symbolizer_)) {
  catch_stop_signals();
}

int Recorder::stopped_before_start() const { return stop_signal() ? target_->stopped_at_start(stop_signal()) : -1; }

Recorder::~Recorder() = default;

int Recorder::start(const RecordsNeeded& needs) {
  trace_records_ = needs.calls == RecordsNeeded::Calls::Every;
  const std::uint64_t load_start_ns = monotonic_ns();
  const TracedProcesses traced = target_->prepare();
  bpf_ = std::make_unique<BpfObject>();
  reader_ = std::make_unique<RecordReader>(*bpf_, *target_, symbolizer_, needs);
  int loaded = kExitOk;
  {
    const ExitAtStop exit_at_stop([this](int signal) { return target_->stopped_at_start(signal); });
    loaded = bpf_->load(opts_, needs, traced);
    if (loaded == kExitOk) loaded = reader_->open();
    if (loaded == kExitOk) {
      per_hit_ = bpf_->measure_cost(opts_.verbose);
      reader_->drain();  // the measurement's records, which name no API
    }
  }
  if (stop_signal()) return target_->stopped_at_start(stop_signal());
  if (loaded) return loaded;
  if (needs.node_counts) {
    // A trace's end line prices every process traced: only the exporter forgets the exited ones' hits.
    exporter_ = std::make_unique<ExporterCounts>(*bpf_, needs.calls == RecordsNeeded::Calls::Export);
    target_->on_probed_process([this](pid_t pid) { exporter_->note_process(pid); });
  }
  if (int rc = target_->attach(*bpf_, needs)) return rc;
  if (stop_signal()) return target_->stopped_at_start(stop_signal());
  if (opts_.verbose) {
    const Probes& probes = *bpf_->probes();
    std::fprintf(stderr, "cudatrace: BPF loaded and %zu probes attached in %.1f ms (%s)\n", probes.probe_count(),
                 double(monotonic_ns() - load_start_ns) / 1e6,
                 probes.mode() == AttachMode::MultiSession ? "uprobe sessions"
                 : probes.mode() == AttachMode::PerfPair   ? "perf-event uprobe + uretprobe pairs"
                                                           : "uprobe + uretprobe pairs");
  }
  signal(SIGPIPE, SIG_IGN);  // after the command's fork: it keeps its own
  // Time 0 of the outputs, and the start of -i's first interval: the probes
  // are in and tracing begins, however long loading and attaching took (a
  // second or more on a busy machine, which the first interval lost).
  start_ns_ = monotonic_ns();
  return kExitOk;
}

// Said once the outputs exist (the driver opens them between start and
// release): whoever waits for the target's line finds the -o file there.
int Recorder::release() {
  tracer_cpu_at_release_ns_ = own_cpu_ns();
  bpf_->begin_tracing(true);  // before a held command runs: none of its calls is missed
  if (int rc = target_->release(stop_signal())) return rc;
  if (opts_.max_overhead_pct > 0) start_budget();
  return kExitOk;
}

bool Recorder::feed(CallConsumer& to, int wait_ms) {
  reader_->hand_to(to);
  reader_->drain_control();
  wait_ms = reader_->wait_ms(wait_ms);
  if (!reader_->poll(budget_ ? budget_->timeout_ms(monotonic_ns(), wait_ms) : wait_ms)) return false;
  if (budget_) budget_->tick(monotonic_ns());
  reader_->forget_exited();
  target_->refresh();
  return target_->keep_tracing(stop_signal());
}

void Recorder::pass_counted(CallConsumer& to, bool final) {
  reader_->hand_to(to);
  reader_->pass_counted(final);
}

void Recorder::finish(CallConsumer& to) {
  reader_->hand_to(to);
  // No call begins to be recorded once tracing ends: closing the links
  // takes long (tens of ms each), and the ring is not read meanwhile. The
  // calls in progress still send their records when they return.
  bpf_->begin_tracing(false);
  reader_->drain_control();
  reader_->drain();
  // Detach first, then read the ring to its end: every record written is
  // seen, and a process stopped at a library load is continued.
  if (budget_) budget_->stop(monotonic_ns());
  bpf_->detach();
  reader_->drain_control();
  reader_->drain();
  reader_->report_open_calls();
  const std::vector<__u64> totals = bpf_->counters();
  target_->say_what_was_missed();
  // Nothing is lost when the activity table fills, so only -v says so.
  if (!opts_.verbose) return;
  if (totals[CT_CNT_ACTIVITY_FULL])
    std::fprintf(stderr, "cudatrace: %llu launches and copies were sent as records: the BPF activity table (%d "
                 "entries) was full; nothing is lost\n", static_cast<unsigned long long>(totals[CT_CNT_ACTIVITY_FULL]),
                 CT_ACTIVITY_ENTRIES);
  if (totals[CT_CNT_UNTRACED])
    std::fprintf(stderr, "cudatrace: %llu calls began while probes were being attached or detached, outside the trace\n",
                 static_cast<unsigned long long>(totals[CT_CNT_UNTRACED]));
  std::fprintf(stderr, "cudatrace: read %llu call records\n", static_cast<unsigned long long>(reader_->records()));
  for (const std::string& note : symbolizer_.handle_layout_notes()) std::fprintf(stderr, "cudatrace: %s\n", note.c_str());
}

int Recorder::exit_status() const { return target_->exit_status(stop_signal()); }

std::vector<ct_api_stats> Recorder::api_stats() {
  std::vector<ct_api_stats> run = bpf_->api_stats();
  if (budget_) budget_->extrapolate(run);
  return run;
}

LossCounts Recorder::losses() {
  LossCounts lost = bpf_->losses();
  if (trace_records_ && lost.ring_buffer) {
    const std::vector<ct_api_stats> counted = bpf_->api_stats();
    for (std::size_t id = 0; id < counted.size(); ++id)
      if (counted[id].calls) lost.ring_buffer_calls[static_cast<std::uint16_t>(id)] = counted[id];
  }
  return lost;
}

std::optional<CostReport> Recorder::cost() {
  if (!per_hit_ && !budget_) return std::nullopt;
  std::vector<HitCount> counts;
  read_hit_counts(bpf_->process_cost_fd(), bpf_->threads_fd(), counts);
  CostReport r = price_hits(counts, per_hit_.value_or(ProbeCost{}), target_->times_at_start(),
                            [](std::uint32_t pid) { return process_times(static_cast<pid_t>(pid)); },
                            tracer_cpu(tracer_cpu_at_release_ns_));
  if (budget_) r.budget = budget_->report();
  return r;
}

std::optional<NodeCounts> Recorder::node_counts() {
  if (!exporter_) return std::nullopt;
  NodeCounts s = exporter_->read(per_hit_.value_or(ProbeCost{}));
  s.probed_files = target_->probed_files();
  s.lost = bpf_->losses();
  s.aggregation_full = bpf_->counters()[CT_CNT_EXPORT_FULL];
  s.sampling = sampling();
  if (budget_) s.budget = budget_->report();
  return s;
}

std::string Recorder::location(std::uint32_t pid, std::uint64_t addr) {
  if (!addr) return "an unknown call site";
  const Symbolizer::Location loc = symbolizer_.locate(static_cast<pid_t>(pid), addr);
  std::string site = fmt::format("{:#x}", addr);
  if (!loc.module.empty()) site = fmt::format("{}+{:#x}", loc.module.substr(loc.module.rfind('/') + 1), loc.module_offset);
  if (!loc.function.empty()) site += fmt::format(" ({}+{:#x})", loc.function, loc.function_offset);
  return site;
}

std::string Recorder::gpu_code(std::uint32_t pid, std::uint64_t addr) {
  return symbolizer_.gpu_code(static_cast<pid_t>(pid), addr);
}

void Recorder::start_budget() {
  BudgetConfig config;
  config.max_fraction = opts_.max_overhead_pct / 100;
  bpf_->mark_hot_apis();
  budget_ = std::make_unique<BudgetControl>(
      config, *bpf_->probes(), per_hit_ ? &*per_hit_ : nullptr, bpf_->process_cost_fd(), bpf_->threads_fd(),
      monotonic_ns(), [this](std::uint64_t ns) { bpf_->drop_hot_frames_before(ns); });
  reader_->sample_with(*budget_);
}

}  // namespace cudatrace
