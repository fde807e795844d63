#include "cudatrace/trace/overhead.h"

#include <bpf/bpf.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cudatrace/render/json.h"
#include "cudatrace/trace/budget.h"
#include "cudatrace/trace/probes.h"
#include "cudatrace/record.h"
#include "cudatrace/render/format.h"

// The probed functions of the start-up measurement. They begin like CUDA's
// API functions, with push %rbp: the kernel emulates that instruction at a
// probe, while most others are single-stepped out of line, a second trap
// that would double the measured cost. Assembly, so no compiler changes that.
extern "C" long cudatrace_probe_cost_entry(long x);
extern "C" long cudatrace_probe_cost_pair(long x);
asm(R"(
  .text
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

// Calls `fn` in batches of 100 for `budget_ns` (at least three batches) and
// returns the fastest batch per call, in this thread's CPU time and in
// wall-clock time: the batches no preemption, interrupt or stolen time hit.
CallNs call_ns(long (*fn)(long), std::uint64_t budget_ns) {
  constexpr int kCalls = 100;
  long (*volatile target)(long) = fn;
  CallNs best{1e18, 1e18};
  const std::uint64_t start = clock_ns(CLOCK_MONOTONIC);
  for (int batch = 0; batch < 3 || clock_ns(CLOCK_MONOTONIC) - start < budget_ns; ++batch) {
    long x = 0;
    const std::uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall = clock_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < kCalls; ++i) x = target(x);
    best.cpu = std::min(best.cpu, double(clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu) / kCalls);
    best.wall = std::min(best.wall, double(clock_ns(CLOCK_MONOTONIC) - wall) / kCalls);
  }
  return best;
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
  std::string path, pair_path;
  std::uint64_t entry_offset = 0, pair_offset = 0;
  if (!locate_self(reinterpret_cast<const void*>(&cudatrace_probe_cost_entry), path, entry_offset) ||
      !locate_self(reinterpret_cast<const void*>(&cudatrace_probe_cost_pair), pair_path, pair_offset)) {
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
  constexpr std::uint64_t kBudgetNs = 6000000;  // per setting
  const CallNs bare = call_ns(cudatrace_probe_cost_entry, kBudgetNs);
  // Detaching takes tens of milliseconds: the probes stay until `probes` goes.
  const bool ok = probes.attach_function(path, pid, entry_offset, cookie, false, error) &&
                  probes.attach_function(pair_path, pid, pair_offset, cookie, true, error);
  const CallNs entry = ok ? call_ns(cudatrace_probe_cost_entry, kBudgetNs) : CallNs{};
  const CallNs both = ok ? call_ns(cudatrace_probe_cost_pair, kBudgetNs) : CallNs{};
  bpf_map_delete_elem(threads_fd, &tid);
  if (!ok) return false;
  out.entry_ns = std::max(0.0, entry.cpu - bare.cpu);
  out.return_ns = std::max(0.0, both.cpu - std::max(entry.cpu, bare.cpu));
  out.entry_wall_ns = std::max(0.0, entry.wall - bare.wall);
  out.return_wall_ns = std::max(0.0, both.wall - std::max(entry.wall, bare.wall));
  return true;
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
    if (pc.cpu_ns) h.exit_cpu_ns = pc.cpu_ns;
    out.push_back(std::move(h));
  }
  prev = nullptr;
  ct_thread_state st{};
  while (bpf_map_get_next_key(threads_fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(threads_fd, &key, &st) != 0) continue;
    out.push_back({st.tgid, std::string(st.comm, strnlen(st.comm, sizeof st.comm)), st.entry_hits, st.return_hits, {},
                   key});
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
    if (h.exit_cpu_ns) sum.exit_cpu_ns = h.exit_cpu_ns;
  }
  return by_pid;
}

