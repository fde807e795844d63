#include "cudatrace/cli/offline.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>

#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/cli/trace_line.h"
#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/render/format.h"
#include "cudatrace/render/perfetto.h"
#include "cudatrace/render/report.h"
#include "cudatrace/render/sink.h"

namespace cudatrace {
namespace {

// The lines of a file, of any length, without their newlines.
struct LineReader {
  std::FILE* in;
  char* buf = nullptr;
  std::size_t capacity = 0;

  ~LineReader() { std::free(buf); }
  bool next(std::string_view& line) {
    const ssize_t n = ::getline(&buf, &capacity, in);
    if (n < 0) return false;
    line = std::string_view(buf, static_cast<std::size_t>(n));
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    return true;
  }
};

// The report of one trace file: decode -> pipeline -> sinks, as Session::on_call
// does, without the BPF side.
class OfflineReport {
 public:
  OfflineReport(const Options& opts, bool private_trace) : opts_(opts), private_trace_(private_trace) {}

  int run(std::FILE* in, const std::string& name);

 private:
  bool start(std::uint64_t start_ns, std::string& error);
  void on_call(const TraceLine& line);
  bool flush();

  const Options& opts_;
  const bool private_trace_;  // the trace is not for every user to read: nor is its timeline
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
    const OutputFileOptions file{opts_.output_follow_symlinks, private_trace_};
    std::unique_ptr<PerfettoWriter> perfetto = PerfettoWriter::open(opts_.perfetto_path, file, start_ns, error);
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
    std::fprintf(stderr, "cudatrace: warning: %s\n", terminal_safe(w.message).c_str());
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

int OfflineReport::run(std::FILE* in, const std::string& name) {
  TraceLine line;
  std::string error;
  std::size_t number = 0;
  bool ended = false;
  // What is wrong can quote the line, which is anyone's bytes.
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "cudatrace: %s:%zu: %s\n", name.c_str(), number, terminal_safe(why).c_str());
    return kExitInput;
  };
  LineReader reader{in};
  std::string_view text;
  while (reader.next(text)) {
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
  if (std::ferror(in)) {
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
      std::fprintf(stderr, "cudatrace: %s\n", error.c_str());
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

std::FILE* open_trace(const std::string& path, std::chrono::milliseconds writer_wait, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  // Opened without blocking: a FIFO nobody opens for writing would wait for
  // ever. A read says whether a writer is there (EAGAIN, or a byte, which is
  // put back) or not (end of file, until one comes).
  int first = EOF;
  for (const auto deadline = std::chrono::steady_clock::now() + writer_wait; S_ISFIFO(st.st_mode);) {
    unsigned char byte = 0;
    const ssize_t n = ::read(fd, &byte, 1);
    if (n == 1) first = byte;
    if (n == 1 || (n < 0 && errno == EAGAIN)) break;
    if (n < 0 && errno != EINTR) {
      error = "reading " + path + ": " + std::strerror(errno);
      close(fd);
      return nullptr;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      error = fmt::format("cannot read {}: it is a FIFO and no process opened it for writing within {} s", path,
                          std::chrono::duration_cast<std::chrono::seconds>(writer_wait).count());
      close(fd);
      return nullptr;
    }
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 20);  // data wakes it; a writer that opens and waits does not: look again soon
  }
  std::FILE* f = nullptr;
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(f = fdopen(fd, "r"))) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  if (first != EOF) std::ungetc(first, f);
  return f;
}

int run_report(const Options& opts, const std::string& path) {
  std::FILE* in = stdin;
  if (path != "-") {
    std::string error;
    in = open_trace(path, kFifoWriterWait, error);
    if (!in) {
      std::fprintf(stderr, "cudatrace: %s\n", error.c_str());
      return kExitInput;
    }
  }
  // A timeline is no easier to read than the trace it is made of.
  struct stat st {};
  const bool private_trace = fstat(fileno(in), &st) == 0 && S_ISREG(st.st_mode) && !(st.st_mode & S_IROTH);
  OfflineReport report(opts, private_trace);
  const int status = report.run(in, path == "-" ? "standard input" : path);
  if (in != stdin) std::fclose(in);
  return status;
}

}  // namespace cudatrace
