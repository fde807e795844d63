// What the command line asked for, and the exit statuses: shared by every
// stage (the recorder's BPF configuration, the driver's outputs, reports).
#pragma once

#include <sys/types.h>

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/selection.h"

namespace cudatrace {

// --attach: how uprobes are to be attached.
enum class AttachRequest { Auto, Multi, Perf };

// Exit statuses (documented in docs/guide.md and the man page).
enum ExitStatus : int {
  kExitOk = 0,
  kExitUsage = 2,       // bad command line
  kExitTarget = 3,      // no such process / nothing to trace in it / the command cannot be run
  kExitPermission = 4,  // not root, or missing CAP_BPF+CAP_PERFMON, or BPF refused despite them
  kExitKernel = 5,      // no BTF, BPF load or attach failure
  kExitOutput = 6,      // output cannot be written
  kExitInput = 7,       // cudatrace report: the trace cannot be read or is not a --json trace
  kExitBrokenPipe = 141,  // the output's reader went away (| head): 128 + SIGPIPE, as a shell shows a program it ended
};

struct Options {
  pid_t pid = 0;                     // -p
  std::vector<std::string> command;  // after --
  std::vector<std::string> libs;     // --lib
  Selection selection;               // -f / --layer
  Selection display;                 // groups whose calls are printed
  std::uint64_t min_us = 0;
  bool errors_only = false;
  pid_t tid = 0;
  bool json = false;
  std::string output_path;           // -o; empty: stdout
  std::string perfetto_path;         // --perfetto: timeline file (docs/timeline.md); empty: none
  bool output_follow_symlinks = false;  // follow a symlink -o even in a world-writable directory
  unsigned ring_mb = 16;
  unsigned buffer_mb = 128;          // --buffer-mb: output waiting for its consumer, at most
  // --dlopen-stop: whether a process is paused (SIGSTOP) at each library
  // load until probes are attached there. Auto: always, except for a -p
  // target that is a job of an interactive shell (the shell would report
  // it "Stopped" and take the terminal back).
  enum class DlopenStop { Auto, Always, Never } dlopen_stop = DlopenStop::Auto;
  AttachRequest attach = AttachRequest::Auto;  // --attach
  bool summary = false;  // summary mode: aggregate in BPF, print reports instead of calls
                         // (set by --summary, --hist and --insights)
  bool summary_tables = false;  // --summary: the tables (docs/summary.md)
  bool hist = false;            // --hist: latency histograms
  bool insights = false;        // --insights
  unsigned interval_s = 0;      // -i: also report every N seconds
  unsigned count = 0;           // -c: stop after this many interval reports (0: no limit)
  // The facets asked for (decode/facet.h), by Facet::slot: each facet's
  // option sets its own; one whose option turns it off starts on.
  std::bitset<kMaxFacets> facets = facets_on_by_default();
  // --every-layer (and -f all): also record the driver calls without
  // out-params that a runtime call makes, which are otherwise part of its
  // record (bpf_abi.h, bit 60)
  bool every_layer = false;
  // --empty-probes (benchmarks): attach as usual, run programs that do nothing
  bool empty_probes = false;
  bool full_names = false;  // --full-names: kernels by their whole demangled names in text
  bool verbose = false;
  bool nvtx = false;      // --nvtx: NVTX range stacks on every call (docs/nvtx.md)
  bool by_span = false;  // --by-span: with --summary, CUDA work per OpenTelemetry trace and span attribute
  bool by_range = false;  // --by-range: with --summary, CUDA work per NVTX range
  bool gpu_time = false;  // --gpu-time: GPU time bounds and estimates from host events (docs/gpu-time.md)
  bool all_processes = false;      // --all-processes: every process of the host (docs/prometheus.md)
  std::string prometheus_address;  // --prometheus ADDR:PORT: serve metrics, print no calls; empty: off
  // --otlp [ENDPOINT]: send the calls made under published spans as OTLP
  // spans (docs/otlp.md); empty endpoint: OTEL_EXPORTER_OTLP_ENDPOINT's.
  bool otlp = false;
  std::string otlp_endpoint;
  bool otlp_all_calls = false;  // --otlp-all-calls: also the calls under no span, as root spans
  unsigned otlp_interval_s = 10;  // --otlp-interval: with --prometheus, metrics sent every N seconds
  double max_overhead_pct = 0;  // --max-overhead: budget for the tracing cost (budget.h); 0: none
};

}  // namespace cudatrace
