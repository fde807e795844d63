// The driver: built from the options, it owns the analyses (Pipeline), the
// writers, the output mode (the trace, summaries or the exporter's metrics:
// driver.cpp, Driver::Mode) and the way out of the trace (the -o file and
// its writer thread), and runs a source (record/source.h) through them:
//
//   Source ── Call ──▶ Pipeline ──▶ Writers (text or JSON Lines, Perfetto)
//      │                   │
//      ├ counted calls ────┘           SummaryReport ──▶ the trace writer
//      ├ per-API statistics ───────────▲
//      └ node counts ──────────────────────────────────▶ metrics writer
//
// Tracing live and `cudatrace report` are this same code past their
// sources: nothing here knows which one it is fed by.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/analysis/summary_report.h"
#include "cudatrace/options.h"
#include "cudatrace/record/source.h"
#include "cudatrace/render/metrics.h"
#include "cudatrace/render/otlp.h"
#include "cudatrace/render/output_writer.h"
#include "cudatrace/render/writer.h"

namespace cudatrace {

class Driver final : public CallConsumer {
 public:
  Driver(const Options& opts, Source& source);
  ~Driver() override;
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Starts the source, opens the outputs, feeds the source's calls through
  // until it ends, then writes the reports and the end. The exit status.
  int run();

  void on_call(Call& c) override;
  void on_counted(const Call& c, const ct_activity& counted) override;
  void forget_process(std::uint32_t pid) override;
  void forget_thread(std::uint32_t pid, std::uint32_t tid) override;

 private:
  // What the analyses and writers this driver runs need recorded.
  RecordsNeeded records_needed() const;
  int open_outputs();
  void remove_created_outputs();
  void warn_pageable_copy(const Call& c, std::uint64_t host_ptr);
  void warn_failed_launch(const Call& c);
  void push_otlp_metrics(bool last);
  void stop_otlp();
  bool otlp_metrics_due(bool last);
  void finish();
  int exit_status() const;

  // The way out of the trace writer's buffer (output_writer.h).
  bool flush();  // false once the output failed or its reader went away
  void hand_over_output();
  bool output_ok();
  void count_unwritten(const RecordCount& n);

  // What the driver is run for, chosen once from the options (driver.cpp):
  // the trace, summaries (--summary), the exporter's metrics (--prometheus)
  // or, with --otlp and no trace asked for, the spans alone.
  // Each knows what it needs recorded, what it does while calls come and how
  // it ends.
  class Mode;
  class TraceMode;
  class SummaryMode;
  class ExporterMode;
  class SpansMode;
  static std::unique_ptr<Mode> make_mode(Driver& d);

  const Options& opts_;
  Source& source_;
  Pipeline pipeline_;
  std::unique_ptr<Mode> mode_;
  std::unique_ptr<Writer> trace_;            // text or JSON Lines: the trace, or the summaries
  std::unique_ptr<Writer> timeline_;         // --perfetto
  std::unique_ptr<OtlpWriter> otlp_;         // --otlp
  std::unique_ptr<MetricsWriter> otlp_metrics_;  // --otlp without --prometheus: the node's metrics, served nowhere
  std::uint64_t next_otlp_metrics_ns_ = 0;       // --otlp: when the node's metrics are next pushed (0: at once)
  std::vector<Writer*> call_writers_;        // the writers each displayed call goes to
  int out_fd_ = STDOUT_FILENO;
  int timeline_fd_ = -1;              // --perfetto's file, until its writer takes it
  std::vector<std::string> created_;  // the outputs this run created (empty: it existed before)
  std::unique_ptr<OutputWriter> writer_;
  Chunk chunk_;  // where the records in the trace writer's buffer end; its bytes while handed over
  EndStats stats_;
  // --min-us or --errors: the kernel dropped the other calls, so the trace
  // has no NVTX calls (never slow or failed) and no waits (what was queued
  // is not known).
  bool filtered_in_kernel_ = false;
  bool output_failed_ = false;    // writing the output failed (said on stderr)
  bool output_closed_ = false;    // the output's reader went away (| head): end quietly
  bool timeline_failed_ = false;  // writing the --perfetto file failed (said on stderr)
};

}  // namespace cudatrace
