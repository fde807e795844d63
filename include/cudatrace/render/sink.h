// The render stage's one interface: where analysed calls go. The session
// (and `cudatrace report`) decodes a record, passes the call through the
// analysis pipeline (analysis/pipeline.h), then hands it to each sink:
//   TraceSink     text lines or JSON Lines (output.h), the trace itself
//   SummarySink   summary mode: no call lines; the reports come from the
//                 summary tables (report.h)
//   PerfettoWriter  --perfetto: the timeline (perfetto.h)
// A new output format is a new Sink here; nothing upstream changes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/render/warning.h"

namespace cudatrace {

class Output;
struct EndStats;

class Sink {
 public:
  virtual ~Sink() = default;
  // A call of a displayed API, annotated by the pipeline; `a` says what it did.
  virtual void on_call(const Call& c, const CallAnalysis& a) = 0;
  // An NVTX range that ended (--nvtx), whatever API ended it.
  virtual void on_nvtx_range(const NvtxClosed&) {}
  // A problem found in the traced program at call `c`, before `c` itself.
  virtual void on_warning(const Call&, const Warning&) {}
};

// Calls as trace lines through an Output (text or JSON Lines), counted in
// `stats` (calls, unfinished). Where each record's text ends goes to
// `record_ends` when given (output_writer.h: Chunk), so that text the
// consumer never reads is counted in records.
class TraceSink final : public Sink {
 public:
  // `drop_nvtx`: --min-us or --errors is given; NVTX calls are never slow or
  // failed, so they are left out.
  TraceSink(Output& out, EndStats& stats, bool drop_nvtx, std::vector<std::uint32_t>* record_ends)
      : out_(out), stats_(stats), drop_nvtx_(drop_nvtx), record_ends_(record_ends) {}
  void on_call(const Call& c, const CallAnalysis& a) override;
  void on_warning(const Call& c, const Warning& w) override;

 private:
  Output& out_;
  EndStats& stats_;
  bool drop_nvtx_;
  std::vector<std::uint32_t>* record_ends_;
};

// Summary mode: calls are not printed; unfinished ones are counted in
// `stats`, and warnings still go to the output (JSON: warning lines).
class SummarySink final : public Sink {
 public:
  SummarySink(Output& out, EndStats& stats) : out_(out), stats_(stats) {}
  void on_call(const Call& c, const CallAnalysis&) override;
  void on_warning(const Call& c, const Warning& w) override;

 private:
  Output& out_;
  EndStats& stats_;
};

}  // namespace cudatrace
