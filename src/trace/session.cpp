// The session's course: run() sets up the trackers and outputs, loads and
// attaches (session_bpf.cpp, session_attach.cpp), releases the command,
// drains the ring until the target ends or a signal comes, then finishes
// the trace and turns the outcome into the exit status.
#include "cudatrace/trace/session.h"

#include <bpf/libbpf.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cudatrace.skel.h"

namespace cudatrace {

void error_line(const std::string& msg) { std::fprintf(stderr, "cudatrace: %s\n", msg.c_str()); }
void warn_line(const std::string& msg) { std::fprintf(stderr, "cudatrace: warning: %s\n", msg.c_str()); }

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

namespace {

volatile sig_atomic_t g_stop = 0;  // the signal that asked us to stop
// What a stop signal does: set g_stop, which the drain loop and the steps
// of the start-up look at; or, while nothing started needs undoing (loading
// the BPF object, which the kernel frees at exit), end cudatrace at once:
// the verifier alone takes seconds on a busy node, and libbpf would start
// it over after the signal interrupted it.
enum : int { kStopWhenAsked, kExitAtStop, kExitWithSignalAtStop };
volatile sig_atomic_t g_at_stop = kStopWhenAsked;
void on_signal(int sig) {
  g_stop = sig;
  if (g_at_stop != kStopWhenAsked) _exit(g_at_stop == kExitWithSignalAtStop ? 128 + sig : kExitOk);
}

// How SIGINT and SIGTERM were set when cudatrace started: its command gets them so.
struct sigaction g_inherited_int {}, g_inherited_term {};

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  // Also where the parent left them ignored (a background job of a script).
  sigaction(SIGINT, &sa, &g_inherited_int);
  sigaction(SIGTERM, &sa, &g_inherited_term);
}

// Whole-node mode with perf-event uprobes (kernels before 6.6) holds a link
// per probe of every CUDA file: thousands, past the usual 1024 descriptors.
void raise_file_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

// At exit, how long the output may make no progress (its consumer reads
// nothing) before cudatrace stops waiting for it.
constexpr std::chrono::seconds kOutputStall{5};

}  // namespace

Session::~Session() {
  writer_.reset();  // stop writing before the output is closed
  budget_.reset();
  probes_.reset();  // detach before the programs go away
  cost_probes_.reset();
  for (bpf_link* l : tp_links_) bpf_link__destroy(l);
  cudatrace_bpf__destroy(skel_);
  abandon_command(command_);
  if (target_fd_ >= 0) close(target_fd_);
  if (out_fd_ > 2) close(out_fd_);
}

void Session::drain_loop() {
  // After Ctrl-C in command mode, give the command (which got the signal
  // too) a moment to exit so its last calls are still traced.
  std::uint64_t stop_deadline = 0;
  while (true) {
    // Library loads and execs first: they are waited for by no one, but a
    // late attach misses calls (docs/prometheus.md).
    if (control_ring_) control_ring_->drain();
    // Most records are submitted without a wake-up: the timeout collects them.
    if (!ring_->poll(budget_ ? budget_->timeout_ms(monotonic_ns(), 100) : 100)) {
      error_line(std::string("reading the ring buffer: ") + std::strerror(errno));
      break;
    }
    if (budget_) budget_->tick(monotonic_ns());
    end_naming_window_when_done();
    if (!flush()) break;
    forget_exited();
    if (exporter_) export_tick();
    if (opts_.all_processes) rescan_node();
    if (reporter_ && opts_.interval_s && monotonic_ns() >= next_report_ns_) {
      summary_report(false);
      if (!flush()) break;
      if (opts_.count && ++reports_ >= opts_.count) {
        count_reached_ = true;
        break;
      }
    }
    if (target_gone()) break;
    if (g_stop) {
      if (command_.pid <= 0) break;
      // SIGTERM was sent to cudatrace alone (Ctrl-C reaches the command too): pass it on.
      if (!stop_deadline && g_stop == SIGTERM) kill(command_.pid, SIGTERM);
      if (!stop_deadline) stop_deadline = monotonic_ns() + 2000000000ull;
      if (monotonic_ns() > stop_deadline) break;
    }
  }
  ring_->drain();
}

