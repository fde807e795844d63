#include "cudatrace/drive/driver.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cudatrace/render/format.h"
#include "cudatrace/render/output_file.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

// At the end, how long the output may make no progress (its consumer reads
// nothing) before the driver stops waiting for it; a source that can wait
// waits as long as its consumer takes.
constexpr std::chrono::milliseconds kOutputStall{5000};
constexpr std::chrono::milliseconds kNoStall{std::chrono::hours(24 * 365)};
// How long a feed may wait for calls: the pace of the reports and flushes.
constexpr int kFeedWaitMs = 100;
// Exporter mode: how often the node's counts are looked at.
constexpr std::uint64_t kCountEveryNs = 1000000000ull;

// This process's resident memory now, from /proc/self/status: anonymous,
// and file-backed or shared (mapped files, the ring buffer's pages).
// And the proportional set size, from /proc/self/smaps_rollup: each page
// divided by the mappings that share it, so the ring buffer, whose data
// pages are mapped twice in a row, counts once.
struct ResidentMemory {
  unsigned long anon_kib = 0, file_kib = 0, pss_kib = 0;
};
ResidentMemory resident_memory() {
  ResidentMemory m;
  char line[256];
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    while (std::fgets(line, sizeof line, f)) {
      unsigned long kib = 0;
      if (std::sscanf(line, "RssAnon: %lu", &kib) == 1) m.anon_kib += kib;
      if (std::sscanf(line, "RssFile: %lu", &kib) == 1 || std::sscanf(line, "RssShmem: %lu", &kib) == 1)
        m.file_kib += kib;
    }
    std::fclose(f);
  }
  if (std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r")) {
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "Pss: %lu", &m.pss_kib) == 1) break;
    std::fclose(f);
  }
  return m;
}

// The options that narrow what is shown, as a command line writes them
// ("-f launch --errors"); empty when none does.
std::string narrowing_options(const Options& opts) {
  std::string groups;
  bool defaults = true, all = true;
  for (int g = 0; g < kGroupCount; ++g) {
    const auto group = static_cast<Group>(g);
    if (group == Group::Nvtx) continue;  // --nvtx's, not -f's
    const bool on = opts.display.group[g];
    defaults = defaults && on == group_on_by_default(group);
    all = all && on;
    if (on) groups += (groups.empty() ? "" : ",") + std::string(group_name(group));
  }
  std::string out;
  const auto add = [&out](const std::string& option) { out += (out.empty() ? "" : " ") + option; };
  if (!defaults) add("-f " + (all ? std::string("all") : groups));
  std::vector<Layer> layers;  // --layer names one, or all
  for (Layer l : {Layer::Runtime, Layer::Driver, Layer::Nccl})
    if (opts.display.layer[static_cast<int>(l)]) layers.push_back(l);
  if (layers.size() == 1) add(std::string("--layer ") + layer_name(layers[0]));
  if (opts.errors_only) add("--errors");
  if (opts.min_us) add("--min-us " + std::to_string(opts.min_us));
  if (opts.tid) add("--tid " + std::to_string(opts.tid));
  return out;
}

// Why a trace holds no call: what the end line says after "0 calls traced".
std::string empty_because(const Options& opts, const std::optional<CostReport>& cost) {
  if (const std::string narrowing = narrowing_options(opts); !narrowing.empty())
    return "this selection (" + narrowing + ") matched no call the program made";
  const bool probed_any = cost && std::any_of(cost->processes.begin(), cost->processes.end(),
                                              [](const ProcessCost& p) { return p.hits() > 0; });
  if (cost && !probed_any) return "no probed CUDA function was called (-v lists the files probed)";
  return "the program made no call of the groups shown by default (-f all shows every group)";
}

// A trace or summary that holds no call says why.
void explain_if_empty(const Options& opts, EndStats& stats) {
  if (!opts.empty_probes && stats.calls == 0 && stats.unfinished == 0 && stats.lost() == 0)
    stats.empty_because = empty_because(opts, stats.cost);
}

