// The node exporter's counts (--prometheus, --otlp's metrics; docs/prometheus.md): what the
// in-kernel aggregation grew by since the last look, per process, each
// process labelled by who it is (its name, container and pod) as first seen
// while it ran.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>

#include "cudatrace/accounting.h"
#include "cudatrace/node_counts.h"
#include "cudatrace/record/node_stats.h"

namespace cudatrace {

class BpfObject;

class ExporterCounts {
 public:
  // `forget_exited_hits`: see NodeStats (the exporter's end line prices no process).
  ExporterCounts(const BpfObject& bpf, bool forget_exited_hits);

  // Who `pid` is, read while it runs (a short-lived one may be gone by the
  // next look).
  void note_process(pid_t pid);
  // The counts and probe hits (priced at `per_hit`) grown since the last
  // read, with the labels of the processes they name; a process gone
  // before this read is in it for the last time. The rest of NodeCounts is
  // the recorder's to fill.
  NodeCounts read(const ProbeCost& per_hit);

 private:
  NodeStats stats_;
  std::map<std::uint32_t, ProcessLabel> labels_;  // processes as first seen
};

}  // namespace cudatrace
