#include "cudatrace/record/cost.h"

#include <bpf/bpf.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cudatrace/record/budget.h"
#include "cudatrace/record/probes.h"
#include "cudatrace/bpf_abi.h"

// The functions of the start-up measurement: never probed (bare), probed
// at entry, at entry and return (both begin like CUDA's API functions, with
// push %rbp, which the kernel emulates at a probe), and probed at entry on
// an instruction the kernel single-steps out of line (sub), the price of a
// probe that could not be placed on an emulated one (target/prologue.h).
// Assembly, so no compiler changes their first instructions.
extern "C" long cudatrace_probe_cost_bare(long x);
extern "C" long cudatrace_probe_cost_entry(long x);
extern "C" long cudatrace_probe_cost_pair(long x);
extern "C" long cudatrace_probe_cost_stepped(long x);
asm(R"(
  .text
  .globl cudatrace_probe_cost_bare
  .type cudatrace_probe_cost_bare, @function
cudatrace_probe_cost_bare:
  push %rbp
  mov %rsp, %rbp
  lea 3(%rdi), %rax
  pop %rbp
  ret
  .size cudatrace_probe_cost_bare, .-cudatrace_probe_cost_bare
  .globl cudatrace_probe_cost_stepped
  .type cudatrace_probe_cost_stepped, @function
cudatrace_probe_cost_stepped:
  sub $8, %rsp
  lea 4(%rdi), %rax
  add $8, %rsp
  ret
  .size cudatrace_probe_cost_stepped, .-cudatrace_probe_cost_stepped
  .globl cudatrace_probe_cost_entry
  .type cudatrace_probe_cost_entry, @function
cudatrace_probe_cost_entry:
  push %rbp
  mov %rsp, %rbp
  lea 1(%rdi), %rax
  pop %rbp
  ret
  .size cudatrace_probe_cost_entry, .-cudatrace_probe_cost_entry
  .globl cudatrace_probe_cost_pair
  .type cudatrace_probe_cost_pair, @function
cudatrace_probe_cost_pair:
  push %rbp
  mov %rsp, %rbp
  lea 2(%rdi), %rax
  pop %rbp
  ret
  .size cudatrace_probe_cost_pair, .-cudatrace_probe_cost_pair
)");

namespace cudatrace {
namespace {

std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

struct CallNs {
  double cpu, wall;
};

// One batch of `calls` calls of `fn`: the time per call, in this thread's
// CPU time and in wall-clock time.
CallNs batch_ns(long (*fn)(long), int calls) {
  long (*volatile target)(long) = fn;
  long x = 0;
  const std::uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall = clock_ns(CLOCK_MONOTONIC);
  for (int i = 0; i < calls; ++i) x = target(x);
  return {double(clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu) / calls, double(clock_ns(CLOCK_MONOTONIC) - wall) / calls};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The file and file offset of a function of this process, from /proc/self/maps.
bool locate_self(const void* fn, std::string& path, std::uint64_t& offset) {
  const auto addr = reinterpret_cast<std::uint64_t>(fn);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, file_off, dev, inode;
    in >> range >> perms >> file_off >> dev >> inode;
    const auto dash = range.find('-');
    if (dash == std::string::npos || perms.size() < 3 || perms[2] != 'x') continue;
    const std::uint64_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    const std::uint64_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr < start || addr >= end) continue;
    std::getline(in >> std::ws, path);
    offset = addr - start + std::stoull(file_off, nullptr, 16);
    return !path.empty() && path[0] == '/';
  }
  return false;
}

}  // namespace