// A mode with a record per call (the trace, the spans): why it is empty,
// and whether its lines and the lost calls are counted by API every call.
void complete_call_stats(const Options& opts, EndStats& stats) {
  explain_if_empty(opts, stats);
  std::uint64_t counted = 0;
  for (const auto& [id, st] : stats.kernel.ring_buffer_calls) counted += st.calls;
  stats.counts_exact = counted == stats.kernel.ring_buffer && stats.kernel.thread_table == 0 &&
                       stats.kernel.depth_overflow == 0 && stats.lost_output == 0;
}

PipelineOptions pipeline_options(const Options& opts) {
  return {opts.display, opts.nvtx, opts.by_range, opts.summary, opts.gpu_time, opts.by_span};
}

}  // namespace

class Driver::Mode {
 public:
  explicit Mode(Driver& d) : d_(d) {}
  virtual ~Mode() = default;
  // What the BPF side sends and counts for it (record/source.h).
  virtual RecordsNeeded::Calls calls() const = 0;
  // Before the source starts: kExitOk, or the exit status it fails with (said on stderr).
  virtual int prepare() { return kExitOk; }
  // Tracing has begun, the trace writer is built.
  virtual void begin() = 0;
  // A call the pipeline has analysed.
  virtual void on_call(const Call&) {}
  // Between two feeds: false to stop tracing (-c reports written).
  virtual bool between_feeds() { return true; }
  // The source has ended: the last counts or report.
  virtual void end() {}
  // The end line's counts, once what was formatted is written (EndStats).
  virtual void complete_stats(EndStats&) {}

 protected:
  Driver& d_;
};

// A line per call (text or JSON Lines); a header first.
class Driver::TraceMode final : public Mode {
 public:
  using Mode::Mode;
  RecordsNeeded::Calls calls() const override { return RecordsNeeded::Calls::Every; }
  void begin() override {
    d_.call_writers_.push_back(d_.trace_.get());
    d_.filtered_in_kernel_ = d_.opts_.min_us || d_.opts_.errors_only;
    d_.trace_->header();
  }
  void complete_stats(EndStats& stats) override { complete_call_stats(d_.opts_, stats); }
};

// --summary: the tables, every -i seconds and at the end, from the
// statistics counted in BPF and the calls the analyses read.
class Driver::SummaryMode final : public Mode {
 public:
  using Mode::Mode;
  RecordsNeeded::Calls calls() const override { return RecordsNeeded::Calls::Summary; }
  void begin() override {
    const Options& opts = d_.opts_;
    // NVTX calls are not CUDA work: --by-range has them, the per-API tables do not.
    Selection reported = opts.display;
    reported.layer[static_cast<int>(Layer::Nvtx)] = false;
    ReportOptions report{reported, opts.summary_tables, opts.hist, opts.insights, opts.json, d_.source_.start_ns(),
                         {}, opts.full_names, true};
    report.activity_counted = d_.records_needed().counted_activity && d_.source_.counts_in_kernel();
    reporter_ = std::make_unique<SummaryReport>(report, d_.pipeline_, d_.source_.site_names());
    next_report_ns_ = d_.source_.start_ns() + interval_ns();
  }
  void on_call(const Call& c) override { d_.stats_.unfinished += c.unfinished; }
  bool between_feeds() override {
    if (!d_.opts_.interval_s || d_.source_.now_ns() < next_report_ns_) return true;
    report(false);
    // -c: stop, leave the command running
    return (d_.flush() || !d_.output_closed_) && !(d_.opts_.count && ++reports_ >= d_.opts_.count);
  }
  void end() override { report(true); }
  void complete_stats(EndStats& stats) override { explain_if_empty(d_.opts_, stats); }

 private:
  std::uint64_t interval_ns() const { return std::uint64_t(d_.opts_.interval_s) * 1000000000ull; }
  void report(bool final) {
    Source& source = d_.source_;
    source.pass_counted(d_, final);
    const std::vector<ct_api_stats> run = source.api_stats();
    if (final) d_.stats_.calls = reporter_->calls(run);
    std::optional<CostReport> cost = final ? std::nullopt : source.cost();
    d_.trace_->summary(reporter_->snapshot(run, source.now_ns(), final, std::move(cost), source.sampling(),
                                           source.losses().records()));
    next_report_ns_ += interval_ns();
  }