CostReport price_hits(const std::vector<HitCount>& counts, const ProbeCost& per_hit,
                      const std::map<std::uint32_t, std::uint64_t>& cpu_at_start,
                      const std::function<std::optional<std::uint64_t>(std::uint32_t pid)>& cpu_now) {
  CostReport r{per_hit, {}};
  for (const auto& [pid, h] : hits_by_process(counts)) {
    ProcessCost p;
    p.pid = pid;
    p.comm = h.comm;
    p.entry_hits = h.entry_hits;
    p.return_hits = h.return_hits;
    if (!p.hits()) continue;
    p.added_ns = double(p.entry_hits) * per_hit.entry_ns + double(p.return_hits) * per_hit.return_ns;
    std::optional<std::uint64_t> cpu = h.exit_cpu_ns ? h.exit_cpu_ns : cpu_now(pid);
    if (cpu) {
      const auto start = cpu_at_start.find(pid);
      const std::uint64_t before = start == cpu_at_start.end() ? 0 : start->second;
      p.cpu_ns = *cpu - std::min(*cpu, before);
    }
    r.processes.push_back(std::move(p));
  }
  std::stable_sort(r.processes.begin(), r.processes.end(),
                   [](const ProcessCost& a, const ProcessCost& b) { return a.added_ns > b.added_ns; });
  return r;
}

void append_cost_text(fmt::memory_buffer& out, const CostReport& r) {
  auto it = std::back_inserter(out);
  constexpr std::size_t kShown = 5;
  for (std::size_t i = 0; i < r.processes.size() && i < kShown; ++i) {
    const ProcessCost& p = r.processes[i];
    const double ms = p.added_ns / 1e6;
    fmt::format_to(it, "cudatrace: added \u2248 {:.{}f} ms of CPU time to {} (PID {})", ms, ms < 1 ? 3 : 1,
                   terminal_safe(p.comm), p.pid);
    if (p.cpu_ns && *p.cpu_ns)
      fmt::format_to(it, ", {:.1f} % of its CPU time while traced", 100.0 * p.added_ns / double(*p.cpu_ns));
    fmt::format_to(it, " ({} probe hits)\n", group_digits(p.hits()));
  }
  if (r.processes.size() > kShown) {
    double rest = 0;
    for (std::size_t i = kShown; i < r.processes.size(); ++i) rest += r.processes[i].added_ns;
    fmt::format_to(it, "cudatrace: added \u2248 {:.1f} ms of CPU time to {} more processes\n", rest / 1e6,
                   r.processes.size() - kShown);
  }
  if (r.budget) append_budget_text(out, *r.budget);
  const double cpu = r.per_hit.entry_ns + r.per_hit.return_ns;
  const double wall = r.per_hit.entry_wall_ns + r.per_hit.return_wall_ns;
  if (!r.processes.empty() && wall > 2 * cpu)
    fmt::format_to(it,
                   "cudatrace: here a probed call takes {:.1f} us longer but only {:.1f} us more CPU time (a virtual "
                   "machine?): the slowdown can be up to {:.0f} times the CPU time added\n",
                   wall / 1e3, cpu / 1e3, wall / std::max(cpu, 1.0));
}

void append_cost_json(fmt::memory_buffer& out, const CostReport& r) {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "{{\"entry_ns\":{:.1f},\"return_ns\":{:.1f},\"entry_wall_ns\":{:.1f},\"return_wall_ns\":{:.1f},"
                 "\"processes\":[",
                 r.per_hit.entry_ns, r.per_hit.return_ns, r.per_hit.entry_wall_ns, r.per_hit.return_wall_ns);
  for (std::size_t i = 0; i < r.processes.size(); ++i) {
    const ProcessCost& p = r.processes[i];
    fmt::format_to(it, "{}{{\"pid\":{},\"comm\":", i ? "," : "", p.pid);
    append_json_string(out, p.comm);
    fmt::format_to(it, ",\"entry_hits\":{},\"return_hits\":{},\"added_ns\":{:.0f}", p.entry_hits, p.return_hits,
                   p.added_ns);
    if (p.cpu_ns && *p.cpu_ns)
      fmt::format_to(it, ",\"cpu_ns\":{},\"added_pct\":{:.3f}}}", *p.cpu_ns, 100.0 * p.added_ns / double(*p.cpu_ns));
    else
      out.append(std::string_view(",\"cpu_ns\":null,\"added_pct\":null}"));
  }
  out.push_back(']');
  if (r.budget) {
    out.append(std::string_view(",\"budget\":"));
    append_budget_json(out, *r.budget);
  }
  out.push_back('}');
}

}  // namespace cudatrace
