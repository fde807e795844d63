// The session's output: the -o file, handing formatted output to the writer
// thread (counting what it cannot take), and the summary reports (-i).
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cudatrace.skel.h"
#include "cudatrace/render/output_file.h"
#include "cudatrace/target/process_state.h"
#include "cudatrace/trace/session.h"

#include "cudatrace/render/range_summary.h"

namespace cudatrace {

// The -o file and the timeline are created only once the target is found
// and probes are attached: a start that failed leaves no empty file behind.
int Session::open_output() {
  const OutputFileOptions file{opts_.output_follow_symlinks, trace_is_private(opts_.pid)};
  std::string error;
  if (!opts_.output_path.empty()) {
    out_fd_ = open_output_file(opts_.output_path, file, error);
    if (out_fd_ < 0) {
      error_line(error);
      return kExitOutput;
    }
  }
  if (!opts_.perfetto_path.empty()) {
    std::unique_ptr<PerfettoWriter> perfetto = PerfettoWriter::open(opts_.perfetto_path, file, start_ns_, error);
    if (!perfetto) {
      error_line(error);
      return kExitOutput;
    }
    perfetto_ = perfetto.get();
    sinks_.push_back(std::move(perfetto));
  }
  return kExitOk;
}

// Hands what was formatted to the writer thread; false once the output has
// failed or its reader has gone.
bool Session::flush() {
  hand_over_output();
  return output_ok();
}

// When the writer's queue is full (the output's consumer has fallen behind
// by more than --buffer-mb), the chunk is dropped and its records are lost.
void Session::hand_over_output() {
  fmt::memory_buffer& formatted = out_->buffer();
  if (formatted.size() == 0) return;
  chunk_.bytes = std::move(formatted);
  if (!writer_->push(chunk_)) {
    const RecordCount dropped = records_after(chunk_, 0);
    count_unwritten(dropped);
    if (dropped.total() == 0 && !writer_->error() && reporter_)
      warn_line("a report was dropped: the output is not being read (output buffer full, see --buffer-mb)");
    chunk_.bytes.clear();
    chunk_.record_ends.clear();
  }
  formatted = std::move(chunk_.bytes);
}

bool Session::output_ok() {
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

void Session::count_unwritten(const RecordCount& n) {
  stats_.calls -= n.calls;
  stats_.unfinished -= n.unfinished;
  stats_.lost_output += n.total();
}

void Session::summary_report(bool final) {
  std::vector<ct_api_stats> run;
  if (!read_api_stats(bpf_map__fd(skel_->maps.api_stats), apis().size(), run)) {
    warn_line(std::string("cannot read the per-API statistics: ") + std::strerror(errno));
    return;
  }
  if (budget_) budget_->extrapolate(run);
  if (final) stats_.calls = reporter_->calls(run);
  // Copies of generations whose page-locked change is still unread wait for it.
  read_activity(final ? ~std::uint64_t(0) : page_locked_changes_ + 1, true);
  CostReport cost;
  const bool with_cost = !final && (cost_measured_ || budget_);
  if (with_cost) cost = cost_so_far();
  reporter_->report(out_->buffer(), run, monotonic_ns(), final, with_cost ? &cost : nullptr);
  if (pipeline_->by_range() && final) append_range_summary(out_->buffer(), *pipeline_->by_range(), opts_.json);
  next_report_ns_ += std::uint64_t(opts_.interval_s) * 1000000000ull;
}

}  // namespace cudatrace