  std::unique_ptr<SummaryReport> reporter_;
  std::uint64_t next_report_ns_ = 0;  // with -i
  unsigned reports_ = 0;
};

// --prometheus: the node's counts, looked at once a second and a last time
// at the end, served as metrics; no trace.
class Driver::ExporterMode final : public Mode {
 public:
  using Mode::Mode;
  RecordsNeeded::Calls calls() const override { return RecordsNeeded::Calls::Export; }
  // Served before the source starts: an address that cannot be served is
  // said before anything is loaded, and /metrics answers 503 until tracing
  // has begun.
  int prepare() override {
    std::string error;
    metrics_ = MetricsWriter::serve(d_.opts_.prometheus_address, error);
    if (metrics_) return kExitOk;
    error_line(error);
    return kExitOutput;
  }
  void begin() override {
    metrics_->tracing_began();
    std::fprintf(stderr, "cudatrace: serving Prometheus metrics on port %d (%s/metrics)\n", metrics_->port(),
                 d_.opts_.prometheus_address.c_str());
  }
  bool between_feeds() override {
    count(false);
    return true;
  }
  void end() override {
    count(true);
    d_.stats_.calls = metrics_->calls_counted();
  }

 private:
  void count(bool last) {
    const std::uint64_t now = d_.source_.now_ns();
    if (!last && now < next_count_ns_) return;
    next_count_ns_ = now + kCountEveryNs;
    if (const std::optional<NodeCounts> counts = d_.source_.node_counts())
      metrics_->counts(*counts, d_.pipeline_.memory());
    if (d_.otlp_ && d_.otlp_metrics_due(last)) d_.otlp_->metrics(metrics_->metrics().text());  // --otlp: the same counts
  }

  std::unique_ptr<MetricsWriter> metrics_;
  std::uint64_t next_count_ns_ = 0;  // the next look at the node's counts
};

// --otlp with no trace asked for (no -o, no --json): the calls go out as
// spans only, and the end line counts them.
class Driver::SpansMode final : public Mode {
 public:
  using Mode::Mode;
  RecordsNeeded::Calls calls() const override { return RecordsNeeded::Calls::Every; }
  void begin() override {}
  void on_call(const Call& c) override { ++(c.unfinished ? d_.stats_.unfinished : d_.stats_.calls); }
  void complete_stats(EndStats& stats) override { complete_call_stats(d_.opts_, stats); }
};

std::unique_ptr<Driver::Mode> Driver::make_mode(Driver& d) {
  if (!d.opts_.prometheus_address.empty()) return std::make_unique<ExporterMode>(d);
  if (d.opts_.summary) return std::make_unique<SummaryMode>(d);
  if (d.opts_.otlp && !d.opts_.json && d.opts_.output_path.empty()) return std::make_unique<SpansMode>(d);
  return std::make_unique<TraceMode>(d);
}

Driver::Driver(const Options& opts, Source& source)
    : opts_(opts), source_(source), pipeline_(pipeline_options(opts)), mode_(make_mode(*this)) {}

Driver::~Driver() {
  writer_.reset();  // stop writing before the output is closed
  if (out_fd_ > 2) close(out_fd_);
  if (timeline_fd_ >= 0) close(timeline_fd_);
}