void Session::finish() {
  // Detach first, then read the ring to its end: every record written is
  // seen, and a process stopped at a library load is continued.
  if (budget_) budget_->stop(monotonic_ns());
  probes_.reset();
  cost_probes_.reset();
  for (bpf_link* l : tp_links_) bpf_link__destroy(l);
  tp_links_.clear();
  ring_->drain();
  report_open_calls();
  if (exporter_) {  // the last counts, for the end line
    next_export_ns_ = 0;
    export_tick();
    stats_.calls = exporter_->calls_counted();
  }
  const std::vector<__u64> totals = read_counters();
  if (totals[CT_CNT_ACTIVITY_FULL])
    warn_line(std::to_string(totals[CT_CNT_ACTIVITY_FULL]) + " launches and copies were sent as records: the BPF "
              "activity table (" + std::to_string(CT_ACTIVITY_ENTRIES) + " entries) was full; nothing is lost");
  CostReport cost;
  if (cost_measured_ || budget_) {
    cost = cost_so_far();
    stats_.cost = &cost;
  }
  stats_.lost_ringbuf = totals[CT_CNT_LOST_RINGBUF];
  stats_.lost_threads = totals[CT_CNT_LOST_THREADS];
  stats_.depth_overflow = totals[CT_CNT_DEPTH_OVERFLOW];
  stats_.unmatched = totals[CT_CNT_UNMATCHED];
  stats_.lost_control = totals[CT_CNT_LOST_CONTROL];
  if (perfetto_) {
    std::string error;
    timeline_failed_ = !perfetto_->finish(error);
    if (timeline_failed_) error_line(error);
  }
  if (reporter_) summary_report(true);
  // Everything formatted is written before the end line, which counts what
  // was not: the consumer may take its time, as long as it reads.
  hand_over_output();
  const OutputWriter::Drained drained = writer_->drain(kOutputStall);
  count_unwritten(drained.unwritten);
  output_ok();
  if (output_closed_) return;
  if (!drained.complete && !output_failed_)
    warn_line(fmt::format("{} was not read for {} s: gave up writing it ({} records not written)",
                          opts_.output_path.empty() ? std::string("standard output") : opts_.output_path,
                          kOutputStall.count(), drained.unwritten.total()));
  fmt::memory_buffer summary;
  out_->end(stats_, summary);
  stats_.cost = nullptr;  // `cost` is a local: formatted above, not needed after
  bool end_written = false;
  if (drained.complete) {
    hand_over_output();
    end_written = writer_->drain(kOutputStall).complete;
  }
  out_->buffer().clear();
  output_ok();
  if (output_closed_) return;
  // The JSON end line did not get out: its counts go to stderr instead.
  if (opts_.json && !end_written && !output_failed_) append_end_summary(stats_, summary);
  if (summary.size()) std::fwrite(summary.data(), 1, summary.size(), stderr);
  if (opts_.verbose) {
    rusage self{};
    getrusage(RUSAGE_SELF, &self);
    std::fprintf(stderr, "cudatrace: read %llu call records\n", static_cast<unsigned long long>(records_));
    std::fprintf(stderr, "cudatrace: tracer used %.2f s CPU, peak RSS %.1f MiB\n",
                 double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                     double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
                 double(self.ru_maxrss) / 1024);
  }
  const StreamTracker::Forgotten& forgotten = pipeline_->streams().forgotten();
  if (forgotten.streams || forgotten.events)
    warn_line(fmt::format("{} streams and {} events never destroyed were forgotten (over {} per process); a later use "
                          "of one got a new id",
                          forgotten.streams, forgotten.events, StreamTracker::kMaxHandles));
  if (forgotten.merged_segments)
    warn_line(fmt::format("{} times a stream held over {} pieces of queued work; waits on them say \"approximate\"",
                          forgotten.merged_segments, StreamTracker::kMaxSegments));
  if (opts_.json && end_written && stats_.lost())
    warn_line(std::to_string(stats_.lost()) + " call records lost; see the end line's lost_detail");
}

bool Session::stop_requested() const { return g_stop != 0; }

std::vector<std::pair<int, struct sigaction>> Session::inherited_stop_signals() {
  return {{SIGINT, g_inherited_int}, {SIGTERM, g_inherited_term}};
}

// A stop during the start-up: the command (never released) has not run.
int Session::stopped_at_start() const { return command_mode() ? 128 + g_stop : kExitOk; }