bool measure_probe_cost(Probes& probes, int threads_fd, std::uint64_t cookie, ProbeCost& out, std::string& error) {
  std::string path, pair_path, stepped_path;
  std::uint64_t entry_offset = 0, pair_offset = 0, stepped_offset = 0;
  if (!locate_self(reinterpret_cast<const void*>(&cudatrace_probe_cost_entry), path, entry_offset) ||
      !locate_self(reinterpret_cast<const void*>(&cudatrace_probe_cost_pair), pair_path, pair_offset) ||
      !locate_self(reinterpret_cast<const void*>(&cudatrace_probe_cost_stepped), stepped_path, stepped_offset)) {
    error = "cannot find cudatrace's own code in /proc/self/maps";
    return false;
  }
  const pid_t pid = getpid();
  const auto tid = static_cast<__u32>(syscall(SYS_gettid));
  ct_thread_state st{};
  st.tgid = static_cast<__u32>(pid);
  std::strncpy(st.comm, "cudatrace", sizeof st.comm - 1);
  if (bpf_map_update_elem(threads_fd, &tid, &st, BPF_ANY) != 0) {
    error = std::string("cannot add a thread state: ") + std::strerror(errno);
    return false;
  }
  // Detaching takes tens of milliseconds: the probes stay until `probes` goes.
  const bool ok = probes.attach_function(path, pid, entry_offset, cookie, false, error) &&
                  probes.attach_function(pair_path, pid, pair_offset, cookie, true, error) &&
                  probes.attach_function(stepped_path, pid, stepped_offset, cookie | CT_COOKIE_STEPPED, false, error);
  if (!ok) {
    bpf_map_delete_elem(threads_fd, &tid);
    return false;
  }
  // Interleaved rounds, so that a change of the host's speed meets every
  // setting alike; the median of each round's difference (a loaded host's
  // preemptions make single batches useless: the fastest of them once gave
  // an entry cost of 0).
  constexpr std::uint64_t kBudgetNs = 30000000;
  constexpr int kCalls = 100, kSteppedCalls = 20, kMinRounds = 9;
  std::vector<double> entry_cpu, ret_cpu, stepped_cpu, entry_wall, ret_wall, stepped_wall;
  const std::uint64_t start = clock_ns(CLOCK_MONOTONIC);
  for (int round = 0; round < kMinRounds || clock_ns(CLOCK_MONOTONIC) - start < kBudgetNs; ++round) {
    const CallNs bare = batch_ns(cudatrace_probe_cost_bare, kCalls);
    const CallNs entry = batch_ns(cudatrace_probe_cost_entry, kCalls);
    const CallNs both = batch_ns(cudatrace_probe_cost_pair, kCalls);
    const CallNs stepped = batch_ns(cudatrace_probe_cost_stepped, kSteppedCalls);
    entry_cpu.push_back(entry.cpu - bare.cpu);
    ret_cpu.push_back(both.cpu - entry.cpu);
    stepped_cpu.push_back(stepped.cpu - bare.cpu);
    entry_wall.push_back(entry.wall - bare.wall);
    ret_wall.push_back(both.wall - entry.wall);
    stepped_wall.push_back(stepped.wall - bare.wall);
  }
  // The oracle: every call of a probed function was a hit. Fewer, and the
  // differences measured something else (a probe that did not fire).
  ct_thread_state after{};
  const bool read = bpf_map_lookup_elem(threads_fd, &tid, &after) == 0;
  bpf_map_delete_elem(threads_fd, &tid);
  const std::uint64_t rounds = entry_cpu.size();
  const std::uint64_t entries = rounds * (2 * kCalls + kSteppedCalls), returns = rounds * kCalls;
  if (!read || after.entry_hits != entries || after.return_hits != returns) {
    error = "the probes on cudatrace's own functions fired " + std::to_string(after.entry_hits) + " times at entry and " +
            std::to_string(after.return_hits) + " at return, not " + std::to_string(entries) + " and " +
            std::to_string(returns);
    return false;
  }
  out.entry_ns = std::max(0.0, median(entry_cpu));
  out.return_ns = std::max(0.0, median(ret_cpu));
  out.stepped_ns = std::max(out.entry_ns, median(stepped_cpu));
  out.entry_wall_ns = std::max(0.0, median(entry_wall));
  out.return_wall_ns = std::max(0.0, median(ret_wall));
  out.stepped_wall_ns = std::max(out.entry_wall_ns, median(stepped_wall));
  if (out.entry_ns <= 0) {
    error = "the measured cost of a probe hit was not positive (a host too busy to measure on?)";
    return false;
  }
  return true;
}