// Decided before the source starts, from the analyses built and the writers
// run() builds: the BPF side sends only what they read.
RecordsNeeded Driver::records_needed() const {
  using Calls = RecordsNeeded::Calls;
  const PipelineOptions& analyses = pipeline_.options();
  RecordsNeeded needs;
  needs.calls = mode_->calls();
  // With --prometheus, --otlp's spans are the calls made under a published
  // span, recorded beside the exporter's (allocations and frees).
  needs.span_records = needs.calls == Calls::Export && opts_.otlp;
  // The facets turned on, where calls are recorded: the exporter's own
  // records carry no context; spans carry their facets' attributes.
  if (needs.calls != Calls::Export || needs.span_records)
    for (const Facet* f : call_facets())
      if (f->on(opts_)) needs.facets.push_back(f);
  const bool facet_reads_each_call =
      std::any_of(needs.facets.begin(), needs.facets.end(), [](const Facet* f) { return f->capture().every_record; });
  // --otlp's metrics are the exporter's, counted in the kernel as it counts them.
  needs.node_counts = needs.calls == Calls::Export || otlp_metrics_;
  // --by-range and --gpu-time read every launch and synchronisation.
  // --by-span reads each call's span; some facets' analyses each call (FacetCapture).
  // --otlp sends every call made under a span (with --prometheus: span_records).
  needs.every_record = analyses.by_range || analyses.gpu_time || analyses.by_span || facet_reads_each_call ||
                       (opts_.otlp && needs.calls != Calls::Export);
  // A timeline draws every launch and copy.
  needs.counted_activity = needs.calls == Calls::Summary && !needs.every_record && opts_.perfetto_path.empty();
  if (stack_facet().on(opts_))  // a summary symbolises only the stacks it reports (the leaks')
    needs.stacks = analyses.tables ? RecordsNeeded::Stacks::Addresses : RecordsNeeded::Stacks::Frames;
  needs.trace_on_stdout = opts_.output_path.empty();
  return needs;
}

// The -o file and the timeline are opened before the source starts: no
// probe is attached while cudatrace waits for an output (a FIFO's reader),
// so no traced program waits with it (issue 38). A start that fails then
// removes the files it created: no empty file is left behind.
int Driver::open_outputs() {
  const OutputFileOptions file{opts_.output_follow_symlinks, source_.private_trace(),
                                [this] { return source_.stopped_before_start() >= 0; }};
  std::string error;
  const auto open = [&](const std::string& path, int& fd) {
    if (path.empty()) return true;
    created_.push_back(output_file_exists(path) ? std::string() : path);
    fd = open_output_file(path, file, error);
    if (fd >= 0) return true;
    if (!error.empty()) error_line(error);  // empty: a stop signal ended the wait
    return false;
  };
  return open(opts_.output_path, out_fd_) && open(opts_.perfetto_path, timeline_fd_) ? kExitOk : kExitOutput;
}

void Driver::remove_created_outputs() {
  for (const std::string& path : created_)
    if (!path.empty()) unlink(path.c_str());
}

int Driver::run() {
  if (opts_.otlp) {
    OtlpConfig config;
    std::string error;
    config.calls_without_span = opts_.otlp_all_calls;
    config.metrics_interval = std::chrono::seconds(opts_.otlp_interval_s);
    config.spans = mode_->calls() != RecordsNeeded::Calls::Export;
    if (config.spans) {
      // The exporter mode pushes its own metrics; any other counts the node's calls for --otlp alone.
      otlp_metrics_ = MetricsWriter::unserved(error);
      if (!otlp_metrics_) warn_line("--otlp sends the spans' own counts only: " + error);
      error.clear();
    }
    config.node_metrics = !config.spans || otlp_metrics_;
    if (read_otlp_config(opts_.otlp_endpoint, [](const char* name) { return std::getenv(name); }, config, error))
      otlp_ = make_otlp_writer(config, error);
    if (!otlp_) {
      error_line(error);
      return kExitOutput;
    }
  }
  if (const int rc = mode_->prepare()) return rc;
  const int opened = open_outputs();
  // A stop signal while an output was waited for (a FIFO's reader): nothing
  // has started, nothing is written.
  if (const int stopped = source_.stopped_before_start(); stopped >= 0) {
    remove_created_outputs();
    return stopped;
  }
  if (opened) return opened;
  if (const int rc = source_.start(records_needed())) {
    remove_created_outputs();
    return rc;
  }
  trace_ = opts_.json ? make_json_writer() : make_text_writer(source_.start_ns(), opts_.full_names);
  if (timeline_fd_ >= 0) {
    std::string error;
    timeline_ = make_perfetto_writer(timeline_fd_, opts_.perfetto_path, source_.start_ns(), error);
    timeline_fd_ = -1;  // the writer's now
    if (!timeline_) {
      error_line(error);
      return kExitOutput;
    }
    call_writers_.push_back(timeline_.get());
  }
  writer_ = std::make_unique<OutputWriter>(out_fd_, std::size_t(opts_.buffer_mb) << 20);
  trace_->buffer()->reserve(OutputWriter::kChunkCapacity);
  mode_->begin();
  // Spans of the calls beside any output (the exporter's: of its span records).
  if (otlp_) call_writers_.push_back(otlp_.get());
  if (otlp_metrics_) {  // the first metrics before the target runs: a Collector learns at once that it is traced
    otlp_metrics_->tracing_began();
    push_otlp_metrics(false);
  }
  // Written before the command starts: an output that cannot be written
  // (-o /dev/full) is found before anything runs.
  hand_over_output();
  writer_->wait_written(kOutputStall);
  if (!output_ok()) return output_closed_ ? kExitBrokenPipe : kExitOutput;
  if (int rc = source_.release()) return rc;
  // An output that fails (a full disk) does not end tracing: every call
  // that follows is still read and counted, as lost (issue 47). Only a
  // reader that went away (`| head`) ends it.
  while (source_.feed(*this, kFeedWaitMs)) {
    if (!flush() && output_closed_) break;
    if (!mode_->between_feeds()) break;
    push_otlp_metrics(false);
  }
  finish();
  return exit_status();
}