int Session::run() {
  start_ns_ = monotonic_ns();
  catch_stop_signals();  // first: a stop is honoured at any moment of the start-up
  if (opts_.all_processes) raise_file_limit();
  names_.set_symbolizer(
      [this](std::uint32_t pid, std::uint64_t addr) { return symbolizer_.function_at(static_cast<pid_t>(pid), addr); });
  read_string_ = [this](std::uint32_t pid, std::uint64_t addr, std::string& out) {
    return symbolizer_.string_at(static_cast<pid_t>(pid), addr, CT_MAX_PAYLOAD, out);
  };
  out_ = opts_.json ? make_json_output() : make_text_output(start_ns_, opts_.full_names);
  pipeline_ = std::make_unique<Pipeline>(PipelineOptions{opts_.display, opts_.nvtx, opts_.by_range, opts_.summary});
  if (opts_.summary) {
    // NVTX calls are not CUDA work: --by-range has them, the per-API tables do not.
    Selection reported = opts_.display;
    reported.layer[static_cast<int>(Layer::Nvtx)] = false;
    ReportOptions report{reported, opts_.summary_tables, opts_.hist, opts_.insights, opts_.json, start_ns_, {},
                          opts_.full_names, true};
    reporter_ = std::make_unique<Reporter>(report, *pipeline_, &stacks_);
    next_report_ns_ = start_ns_ + std::uint64_t(opts_.interval_s) * 1000000000ull;
    sinks_.push_back(std::make_unique<SummarySink>(*out_, stats_));
  } else {
    sinks_.push_back(std::make_unique<TraceSink>(*out_, stats_, opts_.min_us || opts_.errors_only, &chunk_.record_ends));
  }
  const std::uint64_t load_start_ns = monotonic_ns();
  decide_dlopen_stop();
  g_at_stop = command_mode() ? kExitWithSignalAtStop : kExitAtStop;
  const int loaded = load();
  g_at_stop = kStopWhenAsked;
  if (stop_requested()) return stopped_at_start();
  if (loaded) return loaded;
  // -p: before the loader probe can stop the target. Command mode: after
  // the command is forked (it waits to be released), so it is the first child.
  if (opts_.pid > 0) start_stop_watchdog();
  if (int rc = opts_.all_processes ? attach_node() : opts_.pid > 0 ? attach_pid_target() : start_command()) return rc;
  if (stop_requested()) return stopped_at_start();
  if (opts_.pid <= 0) start_stop_watchdog();
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: BPF loaded and %zu probes attached in %.1f ms (%s)\n", probes_->probe_count(),
                 double(monotonic_ns() - load_start_ns) / 1e6,
                 probes_->mode() == AttachMode::MultiSession ? "uprobe sessions"
                 : probes_->mode() == AttachMode::PerfPair   ? "perf-event uprobe + uretprobe pairs"
                                                             : "uprobe + uretprobe pairs");
  if (int rc = open_output()) return rc;
  signal(SIGPIPE, SIG_IGN);  // after the command's fork: it keeps its own

  if (opts_.all_processes)
    std::fprintf(stderr, "cudatrace: tracing every process of this host (%zu files probed); Ctrl-C to stop\n",
                 probed_files_.size());
  if (exporter_)
    std::fprintf(stderr, "cudatrace: serving Prometheus metrics on port %d (%s/metrics)\n", exporter_->port(),
                 opts_.prometheus_address.c_str());
  if (waiting_for_cuda_)
    std::fprintf(stderr,
                 "cudatrace: process %d has no CUDA library loaded yet; waiting for it to load one (Ctrl-C to stop)\n",
                 opts_.pid);
  else if (opts_.pid > 0)
    std::fprintf(stderr, "cudatrace: tracing process %d (%zu probes); Ctrl-C to stop\n", opts_.pid,
                 probes_->probe_count());
  writer_ = std::make_unique<OutputWriter>(out_fd_, std::size_t(opts_.buffer_mb) << 20);
  out_->buffer().reserve(OutputWriter::kChunkCapacity);
  if (!reporter_ && !exporter_) out_->header();
  // Written before the command starts: an output that cannot be written
  // (-o /dev/full) is found before anything runs.
  hand_over_output();
  writer_->wait_written(kOutputStall);
  if (!output_ok()) return output_closed_ ? kExitBrokenPipe : kExitOutput;
  if (command_mode() && stop_requested()) return stopped_at_start();  // not started after all
  std::string error;
  if (!release_command(command_, error)) {
    error_line(error);
    return kExitTarget;
  }
  if (opts_.max_overhead_pct > 0) start_budget();
  drain_loop();
  finish();
  return exit_status();
}

// The command's own status in command mode: 128 + the signal that ended it,
// or that stopped cudatrace while it still ran (as a shell shows it).
int Session::exit_status() const {
  if (timeline_failed_) return kExitOutput;  // also when the trace's reader went away: the file is an error
  if (output_closed_) return kExitBrokenPipe;
  if (output_failed_) return kExitOutput;
  if (command_.pid > 0) {
    if (!child_reaped_) return count_reached_ ? kExitOk : 128 + (g_stop ? g_stop : SIGINT);
    if (WIFEXITED(child_status_)) return WEXITSTATUS(child_status_);
    if (WIFSIGNALED(child_status_)) return 128 + WTERMSIG(child_status_);
  }
  return kExitOk;
}

int run_tracer(const Options& opts) {
  Session session(opts);
  return session.run();
}

}  // namespace cudatrace
