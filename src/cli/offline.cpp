#include "cudatrace/cli/offline.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>

#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/cli/trace_line.h"
#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/render/perfetto.h"
#include "cudatrace/render/report.h"
#include "cudatrace/render/sink.h"

namespace cudatrace {
namespace {

// The report of one trace file: decode -> pipeline -> sinks, as Session::on_call
// does, without the BPF side.
class OfflineReport {
 public:
  explicit OfflineReport(const Options& opts) : opts_(opts) {}

  int run(std::istream& in, const std::string& name);

 private:
  bool start(std::uint64_t start_ns, std::string& error);
  void on_call(const TraceLine& line);
  bool flush();

  const Options& opts_;
  std::unique_ptr<Output> out_;
  Pipeline pipeline_{PipelineOptions{opts_.display, false, false, opts_.summary}};
  std::vector<std::unique_ptr<Sink>> sinks_;  // the trace or the summary, and the timeline
  std::unique_ptr<Reporter> reporter_;
  PerfettoWriter* perfetto_ = nullptr;  // one of sinks_
  KernelNames names_;
  Call call_;
  std::vector<ct_api_stats> api_stats_;  // what BPF counts live, by API id
  std::vector<Warning> pending_warnings_;   // warnings about the next call line
  std::deque<std::string> pending_kinds_;   // their kinds' storage (a deque does not move them)
  EndStats stats_;
  std::uint64_t last_ns_ = 0;  // the end of the last call: "now" for the final report
  bool output_failed_ = false;
};

bool OfflineReport::flush() {
  if (output_failed_) return false;
  const auto& buf = out_->buffer();
  for (std::size_t done = 0; done < buf.size();) {
    const ssize_t n = ::write(STDOUT_FILENO, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A reader that went away (| head) is not an error worth a line.
      if (errno != EPIPE) std::fprintf(stderr, "cudatrace: writing standard output: %s\n", std::strerror(errno));
      output_failed_ = true;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  out_->buffer().clear();
  return true;
}

bool OfflineReport::start(std::uint64_t start_ns, std::string& error) {
  out_ = opts_.json ? make_json_output() : make_text_output(start_ns, opts_.full_names);
  if (opts_.summary) {
    ReportOptions report{opts_.display, opts_.summary_tables, opts_.hist, opts_.insights, opts_.json, start_ns, {},
                         opts_.full_names, true};
    reporter_ = std::make_unique<Reporter>(report, pipeline_, nullptr);
    api_stats_.assign(apis().size(), ct_api_stats{});
    sinks_.push_back(std::make_unique<SummarySink>(*out_, stats_));
  } else {
    out_->header();
    sinks_.push_back(std::make_unique<TraceSink>(*out_, stats_, false, nullptr));
  }
  if (!opts_.perfetto_path.empty()) {
    std::unique_ptr<PerfettoWriter> perfetto = PerfettoWriter::open(opts_.perfetto_path, start_ns, error);
    if (!perfetto) return false;
    perfetto_ = perfetto.get();
    sinks_.push_back(std::move(perfetto));
  }
  return true;
}

void OfflineReport::on_call(const TraceLine& line) {
  const ct_call& rec = line.record();
  if (!line.kernel_mangled().empty()) names_.add(rec.pid, line.kernel_handle(), line.kernel_mangled());
  if (!decode_call(rec, &names_, call_)) return;
  if (call_.api->group() == Group::Module) names_.learn(call_);
  // The pipeline recomputes what the analyses annotate (stream ids, waits,
  // NCCL comm_id, rank and seq); the pageable-copy warnings are the trace's
  // own warning lines (their call sites were symbolised live).
  const CallAnalysis& analysis = pipeline_.on_call(call_);
  last_ns_ = std::max<std::uint64_t>(last_ns_, call_.end_ns());
  for (const Warning& w : pending_warnings_) {
    std::fprintf(stderr, "cudatrace: warning: %s\n", w.message.c_str());
    for (const auto& sink : sinks_) sink->on_warning(call_, w);
  }
  if (!analysis.displayed) return;
  if (reporter_) {
    // What BPF counts live in summary mode.
    if (call_.entry_only && !call_.unfinished)
      ++api_stats_[call_.api->id].calls;  // counted; it has no latency to add
    else if (!call_.unfinished)  // (the summary sink counts unfinished calls)
      add_call(api_stats_[call_.api->id], call_.dur_ns, call_.failed());
  } else {
    call_.stack = line.stack();
  }
  for (const auto& sink : sinks_) sink->on_call(call_, analysis);
}

int OfflineReport::run(std::istream& in, const std::string& name) {
  TraceLine line;
  std::string text, error;
  std::size_t number = 0;
  bool ended = false;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "cudatrace: %s:%zu: %s\n", name.c_str(), number, why.c_str());
    return kExitInput;
  };
  while (std::getline(in, text)) {
    ++number;
    if (text.empty()) continue;
    if (ended) return fail("a line after the end line");
    if (!line.parse(text, error)) return fail(error);
    switch (line.type()) {
      case TraceLine::Type::End:
        ended = true;
        stats_.lost_ringbuf = line.end().lost_ringbuf;
        stats_.lost_threads = line.end().lost_threads;
        stats_.depth_overflow = line.end().depth_overflow;
        stats_.lost_control = line.end().lost_control;
        stats_.unmatched = line.end().unmatched;
        break;
      case TraceLine::Type::Warning:
        pending_warnings_.push_back(line.warning());
        pending_kinds_.emplace_back(line.warning().kind);
        pending_warnings_.back().kind = pending_kinds_.back().c_str();
        break;
      case TraceLine::Type::Call:
        // The trace does not say when tracing started: its first call is time 0.
        if (!out_ && !start(line.record().ts_ns, error)) {
          std::fprintf(stderr, "cudatrace: %s\n", error.c_str());
          return kExitOutput;
        }
        on_call(line);
        pending_warnings_.clear();
        pending_kinds_.clear();
        if (!reporter_ && out_->buffer().size() > (1 << 16) && !flush()) return kExitOutput;
        break;
    }
  }
  if (in.bad()) {
    std::fprintf(stderr, "cudatrace: reading %s: %s\n", name.c_str(), std::strerror(errno));
    return kExitInput;
  }
  if (!ended && !out_) {
    std::fprintf(stderr, "cudatrace: %s: not a trace: no calls and no end line in it\n", name.c_str());
    return kExitInput;
  }
  if (!out_ && !start(0, error)) {  // a trace of no calls: empty tables
    std::fprintf(stderr, "cudatrace: %s\n", error.c_str());
    return kExitOutput;
  }
  if (!ended)
    std::fprintf(stderr, "cudatrace: warning: %s has no end line: the trace was cut short, its last calls may be missing\n",
                 name.c_str());
  if (perfetto_) {
    if (!perfetto_->finish(error)) {
      std::fprintf(stderr, "cudatrace: %s: %s\n", opts_.perfetto_path.c_str(), error.c_str());
      return kExitOutput;
    }
  }
  if (reporter_) {
    stats_.calls = reporter_->calls(api_stats_);
    reporter_->report(out_->buffer(), api_stats_, last_ns_, true);
  }
  fmt::memory_buffer summary;
  out_->end(stats_, summary);
  if (!flush()) return kExitOutput;
  if (summary.size()) std::fwrite(summary.data(), 1, summary.size(), stderr);
  return kExitOk;
}

}  // namespace

int run_report(const Options& opts, const std::string& path) {
  OfflineReport report(opts);
  if (path == "-") return report.run(std::cin, "standard input");
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cudatrace: cannot read %s: %s\n", path.c_str(), std::strerror(errno));
    return kExitInput;
  }
  return report.run(in, path);
}

}  // namespace cudatrace