void Driver::on_call(Call& c) {
  const CallAnalysis& analysis = pipeline_.on_call(c);
  if (analysis.streams && analysis.streams->pageable_host_ptr)
    warn_pageable_copy(c, *analysis.streams->pageable_host_ptr);
  if (analysis.first_failed_launch) warn_failed_launch(c);
  if (analysis.closed_range)
    for (Writer* w : call_writers_) w->nvtx_range(*analysis.closed_range);
  if (!analysis.displayed) return;
  if (filtered_in_kernel_) c.waited = nullptr;  // unknown, not "waited: nothing"
  for (Writer* w : call_writers_) {
    if (w == trace_.get()) {
      if (filtered_in_kernel_ && c.api->layer() == Layer::Nvtx) continue;
      if (output_failed_) {  // nowhere to write it: counted, not formatted
        ++stats_.lost_output;
        continue;
      }
      ++(c.unfinished ? stats_.unfinished : stats_.calls);
      w->call(c, analysis);
      chunk_.record_ends.push_back(Chunk::record_end(trace_->buffer()->size(), c.unfinished));
    } else {
      w->call(c, analysis);
    }
  }
  mode_->on_call(c);
  if (trace_->buffer()->size() >= OutputWriter::kChunkBytes) hand_over_output();
}

void Driver::on_counted(const Call& c, const ct_activity& counted) {
  if (opts_.display.wants(*c.api)) pipeline_.on_activity(c, counted);
}

void Driver::forget_process(std::uint32_t pid) { pipeline_.forget_process(pid); }

void Driver::forget_thread(std::uint32_t pid, std::uint32_t tid) { pipeline_.forget_thread(pid, tid); }

void Driver::warn_pageable_copy(const Call& c, std::uint64_t host_ptr) {
  // The native site is the warning's location (`report` finds it again by
  // the caller); the facets' sites follow it in the message.
  const std::string location = source_.location(c.pid, c.caller);
  std::string site = location;
  for (const Facet* f : call_facets())
    if (f->present(c))
      if (const std::string at = f->call_site(c); !at.empty()) site += " (" + at + ")";
  const bool to_device = role_value(c, Role::Source) == host_ptr;
  const Warning w{"pageable_async_copy", host_ptr, location,
                  fmt::format("{} {} pageable host memory {:#x} at {}: the copy is synchronous", c.api->symbol,
                              to_device ? "from" : "to", host_ptr, site)};
  warn_line(terminal_safe(w.message));  // module and function names come from the traced program
  trace_->warning(c, w);
}

void Driver::warn_failed_launch(const Call& c) {
  LaunchFacts facts;
  facts.site = source_.location(c.pid, c.caller);
  if (c.kernel_handle) {
    const std::string at = source_.location(c.pid, c.kernel_handle);
    if (at.rfind("0x", 0) != 0) facts.func_site = at;  // in a file: a function, not a driver handle
  }
  if (c.status() == CT_CUDA_NO_BINARY_FOR_GPU) {
    // The code that launched lives in the file that holds the kernel's host stub.
    facts.code = source_.gpu_code(c.pid, c.caller);
  }
  const Warning w{"failed_launch", 0, facts.site, launch_failure_message(c, facts), facts.code};
  warn_line(terminal_safe(w.message));  // kernel and file names come from the traced program
  trace_->warning(c, w);
}