double added_ns(const ProbeCost& c, std::uint64_t entry_hits, std::uint64_t stepped_hits, std::uint64_t return_hits) {
  const std::uint64_t stepped = std::min(stepped_hits, entry_hits);
  return kWorkloadFactor * (double(entry_hits - stepped) * c.entry_ns + double(stepped) * c.stepped_ns +
                            double(return_hits) * c.return_ns);
}

std::optional<std::uint64_t> process_cpu_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // Fields after the command name, which may hold spaces and parentheses.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0) return std::nullopt;
  return (utime + stime) * (1000000000ull / static_cast<std::uint64_t>(ticks));
}

bool read_hit_counts(int process_cost_fd, int threads_fd, std::vector<HitCount>& out) {
  out.clear();
  __u32 key = 0, next = 0;
  __u32* prev = nullptr;
  ct_process_cost pc{};
  while (bpf_map_get_next_key(process_cost_fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(process_cost_fd, &key, &pc) != 0) continue;
    HitCount h{key, std::string(pc.comm, strnlen(pc.comm, sizeof pc.comm)), pc.entry_hits, pc.return_hits, {}};
    h.stepped_hits = pc.stepped_hits;
    h.capture_ns = pc.capture_ns;
    h.exit_run_delay_ns = pc.run_delay_ns;
    if (pc.cpu_ns) {
      h.exit_cpu_ns = pc.cpu_ns;
      cpu_set_t cpus;
      CPU_ZERO(&cpus);
      for (int cpu = 0; cpu < CT_COST_CPU_WORDS * 64; ++cpu)
        if (pc.cpus[cpu / 64] >> (cpu % 64) & 1) CPU_SET(cpu, &cpus);
      if (CPU_COUNT(&cpus)) h.exit_cpus = cpus;
    }
    out.push_back(std::move(h));
  }
  prev = nullptr;
  ct_thread_state st{};
  while (bpf_map_get_next_key(threads_fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(threads_fd, &key, &st) != 0) continue;
    out.push_back({st.tgid, std::string(st.comm, strnlen(st.comm, sizeof st.comm)), st.entry_hits, st.return_hits, {},
                   key, st.stepped_hits, st.capture_ns});
  }
  return true;
}

std::map<std::uint32_t, HitCount> hits_by_process(const std::vector<HitCount>& counts) {
  std::map<std::uint32_t, HitCount> by_pid;
  for (const HitCount& h : counts) {
    HitCount& sum = by_pid[h.pid];
    sum.pid = h.pid;
    if (sum.comm.empty()) sum.comm = h.comm;
    sum.entry_hits += h.entry_hits;
    sum.return_hits += h.return_hits;
    sum.stepped_hits += h.stepped_hits;
    sum.capture_ns += h.capture_ns;
    sum.exit_run_delay_ns += h.exit_run_delay_ns;
    if (h.exit_cpu_ns) sum.exit_cpu_ns = h.exit_cpu_ns;
    if (h.exit_cpus) sum.exit_cpus = h.exit_cpus;
  }
  return by_pid;
}

std::optional<ProcessTimes> process_times(pid_t pid) {
  const std::optional<std::uint64_t> cpu = process_cpu_ns(pid);
  if (!cpu) return std::nullopt;
  ProcessTimes t;
  t.cpu_ns = *cpu;
  // /proc/PID/task/TID/schedstat: "on-CPU ns, run-queue wait ns, slices".
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    std::uint64_t on_cpu = 0, waited = 0;
    if (in >> on_cpu >> waited) t.run_delay_ns += waited;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(pid, sizeof cpus, &cpus) == 0) t.cpus = cpus;
  return t;
}

