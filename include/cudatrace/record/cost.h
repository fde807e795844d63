// What tracing cost the traced processes: the probe hits counted in BPF (per
// thread in ct_thread_state, folded per process into "process_cost" when a
// thread exits) times the cost of one hit, measured on this host at start-up.
// Nearly all of it is the uprobe trap, which the traced thread pays whatever
// the BPF program does.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cudatrace/accounting.h"

namespace cudatrace {

class Probes;

// What a hit costs a real program, as a multiple of the start-up
// measurement, which calls a tiny function in a loop: a framework's traced
// thread (Python, PyTorch's dispatcher) loses more around each trap. Fitted
// on the H200 to the two PyTorch workloads whose loss stands above that
// host's noise (-f all: 1.34x for launch-bound inference, 1.74x for GPT-2
// decoding; docs/benchmarks.md, "What the exit line says").
inline constexpr double kWorkloadFactor = 1.5;

// The CPU time these hits added: each kind at its measured price, times
// kWorkloadFactor. `stepped_hits` are among `entry_hits`.
double added_ns(const ProbeCost& c, std::uint64_t entry_hits, std::uint64_t stepped_hits, std::uint64_t return_hits);

// Measures ProbeCost: calls functions of cudatrace itself in batches of 100
// for 6 ms each with no probe, with an entry probe and with both (the
// tracer's own entry and return programs, attached through `probes` with
// `cookie`; detached when `probes` is destroyed), and takes the differences
// of the fastest batches (a lower bound: warm caches, no interruption). The programs take their usual path: user space
// gives this thread a state in the "threads" map (fd) first, and the records
// they write name no API, so the reader ignores them; the caller drains the
// ring and clears the counters afterwards. About 20 ms plus the attaches.
bool measure_probe_cost(Probes& probes, int threads_fd, std::uint64_t cookie, ProbeCost& out, std::string& error);

// Probe hits of one thread or process as BPF counted them.
struct HitCount {
  std::uint32_t pid = 0;
  std::string comm;
  std::uint64_t entry_hits = 0, return_hits = 0;
  std::optional<std::uint64_t> exit_cpu_ns;  // CPU time of the whole process when it exited
  std::uint32_t tid = 0;  // a live thread's; 0: the threads of the process that exited, summed
  std::uint64_t stepped_hits = 0;  // of entry_hits, on single-stepped probes
  std::uint64_t capture_ns = 0;    // BPF time reading Python frames and spans (bpf_abi.h)
  std::uint64_t exit_run_delay_ns = 0;  // run-queue wait of the process's exited threads, over their lives
  std::optional<cpu_set_t> exit_cpus;   // where its last thread could run, when the process exited
};

// The threads' counts summed per process (comm: the first thread's; exit
// CPU time: the last one given).
std::map<std::uint32_t, HitCount> hits_by_process(const std::vector<HitCount>& counts);

// A process's clocks, from /proc: its CPU time, the time its live threads
// have waited on a run queue for a CPU, and the CPUs it may run on.
struct ProcessTimes {
  std::uint64_t cpu_ns = 0;
  std::uint64_t run_delay_ns = 0;
  std::optional<cpu_set_t> cpus;
};
// Those of a live process (nullopt: it is gone).
std::optional<ProcessTimes> process_times(pid_t pid);

// cudatrace's own CPU time since tracing began, and where it may run.
struct TracerCpu {
  std::uint64_t cpu_ns = 0;
  cpu_set_t cpus{};
  int online_cpus = 0;  // of the host
};
// This process's, `cpu_at_start_ns` of its CPU time being before tracing.
TracerCpu tracer_cpu(std::uint64_t cpu_at_start_ns);
// This process's CPU time (all threads), in ns.
std::uint64_t own_cpu_ns();

// What a traced process waited for cudatrace. Where the process is confined
// to fewer CPUs than the host has online (taskset, a container's cpuset; or
// the host has one) and
// cudatrace may run on some of them, the scheduler cannot move either away
// from the other: cudatrace's CPU time there (its share, by CPUs) is time
// the process may have waited for, and its own run-queue wait while traced
// bounds it. Unconfined, cudatrace runs on an idle CPU where there is one,
// and a wait is some other process's doing: nullopt.
std::optional<double> waited_for_tracer(const TracerCpu& tracer, const cpu_set_t& process_cpus,
                                        std::uint64_t run_delay_while_traced_ns);

// Sums hits per process and prices them, with the time their Python frames
// and spans took to read. `at_start` is each process's times when tracing
// began (processes started traced have cpu and run delay 0); `now` reads a
// live process's (nullopt: it is gone); `tracer` prices what a process
// waited for cudatrace's own threads (waited_for_tracer).
CostReport price_hits(const std::vector<HitCount>& counts, const ProbeCost& per_hit,
                      const std::map<std::uint32_t, ProcessTimes>& at_start,
                      const std::function<std::optional<ProcessTimes>(std::uint32_t pid)>& now,
                      const std::optional<TracerCpu>& tracer = std::nullopt);

// Reads the "process_cost" map and the live thread states of "threads".
bool read_hit_counts(int process_cost_fd, int threads_fd, std::vector<HitCount>& out);

// CPU time (user + system) of a live process from /proc/PID/stat, in ns.
std::optional<std::uint64_t> process_cpu_ns(pid_t pid);

}  // namespace cudatrace