void Driver::finish() {
  source_.finish(*this);
  if (source_.failed()) {  // no end: what was read is all there is, and it was said why
    hand_over_output();
    writer_->drain(source_.can_wait() ? kNoStall : kOutputStall);
    return;
  }
  mode_->end();
  push_otlp_metrics(true);
  stats_.kernel = source_.losses();
  stats_.cost = source_.cost();
  stop_otlp();
  if (timeline_) {
    std::string error;
    timeline_failed_ = !timeline_->finish(error);
    if (timeline_failed_) error_line(error);
  }
  // Everything formatted is written before the end line, which counts what
  // was not: the consumer may take its time, as long as it reads.
  const std::chrono::milliseconds stall = source_.can_wait() ? kNoStall : kOutputStall;
  hand_over_output();
  const OutputWriter::Drained drained = writer_->drain(stall);
  count_unwritten(drained.unwritten);
  output_ok();
  if (output_closed_) return;
  if (!drained.complete && !output_failed_)
    warn_line(fmt::format("{} was not read for {} s: gave up writing it ({} records not written)",
                          opts_.output_path.empty() ? std::string("standard output") : opts_.output_path,
                          std::chrono::duration_cast<std::chrono::seconds>(stall).count(),
                          drained.unwritten.total()));
  mode_->complete_stats(stats_);
  fmt::memory_buffer messages;  // for stderr
  trace_->end(stats_, messages);
  bool end_written = false;
  if (drained.complete) {
    hand_over_output();
    end_written = writer_->drain(stall).complete;
  }
  trace_->buffer()->clear();
  output_ok();
  if (output_closed_) return;
  // The JSON end line did not get out (a full disk, a consumer that stopped
  // reading): its counts, what was written and what was lost, go to stderr.
  if (opts_.json && !end_written) append_end_text(messages, stats_);
  if (messages.size()) std::fwrite(messages.data(), 1, messages.size(), stderr);
  if (opts_.verbose) {
    rusage self{};
    getrusage(RUSAGE_SELF, &self);
    const ResidentMemory now = resident_memory();
    std::fprintf(stderr,
                 "cudatrace: tracer used %.2f s CPU, peak RSS %.1f MiB; at exit %.1f MiB: %.1f anonymous, %.1f "
                 "file-backed and mapped, in which the ring buffer's %u MiB count twice (mapped twice); counted "
                 "once (PSS) %.1f MiB\n",
                 double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                     double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
                 double(self.ru_maxrss) / 1024, double(now.anon_kib + now.file_kib) / 1024,
                 double(now.anon_kib) / 1024, double(now.file_kib) / 1024, opts_.ring_mb,
                 double(now.pss_kib) / 1024);
  }
  const StreamTracker::Forgotten& forgotten = pipeline_.streams().forgotten();
  if (forgotten.streams || forgotten.events)
    warn_line(fmt::format("{} streams and {} events never destroyed were forgotten (over {} per process); a later use "
                          "of one got a new id",
                          forgotten.streams, forgotten.events, StreamTracker::kMaxHandles));
  if (forgotten.graphs)
    warn_line(fmt::format("{} graphs never destroyed were forgotten (over {} per process); a launch of one is "
                          "reported with unknown contents",
                          forgotten.graphs, StreamTracker::kMaxHandles));
  if (forgotten.merged_segments)
    warn_line(fmt::format("{} times a stream held over {} pieces of queued work; waits on them say \"approximate\"",
                          forgotten.merged_segments, StreamTracker::kMaxSegments));
  if (opts_.json && end_written && stats_.lost())
    warn_line(std::to_string(stats_.lost()) + " call records lost; see the end line's lost_detail");
  if (stats_.otlp && stats_.otlp->metrics_failed)
    warn_line(fmt::format("{} of {} OTLP metrics exports failed (last error: {})", stats_.otlp->metrics_failed,
                          stats_.otlp->metrics_failed + stats_.otlp->metrics_sent, stats_.otlp->last_error));
  if (opts_.json && end_written && stats_.otlp && stats_.otlp->lost())
    warn_line(fmt::format("{} of {} OTLP spans not sent (queue full: {}, refused: {}, unsent at the exit timeout: "
                          "{}){}; see the end line's lost_detail",
                          stats_.otlp->lost(), stats_.otlp->spans, stats_.otlp->queue_full, stats_.otlp->rejected,
                          stats_.otlp->unsent,
                          stats_.otlp->last_error.empty() ? "" : "; last error: " + stats_.otlp->last_error));
}

