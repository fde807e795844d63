// The BPF object (bpf/cudatrace.bpf.c) as the recorder runs it: the
// skeleton, configured (ct_config) for the records the driver needs and the
// processes the target names, its maps and counters, the tracepoints of
// process lifetimes, and the probes attached with its programs. Destroyed,
// it detaches every probe before its programs go.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/options.h"
#include "cudatrace/record/probes.h"
#include "cudatrace/record/source.h"

struct cudatrace_bpf;  // the skeleton (cudatrace.skel.h)
struct bpf_link;

namespace cudatrace {

// Which processes BPF traces, and what it does at their library loads: the
// target's part of the configuration (tracee.h: Tracee::prepare).
struct TracedProcesses {
  pid_t only = 0;               // this process alone (-p); 0: see the others
  bool registered = false;      // the processes given to trace_process, and their descendants
  bool every_exec_told = false;  // every process; each exec sends a map change on the control ring
  bool stop_at_loads = false;   // a library load stops its process until probes are attached there
  // Probes on driver functions only where code other than a runtime may call
  // them (Probes::defer_driver): for processes traced from their start,
  // which cudatrace sees look the driver's functions up.
  bool driver_on_demand = false;
};

class BpfObject {
 public:
  BpfObject() = default;
  ~BpfObject();
  BpfObject(const BpfObject&) = delete;
  BpfObject& operator=(const BpfObject&) = delete;

  // Checks the privileges, BTF and the kernel's features, configures the
  // object for what the driver `needs`, the `traced` processes and the
  // options (filters, ring size, attach mode, --max-overhead), loads it and
  // attaches the process tracepoints. An exit status (options.h), said on
  // stderr.
  int load(const Options& opts, const RecordsNeeded& needs, const TracedProcesses& traced);
  // What one probe hit costs here (cost.h), measured with the object's own
  // programs before anything is traced; the counters are cleared after it,
  // and its records, which name no API, are left for the reader to drop.
  // nullopt (said) when it cannot be measured.
  std::optional<ProbeCost> measure_cost(bool verbose);

  // The probes attached with the object's programs; null once detached.
  Probes* probes() { return probes_.get(); }
  // Detaches every probe and tracepoint: nothing is recorded after this.
  void detach();
  // Traces `pid`'s calls and its descendants' (TracedProcesses::registered).
  bool trace_process(pid_t pid);

  // The BPF counters (bpf_abi.h: CT_CNT_*), summed over the CPUs.
  std::vector<__u64> counters();
  LossCounts losses();
  // Summary mode's per-API statistics, by API id; zeros (said) when the
  // map cannot be read.
  std::vector<ct_api_stats> api_stats();
  // --max-overhead: tells BPF which APIs are hot (budget.h), and from when
  // on their frames entered before the last detach are to be dropped.
  void mark_hot_apis();
  void drop_hot_frames_before(std::uint64_t ns);

  int events_fd() const;
  // What the programs were loaded with (bpf_abi.h); once loaded.
  const ct_config& settings() const;
  // For the process captures (process_capture.h), which know their own: a
  // map by its name in bpf/ (-1: none), and attaching a program loaded for
  // a facet (FacetCapture::program) at `offset` of `path`, in `pid` (-1:
  // every process that maps it).
  int map_fd(const char* name) const;
  bool attach_program(const char* name, const std::string& path, pid_t pid, std::uint64_t offset,
                      std::string& error);
  int control_fd() const;
  // A ring buffer that becomes readable (and stays so) once every thread of
  // cudatrace has begun to exit, before its links are closed (watchdog.h).
  int tracer_exit_fd() const;
  int threads_fd() const;
  // Calls are recorded from here on (state.bpf.h: tracing_begun), not while
  // probes are still being attached and nobody reads the ring.
  void begin_tracing(bool begun);
  // --py-stack: the next record with Python frames wakes the reader.
  void wake_on_python_frames();
  int process_cost_fd() const;
  int activity_fd() const;  // the keys, and their slots in:
  int activity_counts_fd() const;
  int export_stats_fd() const;
  // Driver functions probed on demand (bpf_abi.h, ct_driver_fn_key): a
  // process's unprobed driver function at `addr`, then probed.
  bool set_driver_fn(std::uint32_t pid, std::uint64_t addr, bool probed);
  // Where `pid`'s CUDA runtimes keep their code (ct_runtime_range), index < CT_RUNTIME_RANGES.
  bool set_runtime_range(std::uint32_t pid, std::uint32_t index, std::uint64_t start, std::uint64_t end,
                         bool runtime_library);
  // Forgets what set_driver_fn and set_runtime_range told of `pid`.
  void forget_driver_fns(std::uint32_t pid, const std::vector<std::uint64_t>& addrs, std::uint32_t ranges);

 private:
  void clear_counters();

  cudatrace_bpf* skel_ = nullptr;
  std::vector<bpf_link*> tracepoints_;
  AttachMode mode_ = AttachMode::MultiPair;
  std::unique_ptr<Probes> probes_;
  std::unique_ptr<Probes> cost_probes_;  // the measurement's, attached until the end
};

}  // namespace cudatrace
