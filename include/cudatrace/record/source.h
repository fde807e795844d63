// The record stage's face to the rest of cudatrace: a source of decoded
// calls, in the order they completed, and of the aggregates counted without
// a record. Two sources: the live recorder (record/recorder.h) and a trace
// saved with --json (record/saved_trace.h). The driver (drive/driver.h)
// runs either in the same way: nothing past a source knows which it is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/stack_frame.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/node_counts.h"

namespace cudatrace {

// What a source hands on.
class CallConsumer {
 public:
  virtual ~CallConsumer() = default;
  // A decoded call (its views valid until the next one).
  virtual void on_call(Call& c) = 0;
  // `counted.calls` calls like `c` that were counted without records
  // (summary mode's launches and copies, counted in BPF).
  virtual void on_counted(const Call& c, const ct_activity& counted) = 0;
  // A process or thread exited: what is kept for it may go.
  virtual void forget_process(std::uint32_t pid) = 0;
  virtual void forget_thread(std::uint32_t pid, std::uint32_t tid) = 0;
};

// What the driver's analyses and writers need from a live source, as the
// driver derives it from what it built: which calls BPF sends a record
// for, and what it counts itself instead. A saved trace has its records
// already and needs none of it.
struct RecordsNeeded {
  enum class Calls : std::uint8_t {
    Every,    // a record per call: the trace is written
    Summary,  // per-API statistics counted in BPF; records only for the
              // calls the analyses read one by one (the summary)
    Export,   // calls counted per process in BPF; records only for
              // allocations and frees (the Prometheus exporter)
  };
  Calls calls = Calls::Every;
  // Every call counted in the kernel as exporter mode counts it, beside
  // the records the mode asks for (Export, and --otlp's metrics): node_counts().
  bool node_counts = false;
  // Export: a record also for each call made under a published span
  // (--otlp's spans beside --prometheus).
  bool span_records = false;
  // Summary: a record for every call all the same (--by-range and
  // --gpu-time read each launch and synchronisation).
  bool every_record = false;
  // Summary: launches and copies counted in BPF, without records (nothing
  // needs them one by one: neither a timeline nor every_record).
  bool counted_activity = false;
  // --stack: each record carries its call's user stack, as Addresses (a
  // summary names only the stacks it reports: SiteNames) or as Frames
  // symbolised when the call is read (a trace prints every one).
  enum class Stacks : std::uint8_t { None, Addresses, Frames };
  Stacks stacks = Stacks::None;
  // The facets whose context each record carries (decode/facet.h: what
  // each asks capture for).
  std::vector<const Facet*> facets;
  bool captures(const Facet& f) const { return std::find(facets.begin(), facets.end(), &f) != facets.end(); }
  // The trace goes to standard output: a command started for it writes its
  // own output to standard error.
  bool trace_on_stdout = true;
};

class Source {
 public:
  virtual ~Source() = default;

  // Gets ready to feed: live, loads the BPF object for what `needs` asks
  // and attaches to the target (a command is started, held before it
  // runs); saved, opens the trace and reads up to its first call. An exit
  // status (options.h): kExitOk, or why not, said on stderr.
  virtual int start(const RecordsNeeded& needs) = 0;
  // Before start(), while the driver opens the outputs (a FIFO waits for its
  // reader): the exit status to end with at once because a stop signal came
  // (live: SIGINT, SIGTERM, SIGHUP), or -1 while none has.
  virtual int stopped_before_start() const { return -1; }
  // The CLOCK_MONOTONIC time the outputs show as 0.
  virtual std::uint64_t start_ns() const = 0;
  // Whether the trace is not everyone's to read: files made of it get mode 0600.
  virtual bool private_trace() const = 0;
  // Whether the source loses nothing while its consumer waits: a saved
  // trace does, and its outputs are then written at the consumer's pace;
  // the live ring buffer does not, and output that is not read in time is
  // dropped and counted instead (render/output_writer.h).
  virtual bool can_wait() const { return false; }
  // Whether what RecordsNeeded asks to count in the kernel (counted_activity)
  // is counted there: live it is; a saved trace has every call's record.
  virtual bool counts_in_kernel() const { return true; }
  // Lets the target run (command mode: releases the command; -p and the
  // whole node: says that tracing has begun); an exit status.
  virtual int release() = 0;

  // Hands `to` what has come, waiting up to `wait_ms` for it; false once
  // the source has ended (the target exited, a stop was asked for, the
  // trace ended, or it failed: failed()).
  virtual bool feed(CallConsumer& to, int wait_ms) = 0;
  // Hands on what was counted without records so far (before a report).
  virtual void pass_counted(CallConsumer&, bool /*final*/) {}
  // After the last feed: the last records, and calls still in progress as
  // unfinished ones.
  virtual void finish(CallConsumer& to) = 0;
  // The source could not go on (a trace line that is not one): what it
  // fed is all there is, and no end is to be written.
  virtual bool failed() const { return false; }

  // "Now": live the clock, saved the end of the last call read.
  virtual std::uint64_t now_ns() const = 0;
  // Per-API statistics so far, by API id (summary mode; estimates scaled
  // up under --max-overhead).
  virtual std::vector<ct_api_stats> api_stats() = 0;
  // --max-overhead: which APIs' counts are estimates; null when all are exact.
  virtual const Sampling* sampling() const { return nullptr; }
  virtual LossCounts losses() = 0;
  // What tracing has cost the traced processes so far, when it is known.
  virtual std::optional<CostReport> cost() { return std::nullopt; }
  // With RecordsNeeded::node_counts: what the in-kernel counts grew by since the last call.
  virtual std::optional<NodeCounts> node_counts() { return std::nullopt; }
  // Names for call sites and stacks of the traced processes.
  virtual SiteNames site_names() = 0;
  // A program call site as a location in its files ("app+0x1234
  // (main+0x2a)") for warnings; the address when it cannot be known.
  virtual std::string location(std::uint32_t pid, std::uint64_t addr) = 0;
  // The GPU code of the file mapped at `addr` ("app holds sm_80 only, no
  // PTX"): what a launch that found no code for the GPU is told with; empty
  // when not known.
  virtual std::string gpu_code(std::uint32_t /*pid*/, std::uint64_t /*addr*/) { return {}; }
  // After finish(): the source's exit status (command mode: the command's).
  virtual int exit_status() const = 0;
};

}  // namespace cudatrace