// --otlp beside a trace, summaries or alone: the node exporter's metrics as
// --prometheus would serve them at this moment, read from the kernel's
// counts when they are due (ExporterMode pushes its own).
void Driver::push_otlp_metrics(bool last) {
  if (!otlp_metrics_ || !otlp_metrics_due(last)) return;
  if (const std::optional<NodeCounts> counts = source_.node_counts())
    otlp_metrics_->counts(*counts, pipeline_.memory());
  otlp_->metrics(otlp_metrics_->metrics().text());
}

// Whether the node's metrics are to be pushed now (every --otlp-interval, and
// last); if so, the next push is an interval away.
bool Driver::otlp_metrics_due(bool last) {
  const std::uint64_t now = source_.now_ns();
  if (!last && now < next_otlp_metrics_ns_) return false;
  next_otlp_metrics_ns_ = now + std::uint64_t(opts_.otlp_interval_s) * 1000000000ull;
  return true;
}

// --otlp alone: the calls go to the Collector, not as text to the terminal
// (--json or -o add the trace); the end line still says what was lost.
// Sends what the OTLP queue holds, for at most the export timeout.
void Driver::stop_otlp() {
  if (!otlp_) return;
  stats_.otlp = otlp_->stop();
  call_writers_.erase(std::remove(call_writers_.begin(), call_writers_.end(), otlp_.get()), call_writers_.end());
}

int Driver::exit_status() const {
  if (timeline_failed_) return kExitOutput;  // also when the trace's reader went away: the file is an error
  if (output_closed_) return kExitBrokenPipe;
  if (output_failed_) return kExitOutput;
  return source_.exit_status();
}

// Hands what was formatted to the writer thread; false once the output has
// failed or its reader has gone.
bool Driver::flush() {
  hand_over_output();
  return output_ok();
}

// When the writer's queue is full (the output's consumer has fallen behind
// by more than --buffer-mb), a source that can wait waits for room; for
// one that cannot, the chunk is dropped and its records are lost.
void Driver::hand_over_output() {
  fmt::memory_buffer& formatted = *trace_->buffer();
  if (formatted.size() == 0) return;
  chunk_.bytes = std::move(formatted);
  bool queued = writer_->push(chunk_);
  while (!queued && source_.can_wait() && !writer_->error()) {
    writer_->wait_written(kOutputStall);
    queued = writer_->push(chunk_);
  }
  if (!queued) {
    const RecordCount dropped = records_after(chunk_, 0);
    count_unwritten(dropped);
    if (dropped.total() == 0 && !writer_->error() && mode_->calls() == RecordsNeeded::Calls::Summary)
      warn_line("a report was dropped: the output is not being read (output buffer full, see --buffer-mb)");
    chunk_.bytes.clear();
    chunk_.record_ends.clear();
  }
  formatted = std::move(chunk_.bytes);
}

bool Driver::output_ok() {
  if (output_failed_ || output_closed_) return false;
  const int error = writer_->error();
  if (error == 0) return true;
  if (error == EPIPE) {
    output_closed_ = true;  // `| head`: what was wanted has been read; no error
    return false;
  }
  stats_.output_failure = "writing " + (opts_.output_path.empty() ? std::string("standard output") : opts_.output_path) +
                          ": " + std::strerror(error);
  error_line(stats_.output_failure);
  output_failed_ = true;
  return false;
}

void Driver::count_unwritten(const RecordCount& n) {
  stats_.calls -= n.calls;
  stats_.unfinished -= n.unfinished;
  stats_.lost_output += n.total();
}

}  // namespace cudatrace