std::uint64_t own_cpu_ns() { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

TracerCpu tracer_cpu(std::uint64_t cpu_at_start_ns) {
  TracerCpu t;
  const std::uint64_t cpu = own_cpu_ns();
  t.cpu_ns = cpu - std::min(cpu, cpu_at_start_ns);
  CPU_ZERO(&t.cpus);
  if (sched_getaffinity(0, sizeof t.cpus, &t.cpus) != 0) CPU_ZERO(&t.cpus);
  t.online_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return t;
}

std::optional<double> waited_for_tracer(const TracerCpu& tracer, const cpu_set_t& process_cpus,
                                        std::uint64_t run_delay_while_traced_ns) {
  const int tracer_allowed = CPU_COUNT(&tracer.cpus);
  cpu_set_t shared;
  CPU_AND(&shared, &process_cpus, &tracer.cpus);
  const int n_shared = CPU_COUNT(&shared);
  const bool confined = CPU_COUNT(&process_cpus) < tracer.online_cpus || tracer.online_cpus == 1;
  if (n_shared == 0 || tracer_allowed == 0 || !confined) return std::nullopt;
  const double tracer_there = double(tracer.cpu_ns) * n_shared / tracer_allowed;
  return std::min(tracer_there, double(run_delay_while_traced_ns));
}

CostReport price_hits(const std::vector<HitCount>& counts, const ProbeCost& per_hit,
                      const std::map<std::uint32_t, ProcessTimes>& at_start,
                      const std::function<std::optional<ProcessTimes>(std::uint32_t pid)>& now,
                      const std::optional<TracerCpu>& tracer) {
  CostReport r;
  r.per_hit = per_hit;
  r.workload_factor = kWorkloadFactor;
  for (const auto& [pid, h] : hits_by_process(counts)) {
    ProcessCost p;
    p.pid = pid;
    p.comm = h.comm;
    p.entry_hits = h.entry_hits;
    p.return_hits = h.return_hits;
    p.stepped_hits = std::min(h.stepped_hits, h.entry_hits);
    if (!p.hits()) continue;
    // The reads were timed in the thread itself: they are its CPU time as
    // they are, with no workload factor.
    p.added_ns = added_ns(per_hit, p.entry_hits, p.stepped_hits, p.return_hits) + double(h.capture_ns);
    const auto start = at_start.find(pid);
    const ProcessTimes before = start == at_start.end() ? ProcessTimes{} : start->second;
    const std::optional<ProcessTimes> live = h.exit_cpu_ns ? std::nullopt : now(pid);
    std::optional<std::uint64_t> cpu = h.exit_cpu_ns;
    if (live) cpu = live->cpu_ns;
    if (cpu) {
      p.cpu_ns = *cpu - std::min(*cpu, before.cpu_ns);
      // The traps run on the process's own threads, so what they added is
      // part of its CPU time: the workload factor must not price a loop that
      // is little but probe hits above everything the process spent.
      p.added_ns = std::min(p.added_ns, double(*p.cpu_ns));
    }
    const std::optional<cpu_set_t>& cpus = live && live->cpus ? live->cpus : h.exit_cpus ? h.exit_cpus : before.cpus;
    if (tracer && cpus) {
      const std::uint64_t delay = h.exit_run_delay_ns + (live ? live->run_delay_ns : 0);
      p.waited_ns = waited_for_tracer(*tracer, *cpus, delay - std::min(delay, before.run_delay_ns));
    }
    r.processes.push_back(std::move(p));
  }
  std::stable_sort(r.processes.begin(), r.processes.end(),
                   [](const ProcessCost& a, const ProcessCost& b) { return a.added_ns > b.added_ns; });
  return r;
}

}  // namespace cudatrace
