#include "cudatrace/trace/tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cudatrace.skel.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/target/elf_file.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/render/output.h"
#include "cudatrace/trace/overhead.h"
#include "cudatrace/render/output_writer.h"
#include "cudatrace/render/perfetto.h"
#include "cudatrace/target/process.h"
#include "cudatrace/render/report.h"
#include "cudatrace/trace/ring_reader.h"
#include "cudatrace/target/stacks.h"
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/target/symbolizer.h"
#include "cudatrace/trace/watchdog.h"

namespace cudatrace {
namespace {

static_assert(sizeof(ct_call) == 176, "ct_call layout changed: check bpf/ and include/cudatrace/record.h agree");

volatile sig_atomic_t g_stop = 0;  // the signal that asked us to stop
void on_signal(int sig) { g_stop = sig; }

// At exit, how long the output may make no progress (its consumer reads
// nothing) before cudatrace stops waiting for it.
constexpr std::chrono::seconds kOutputStall{5};

bool g_verbose = false;
int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG || !g_verbose) return 0;
  return std::vfprintf(stderr, fmt, args);
}

void error_line(const std::string& msg) { std::fprintf(stderr, "cudatrace: %s\n", msg.c_str()); }
void warn_line(const std::string& msg) { std::fprintf(stderr, "cudatrace: warning: %s\n", msg.c_str()); }

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// CAP_BPF (39) and CAP_PERFMON (38) in the effective set, or root.
bool has_bpf_privileges() {
  if (geteuid() == 0) return true;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
    return (caps >> 39 & 1) && (caps >> 38 & 1);
  }
  return false;
}

bool is_loader(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("ld-linux", 0) == 0 || base.rfind("ld-musl", 0) == 0 || base.rfind("ld.so", 0) == 0;
}

// NVTX loads an injection only if this was in the process's initial environment.
bool started_with_nvtx_injection(pid_t pid) {
  std::ifstream environ("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  while (std::getline(environ, entry, '\0'))
    if (entry.rfind("NVTX_INJECTION64_PATH=", 0) == 0 && entry.size() > 22) return true;
  return false;
}

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// The API id of the start-up measurement's probe: no table row, so its
// records are ignored.
constexpr std::uint16_t kProbeCostApi = 0xfffe;
static_assert(CT_MAX_APIS < kProbeCostApi, "the probe-cost API id must not be a table row");

class Session {
 public:
  explicit Session(const Options& opts) : opts_(opts) {}
  ~Session() {
    writer_.reset();  // stop writing before the output is closed
    probes_.reset();  // detach before the programs go away
    cost_probes_.reset();
    for (bpf_link* l : tp_links_) bpf_link__destroy(l);
    cudatrace_bpf__destroy(skel_);
    if (release_fd_ >= 0) close(release_fd_);
    if (target_fd_ >= 0) close(target_fd_);
    if (out_fd_ > 2) close(out_fd_);
  }

  int run();

 private:
  int open_output();
  int load();
  int attach_libs(pid_t pid);
  int attach_pid_target();
  void decide_dlopen_stop();
  void start_stop_watchdog();
  int start_command();
  void attach_mappings(pid_t pid);
  bool target_gone();
  void drain_loop();
  void report_open_calls();
  void finish();
  bool flush();
  void hand_over_output();
  bool output_ok();
  void count_unwritten(const RecordCount& n);

  static bool on_record(void* ctx, const void* data, std::size_t size);
  void on_call(const ct_call& rec);
  void on_nvtx(Call& c);
  void warn_pageable_copy(std::uint64_t host_ptr);
  void on_map_change(const ct_map_change& m);
  void forget_exited();
  void summary_report(bool final);
  void measure_cost();
  void clear_counters();
  std::vector<__u64> read_counters();
  CostReport cost_so_far();
  void read_activity(std::uint64_t below_gen);

  const Options& opts_;
  int out_fd_ = STDOUT_FILENO;
  std::unique_ptr<Output> out_;
  std::unique_ptr<OutputWriter> writer_;
  Chunk chunk_;  // where the records in out_'s buffer end; its bytes while handed over
  cudatrace_bpf* skel_ = nullptr;
  std::unique_ptr<RingReader> ring_;
  std::unique_ptr<Probes> probes_;
  std::vector<bpf_link*> tp_links_;
  KernelNames names_;
  Symbolizer symbolizer_;
  StreamTracker streams_;
  NcclTracker nccl_;
  StackSymbolizer stacks_{symbolizer_};
  std::unique_ptr<Reporter> reporter_;  // summary mode
  std::uint64_t next_report_ns_ = 0;    // with -i
  unsigned reports_ = 0;
  bool count_reached_ = false;          // -c reports made: stop tracing, leave the command running
  std::unique_ptr<PerfettoWriter> perfetto_;
  std::unique_ptr<NvtxInjection> nvtx_library_;  // --nvtx in command mode
  std::unique_ptr<NvtxTracker> nvtx_;            // --nvtx
  std::unique_ptr<RangeSummary> by_range_;       // --by-range
  StringReader read_string_;
  ActivityReader activity_;                 // summary mode: launches and copies counted in BPF
  bool activity_in_bpf_ = false;
  std::uint64_t page_locked_changes_ = 0;   // calls that bumped the BPF page-locked generation
  std::uint64_t records_ = 0;               // call records of traced APIs read (-v says how many)
  ProbeCost probe_cost_;
  bool cost_measured_ = false;
  std::unique_ptr<Probes> cost_probes_;  // the measurement's, attached until the end
  std::map<std::uint32_t, std::uint64_t> cpu_at_start_;  // -p: the target's CPU time when tracing began
  Call call_;
  EndStats stats_;
  std::uint64_t start_ns_ = 0;
  pid_t child_ = -1;
  int child_status_ = 0;
  bool child_reaped_ = false;
  int release_fd_ = -1;  // the command waits for a byte on this pipe before exec
  int target_fd_ = -1;   // pidfd of the -p target
  bool output_failed_ = false;  // writing the output failed (said on stderr)
  bool output_closed_ = false;  // the output's reader went away (| head): end quietly
  bool stop_at_loads_ = true;      // the loader probe stops processes (--dlopen-stop)
  bool loader_probed_ = false;     // a dynamic loader's _dl_debug_state is probed
  bool waiting_for_cuda_ = false;  // -p target without a CUDA library yet
  std::set<std::tuple<pid_t, std::uint64_t, std::uint64_t>> seen_mappings_;  // pid, inode, start
  std::vector<pid_t> exited_;  // found gone at the last look; forgotten at the next
  std::vector<std::pair<std::uint32_t, std::uint32_t>> exited_threads_;  // pid, tid: the same
  std::uint64_t next_exit_check_ns_ = 0;
};

// The directory holding `path` when anyone may write there (/tmp): another
// user could have planted a symbolic link under the name. Empty otherwise.
std::string world_writable_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH) ? dir : std::string();
}

// Root tracing another user's process: that user's trace is for root only.
bool trace_is_private(pid_t pid) {
  if (geteuid() != 0 || pid <= 0) return false;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream ids(line.substr(4));
    unsigned long uid = 0;
    while (ids >> uid)
      if (uid != 0) return true;
    return false;
  }
  return true;  // unknown owner: assume another user
}

// The fields of /proc/PID/stat that say where a process sits in job control.
struct JobControl {
  pid_t ppid = 0, pgrp = 0, session = 0;
  int tty = 0;  // controlling terminal (0: none)
};

bool read_job_control(pid_t pid, JobControl& jc) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  const auto paren = text.rfind(')');  // the command name may hold anything
  if (paren == std::string::npos) return false;
  std::istringstream fields(text.substr(paren + 1));
  char state = 0;
  return static_cast<bool>(fields >> state >> jc.ppid >> jc.pgrp >> jc.session >> jc.tty);
}

// A job of a job-control shell: its own process group, on the terminal of
// its parent. The shell waits for it with WUNTRACED, so a SIGSTOP makes it
// report the job "Stopped" and take the terminal back; after the SIGCONT the
// job runs on in the background.
bool is_shell_job(pid_t pid) {
  JobControl self, parent;
  if (!read_job_control(pid, self) || self.tty == 0 || !read_job_control(self.ppid, parent)) return false;
  return parent.tty == self.tty && parent.session == self.session && parent.pgrp != self.pgrp;
}

int Session::open_output() {
  if (opts_.output_path.empty()) return kExitOk;
  const std::string& path = opts_.output_path;
  const std::string shared_dir = opts_.output_follow_symlinks ? std::string() : world_writable_dir(path);
  const bool private_trace = trace_is_private(opts_.pid);
  out_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (shared_dir.empty() ? 0 : O_NOFOLLOW),
                   private_trace ? 0600 : 0644);
  if (out_fd_ < 0) {
    if (errno == ELOOP && !shared_dir.empty())
      error_line("refusing to write " + path + ": it is a symbolic link in the world-writable directory " + shared_dir +
                 " (--output-follow-symlinks allows it)");
    else
      error_line("cannot write " + path + ": " + std::strerror(errno));
    return kExitOutput;
  }
  // An existing file keeps its mode when truncated: make it private too.
  struct stat st {};
  if (private_trace && fstat(out_fd_, &st) == 0 && S_ISREG(st.st_mode)) fchmod(out_fd_, 0600);
  return kExitOk;
}

int Session::load() {
  if (!has_bpf_privileges()) {
    error_line("needs root: run with sudo, or grant CAP_BPF and CAP_PERFMON");
    return kExitPermission;
  }
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    error_line("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing); cudatrace needs CONFIG_DEBUG_INFO_BTF=y");
    return kExitKernel;
  }
  g_verbose = opts_.verbose;
  libbpf_set_print(libbpf_log);
  skel_ = cudatrace_bpf__open();
  if (!skel_) {
    error_line(std::string("cannot open the BPF object: ") + std::strerror(errno));
    return kExitKernel;
  }
  auto* ro = skel_->rodata;
  ro->filter_tgid = opts_.pid > 0 ? static_cast<__u32>(opts_.pid) : 0;
  ro->use_tgid_set = opts_.pid <= 0;
  ro->follow_forks = opts_.pid <= 0;
  ro->filter_tid = static_cast<__u32>(opts_.tid);
  ro->min_dur_ns = opts_.min_us * 1000;
  ro->errors_only = opts_.errors_only;
  ro->stop_on_map_change = stop_at_loads_;
  ro->summary_mode = opts_.summary;
  ro->summary_records_all = opts_.by_range;
  ro->capture_stack = opts_.stack;
  // CUDATRACE_NO_UPROBE_SESSIONS=1 forces pairs, as on kernels before 6.13
  // (tests and benchmarks compare the two; docs/benchmarks.md).
  const char* no_sessions = std::getenv("CUDATRACE_NO_UPROBE_SESSIONS");
  const AttachMode mode = no_sessions && std::strcmp(no_sessions, "0") != 0 ? AttachMode::MultiPair
                                                                             : Probes::detect_mode();
  ro->skip_nested_returns = mode == AttachMode::MultiSession && !opts_.nested_returns;
  // A timeline needs every call's record.
  activity_in_bpf_ = opts_.summary && opts_.perfetto_path.empty() && !opts_.by_range;
  ro->activity_in_bpf = activity_in_bpf_;
  bpf_map__set_max_entries(skel_->maps.api_stats, static_cast<__u32>(apis().size()));
  bpf_map__set_max_entries(skel_->maps.activity_apis, static_cast<__u32>(apis().size()));
  const std::uint64_t ring_bytes = std::uint64_t(opts_.ring_mb) << 20;
  // Each CPU wakes the reader every wakeup_every records, so at most an
  // eighth of the ring waits unannounced; otherwise the reader polls.
  const int cpus = std::max(1, libbpf_num_possible_cpus());
  ro->wakeup_every =
      static_cast<__u32>(std::clamp<std::uint64_t>(ring_bytes / 8 / (cpus * sizeof(ct_call)), 16, 4096));
  bpf_map__set_max_entries(skel_->maps.events, static_cast<__u32>(ring_bytes));
  for (bpf_program* p : {skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change}) Probes::prepare(p);
  // The session program only where the kernel has sessions. ct_enter/ct_exit
  // are loaded in every mode: measure_cost() probes cudatrace's own functions
  // with them (an entry-only and a paired probe).
  if (mode == AttachMode::MultiSession) {
    Probes::prepare_session(skel_->progs.ct_session);
  } else {
    bpf_program__set_autoload(skel_->progs.ct_session, false);
  }
  if (int err = cudatrace_bpf__load(skel_)) {
    if (err == -EPERM || err == -EACCES)
      error_line("permission denied loading BPF programs: run as root, or grant CAP_BPF and CAP_PERFMON");
    else
      error_line(std::string("cannot load the BPF programs: ") + std::strerror(-err) + " (run with -v for details)");
    return err == -EPERM || err == -EACCES ? kExitPermission : kExitKernel;
  }
  for (const Api& a : apis()) {
    const __u32 id = a.id;
    const ct_activity_api meta = activity_api(a);
    if (bpf_map__update_elem(skel_->maps.activity_apis, &id, sizeof id, &meta, sizeof meta, BPF_ANY) != 0) {
      error_line(std::string("cannot fill the activity table: ") + std::strerror(errno));
      return kExitKernel;
    }
  }
  for (bpf_program* p : {skel_->progs.ct_fork, skel_->progs.ct_exec, skel_->progs.ct_thread_exit}) {
    bpf_link* l = bpf_program__attach(p);
    if (!l) {
      error_line(std::string("cannot attach ") + bpf_program__name(p) + ": " + std::strerror(errno));
      return kExitKernel;
    }
    tp_links_.push_back(l);
  }
  std::string ring_error;
  ring_ = RingReader::open(bpf_map__fd(skel_->maps.events), on_record, this, ring_error);
  if (!ring_) {
    error_line("cannot open the ring buffer: " + ring_error);
    return kExitKernel;
  }
  measure_cost();
  probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                     opts_.selection, warn_line);
  if (mode == AttachMode::MultiSession) probes_->use_session(skel_->progs.ct_session);
  return kExitOk;
}

// Measures what one probe hit costs here (overhead.h), before anything is
// traced: the ring then holds only the measurement's records, which name no
// API, and the counters only what it caused.
void Session::measure_cost() {
  const Api* launch = api_by_symbol("cudaLaunchKernel");
  const std::uint64_t cookie = (launch->cookie & ~std::uint64_t(0xffff)) | kProbeCostApi;
  std::string error;
  const std::uint64_t start_ns = monotonic_ns();
  cost_probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                         Selection{}, warn_line);
  cost_measured_ = measure_probe_cost(*cost_probes_, bpf_map__fd(skel_->maps.threads), cookie, probe_cost_, error);
  ring_->drain();
  clear_counters();
  if (!cost_measured_)
    warn_line("cannot measure what a probe costs (" + error + "); the tracing cost will not be reported");
  else if (opts_.verbose)
    std::fprintf(stderr,
                 "cudatrace: a probe hit costs %.2f us of CPU time at entry, %.2f us at return (wall-clock: %.2f and "
                 "%.2f us; measured in %.1f ms)\n",
                 probe_cost_.entry_ns / 1e3, probe_cost_.return_ns / 1e3, probe_cost_.entry_wall_ns / 1e3,
                 probe_cost_.return_wall_ns / 1e3, double(monotonic_ns() - start_ns) / 1e6);
}

std::vector<__u64> Session::read_counters() {
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<__u64> per_cpu(ncpu > 0 ? ncpu : 1), totals(CT_CNT_NR);
  for (__u32 i = 0; i < CT_CNT_NR; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (__u64 v : per_cpu) totals[i] += v;
  }
  return totals;
}

void Session::clear_counters() {
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  const std::vector<__u64> zeroes(ncpu > 0 ? ncpu : 1);
  for (__u32 i = 0; i < CT_CNT_NR; ++i) bpf_map_update_elem(fd, &i, zeroes.data(), BPF_ANY);
}

CostReport Session::cost_so_far() {
  std::vector<HitCount> counts;
  read_hit_counts(bpf_map__fd(skel_->maps.process_cost), bpf_map__fd(skel_->maps.threads), counts);
  return price_hits(counts, probe_cost_, cpu_at_start_, [](std::uint32_t pid) { return process_cpu_ns(pid); });
}

// Passes what BPF counted in the activity map to the reporter, as calls
// rebuilt from the keys (summary.h: activity_record).
void Session::read_activity(std::uint64_t below_gen) {
  if (!activity_in_bpf_) return;
  auto add = [&](const ct_activity_key& key, const ct_activity& n) {
    ActivityRecord rec;
    activity_record(key, n, rec);
    if (!decode_call(rec.call(), &names_, call_, &read_string_) || !opts_.display.wants(*call_.api)) return;
    reporter_->on_activity(call_, n);
  };
  const bool ok = activity_.read(bpf_map__fd(skel_->maps.activity), below_gen, add);
  if (!ok) warn_line(std::string("cannot read the activity map: ") + std::strerror(errno));
}

// Attaches to every CUDA-bearing file `pid` maps that was not seen before,
// and to its dynamic loader. In -p mode probes are bound to that process;
// in command mode they cover every process (the BPF side filters by tgid).
void Session::attach_mappings(pid_t pid) {
  std::vector<Mapping> maps;
  if (!read_maps(pid, maps)) return;
  symbolizer_.capture(pid, maps);
  const pid_t probe_pid = opts_.pid > 0 ? pid : -1;
  for (const Mapping& m : maps) {
    if (!m.exec || m.path.empty()) continue;
    if (!seen_mappings_.emplace(pid, m.inode, m.start).second) continue;
    const std::string path = host_path(pid, m);
    std::string error;
    if (is_loader(m.path)) {
      if (probes_->attach_loader(path, probe_pid, error))
        loader_probed_ = true;
      else
        warn_line(error);
      continue;
    }
    Probes::FileResult r;
    if (!probes_->attach_file(path, probe_pid, r, error)) {
      if (opts_.verbose) warn_line(error);
      continue;
    }
    if (r.apis && opts_.verbose)
      std::fprintf(stderr, "cudatrace: pid %d: %s: %d APIs\n", pid, m.path.c_str(), r.apis);
  }
}

int Session::attach_libs(pid_t pid) {
  for (const std::string& lib : opts_.libs) {
    Probes::FileResult r;
    std::string error;
    if (!probes_->attach_file(lib, pid, r, error)) {
      error_line(error);
      return kExitTarget;
    }
    if (r.apis == 0) {
      error_line(lib + ": no traced CUDA API symbol in it (a stripped program has no symbol table left to find them in)");
      return kExitTarget;
    }
  }
  return kExitOk;
}

int Session::attach_pid_target() {
  if (!process_exists(opts_.pid)) {
    error_line("no such process: " + std::to_string(opts_.pid));
    return kExitTarget;
  }
  target_fd_ = pidfd_open(opts_.pid);
  if (const auto cpu = process_cpu_ns(opts_.pid)) cpu_at_start_[static_cast<std::uint32_t>(opts_.pid)] = *cpu;
  if (opts_.nvtx && !started_with_nvtx_injection(opts_.pid))
    warn_line("process " + std::to_string(opts_.pid) +
              " was started without NVTX_INJECTION64_PATH: its NVTX calls do nothing and no range will be seen "
              "(docs/nvtx.md, -p mode)");
  if (int rc = attach_libs(opts_.pid)) return rc;
  attach_mappings(opts_.pid);
  const std::size_t api_probes = probes_->probe_count() - (loader_probed_ ? 1 : 0);
  if (api_probes == 0 && opts_.libs.empty() && loader_probed_) {
    // Like a command that dlopens its CUDA library later: the loader probe
    // reports the load, and probes are attached then.
    waiting_for_cuda_ = true;
    return kExitOk;
  }
  if (api_probes == 0 && opts_.libs.empty()) {
    // Nothing to probe, and no dynamic loader that could map it later.
    std::vector<Mapping> maps;
    read_maps(opts_.pid, maps);
    std::set<std::string> files;
    for (const Mapping& m : maps)
      if (m.exec && !m.path.empty()) files.insert(m.path);
    std::string examples;
    int n = 0;
    for (const std::string& f : files)
      if (n++ < 3) examples += (examples.empty() ? "" : ", ") + f;
    error_line("no CUDA runtime or driver API found in process " + std::to_string(opts_.pid) + ": looked in the " +
               std::to_string(files.size()) + " executable files it maps (" + examples + (n > 3 ? ", ..." : "") +
               ") via /proc/" + std::to_string(opts_.pid) +
               "/maps, and it has no dynamic loader to load one later; name the library with --lib PATH");
    return kExitTarget;
  }
  return kExitOk;
}

int Session::start_command() {
  const std::string exe = find_in_path(opts_.command[0]);
  if (exe.empty()) {
    error_line("command not found: " + opts_.command[0]);
    return kExitTarget;
  }
  if (is_foreign_elf(exe)) {
    error_line("cannot run " + exe + ": not an x86-64 program");
    return kExitTarget;
  }
  if (opts_.nvtx) {
    std::string error;
    nvtx_library_ = NvtxInjection::create(error);
    if (!nvtx_library_) {
      error_line(error);
      return kExitTarget;
    }
    if (const char* other = std::getenv("NVTX_INJECTION64_PATH"))
      warn_line(std::string("--nvtx replaces NVTX_INJECTION64_PATH=") + other + " for the command");
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    error_line(std::string("pipe: ") + std::strerror(errno));
    return kExitTarget;
  }
  child_ = fork();
  if (child_ < 0) {
    error_line(std::string("fork: ") + std::strerror(errno));
    return kExitTarget;
  }
  if (child_ == 0) {
    close(pipefd[1]);
    // A trace on standard output stays the trace alone (a JSON stream for
    // jq, say): the command's own standard output goes to cudatrace's
    // standard error, as strace and ltrace keep theirs apart.
    if (opts_.output_path.empty() && dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      const int null_fd = open("/dev/null", O_WRONLY);
      if (null_fd >= 0) dup2(null_fd, STDOUT_FILENO);
    }
    char go = 0;
    // EOF instead of a byte: the tracer gave up; do not run untraced.
    if (read(pipefd[0], &go, 1) != 1) _exit(127);
    std::vector<char*> argv;
    for (const std::string& a : opts_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // --nvtx: the command's NVTX loads our injection library; nothing else in its environment changes.
    if (nvtx_library_) setenv("NVTX_INJECTION64_PATH", nvtx_library_->path().c_str(), 1);
    execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "cudatrace: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(pipefd[0]);
  release_fd_ = pipefd[1];

  const __u32 tgid = static_cast<__u32>(child_);
  const __u8 one = 1;
  if (bpf_map__update_elem(skel_->maps.traced_tgids, &tgid, sizeof tgid, &one, sizeof one, BPF_ANY) != 0) {
    error_line(std::string("cannot register the command's pid: ") + std::strerror(errno));
    return kExitKernel;
  }
  if (int rc = attach_libs(-1)) return rc;
  std::string error;
  Probes::FileResult r;
  // Before the command runs: its first range is traced even with --no-dlopen-stop.
  if (nvtx_library_ && !probes_->attach_file(nvtx_library_->path(), -1, r, error)) {
    error_line(error);
    return kExitKernel;
  }
  if (!probes_->attach_file(exe, -1, r, error)) {
    // A script or an unreadable binary: its interpreter's loader still tells us about libraries.
    if (opts_.verbose) warn_line(error);
  }
  const std::string interp = program_interpreter(exe);
  if (!interp.empty() && !probes_->attach_loader(interp, -1, error))
    warn_line(error + " (libraries loaded by " + exe + " will be missed)");
  return kExitOk;
}

bool Session::target_gone() {
  if (child_ > 0) {
    if (child_reaped_) return true;
    int status = 0;
    const pid_t r = waitpid(child_, &status, WNOHANG);
    if (r == child_) {
      child_status_ = status;
      child_reaped_ = true;
      return true;
    }
    return r < 0 && errno == ECHILD;
  }
  if (target_fd_ >= 0) {
    pollfd p{target_fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return !process_exists(opts_.pid);
}

void Session::decide_dlopen_stop() {
  using Mode = Options::DlopenStop;
  stop_at_loads_ = opts_.dlopen_stop == Mode::Always ||
                   (opts_.dlopen_stop == Mode::Auto && !(opts_.pid > 0 && is_shell_job(opts_.pid)));
  if (opts_.dlopen_stop == Mode::Auto && !stop_at_loads_)
    warn_line("process " + std::to_string(opts_.pid) +
              " is a job of an interactive shell, which would report it Stopped: not pausing it at library loads, "
              "so its first calls into a library it loads from now on can be missed (--dlopen-stop=always pauses it)");
}

void Session::start_stop_watchdog() {
  if (stop_at_loads_ && start_watchdog(bpf_map__fd(skel_->maps.events)) < 0)
    warn_line(std::string("cannot start the watchdog process: ") + std::strerror(errno) +
              "; if cudatrace is killed while a process waits at a library load, send it SIGCONT");
}

bool Session::on_record(void* ctx, const void* data, std::size_t size) {
  auto* self = static_cast<Session*>(ctx);
  if (size < sizeof(__u32)) return false;
  switch (*static_cast<const __u32*>(data)) {
    case CT_REC_CALL:
    case CT_REC_UNFINISHED: {
      const auto* rec = static_cast<const ct_call*>(data);
      if (size < sizeof(ct_call)) break;
      const std::size_t room = size - sizeof(ct_call);
      const bool fits = rec->payload_len <= room &&
                        (!rec->stack_len || CT_ALIGN8(rec->payload_len) + std::size_t(rec->stack_len) * 8 <= room);
      if (fits) self->on_call(*rec);
      break;
    }
    case CT_REC_MAP_CHANGE:
      // Published at once: the stop watchdog reads what is left unread.
      if (size >= sizeof(ct_map_change)) self->on_map_change(*static_cast<const ct_map_change*>(data));
      return true;
  }
  return false;
}

void Session::on_call(const ct_call& rec) {
  if (!decode_call(rec, &names_, call_, &read_string_)) return;
  ++records_;
  if (activity_in_bpf_ && !call_.unfinished && !call_.failed() && outermost(call_) &&
      activity_api(*call_.api).kind == CT_ACT_PAGE_LOCK) {
    // This call bumped the page-locked generation: the copies counted
    // before it are judged by the page-locked memory before it.
    read_activity(++page_locked_changes_);
    decode_call(rec, &names_, call_, &read_string_);  // read_activity reused call_
  }
  if (call_.api->group() == Group::Module) names_.learn(call_);
  const StreamActivity& activity = streams_.on_call(call_);
  if (activity.pageable_host_ptr) warn_pageable_copy(*activity.pageable_host_ptr);
  if (nvtx_) on_nvtx(call_);
  call_.nccl = nccl_.on_call(call_);
  if (!opts_.display.wants(*call_.api)) return;
  if (perfetto_) perfetto_->call(call_, activity);
  if (reporter_) {
    // Summary mode: BPF counts every call; records come only for what the tables
    // need (--by-range asks for all of them, for its own table).
    if (by_range_) {
      by_range_->on_call(call_);
      // The other tables get what they get without --by-range.
      if (!call_.unfinished && !(call_.api->cookie & CT_COOKIE_DETAIL)) return;
    }
    reporter_->on_call(call_);
    stats_.unfinished += call_.unfinished;
    return;
  }
  // NVTX calls are never slow or failed: --min-us and --errors leave them out.
  if (call_.api->layer() == Layer::Nvtx && (opts_.min_us || opts_.errors_only)) return;
  if (opts_.stack) call_.stack = stacks_.frames(static_cast<pid_t>(rec.pid), record_stack(rec));
  if (call_.unfinished) {
    ++stats_.unfinished;
    out_->unfinished(call_);
  } else {
    ++stats_.calls;
    out_->call(call_);
  }
  const std::size_t formatted = out_->buffer().size();
  chunk_.record_ends.push_back(Chunk::record_end(formatted, call_.unfinished));
  if (formatted >= OutputWriter::kChunkBytes) hand_over_output();
}

// NVTX calls move the range stacks; every other call is given the ranges it
// was made in. A range that ends goes to the timeline.
void Session::on_nvtx(Call& c) {
  nvtx_->annotate(c);
  if (c.api->layer() != Layer::Nvtx) return;
  const std::optional<NvtxClosed> closed = nvtx_->on_call(c);
  if (closed && perfetto_) perfetto_->nvtx_range(*closed);
}

void Session::warn_pageable_copy(std::uint64_t host_ptr) {
  const ct_call& r = *call_.rec;
  std::string site = r.caller ? fmt::format("{:#x}", r.caller) : std::string("an unknown call site");
  if (r.caller) {
    const Symbolizer::Location loc = symbolizer_.locate(static_cast<pid_t>(r.pid), r.caller);
    if (!loc.module.empty())
      site = fmt::format("{}+{:#x}", loc.module.substr(loc.module.rfind('/') + 1), loc.module_offset);
    if (!loc.function.empty()) site += fmt::format(" ({}+{:#x})", loc.function, loc.function_offset);
  }
  const bool to_device = arg_value(call_, ArgType::Ptr, 1) == host_ptr;
  Warning w{"pageable_async_copy", host_ptr, site,
            fmt::format("{} {} pageable host memory {:#x} at {}: the copy is synchronous", call_.api->symbol,
                        to_device ? "from" : "to", host_ptr, site)};
  warn_line(w.message);
  out_->warning(call_, w);
}

void Session::on_map_change(const ct_map_change& m) {
  if (probes_) attach_mappings(static_cast<pid_t>(m.pid));
  stacks_.forget(static_cast<pid_t>(m.pid));
  if (m.stopped) kill(static_cast<pid_t>(m.pid), SIGCONT);
}

// What is kept per process and per thread goes when they exit. A process
// found gone is forgotten one look later (a second on), after the ring has
// been read past every record it wrote.
void Session::forget_exited() {
  const std::uint64_t now = monotonic_ns();
  if (now < next_exit_check_ns_) return;
  next_exit_check_ns_ = now + 1000000000ull;
  for (pid_t pid : exited_) {
    symbolizer_.forget(pid);
    streams_.forget_process(static_cast<std::uint32_t>(pid));
    names_.forget(static_cast<std::uint32_t>(pid));
    stacks_.forget(pid);
    seen_mappings_.erase(seen_mappings_.lower_bound({pid, 0, 0}), seen_mappings_.lower_bound({pid + 1, 0, 0}));
  }
  for (auto [pid, tid] : exited_threads_) streams_.forget_thread(pid, tid);
  exited_.clear();
  exited_threads_.clear();
  std::set<pid_t> known;
  for (pid_t pid : symbolizer_.processes()) known.insert(pid);
  for (std::uint32_t pid : streams_.processes()) known.insert(static_cast<pid_t>(pid));
  for (pid_t pid : known) {
    if (!process_exists(pid)) {
      exited_.push_back(pid);
      continue;
    }
    for (std::uint32_t tid : streams_.threads(static_cast<std::uint32_t>(pid)))
      if (access(fmt::format("/proc/{}/task/{}", pid, tid).c_str(), F_OK) != 0)
        exited_threads_.emplace_back(static_cast<std::uint32_t>(pid), tid);
  }
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
  error_line("writing " + (opts_.output_path.empty() ? std::string("standard output") : opts_.output_path) + ": " +
             std::strerror(error));
  output_failed_ = true;
  return false;
}

void Session::count_unwritten(const RecordCount& n) {
  stats_.calls -= n.calls;
  stats_.unfinished -= n.unfinished;
  stats_.lost_output += n.total();
}

void Session::drain_loop() {
  // After Ctrl-C in command mode, give the command (which got the signal
  // too) a moment to exit so its last calls are still traced.
  std::uint64_t stop_deadline = 0;
  while (true) {
    // Most records are submitted without a wake-up: the timeout collects them.
    if (!ring_->poll(100)) {
      error_line(std::string("reading the ring buffer: ") + std::strerror(errno));
      break;
    }
    if (!flush()) break;
    forget_exited();
    if (reporter_ && opts_.interval_s && monotonic_ns() >= next_report_ns_) {
      summary_report(false);
      if (!flush()) break;
      if (opts_.count && ++reports_ >= opts_.count) {
        count_reached_ = true;
        break;
      }
    }
    if (target_gone()) break;
    if (g_stop) {
      if (child_ <= 0) break;
      // SIGTERM was sent to cudatrace alone (Ctrl-C reaches the command too): pass it on.
      if (!stop_deadline && g_stop == SIGTERM) kill(child_, SIGTERM);
      if (!stop_deadline) stop_deadline = monotonic_ns() + 2000000000ull;
      if (monotonic_ns() > stop_deadline) break;
    }
  }
  ring_->drain();
}

// Calls still in progress when tracing stops are reported as unfinished.
void Session::report_open_calls() {
  const int fd = bpf_map__fd(skel_->maps.threads);
  __u32 key = 0, next = 0;
  __u32* prev = nullptr;
  ct_thread_state st{};
  ct_call rec{};
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, &st) != 0 || st.depth == 0) continue;
    for (__u32 i = 0; i < st.depth && i < CT_MAX_DEPTH; ++i) {
      rec = ct_call{};
      rec.type = CT_REC_UNFINISHED;
      rec.api = static_cast<__u16>(CT_COOKIE_API(st.frames[i].cookie));
      rec.parent_api = i ? static_cast<__u16>(CT_COOKIE_API(st.frames[i - 1].cookie)) : kNoApi;
      rec.pid = st.tgid;
      rec.tid = key;
      rec.ts_ns = st.frames[i].ts_ns;
      std::memcpy(rec.args, st.frames[i].args, sizeof rec.args);
      rec.depth = static_cast<__u8>(i);
      std::memcpy(rec.comm, st.comm, sizeof rec.comm);
      on_call(rec);
    }
  }
}

void Session::finish() {
  // Detach first, then read the ring to its end: every record written is
  // seen, and a process stopped at a library load is continued.
  probes_.reset();
  cost_probes_.reset();
  for (bpf_link* l : tp_links_) bpf_link__destroy(l);
  tp_links_.clear();
  ring_->drain();
  report_open_calls();
  const std::vector<__u64> totals = read_counters();
  if (totals[CT_CNT_ACTIVITY_FULL])
    warn_line(std::to_string(totals[CT_CNT_ACTIVITY_FULL]) + " launches and copies were sent as records: the BPF "
              "activity table (" + std::to_string(CT_ACTIVITY_ENTRIES) + " entries) was full; nothing is lost");
  CostReport cost;
  if (cost_measured_) {
    cost = cost_so_far();
    stats_.cost = &cost;
  }
  stats_.lost_ringbuf = totals[CT_CNT_LOST_RINGBUF];
  stats_.lost_threads = totals[CT_CNT_LOST_THREADS];
  stats_.depth_overflow = totals[CT_CNT_DEPTH_OVERFLOW];
  stats_.unmatched = totals[CT_CNT_UNMATCHED];
  stats_.lost_control = totals[CT_CNT_LOST_CONTROL];
  if (perfetto_) {
    std::string error;
    if (!perfetto_->finish(error)) error_line(opts_.perfetto_path + ": " + error);
  }
  if (reporter_) summary_report(true);
  // Everything formatted is written before the end line, which counts what
  // was not: the consumer may take its time, as long as it reads.
  hand_over_output();
  const OutputWriter::Drained drained = writer_->drain(kOutputStall);
  count_unwritten(drained.unwritten);
  output_ok();
  if (output_closed_) return;
  if (!drained.complete && !output_failed_)
    warn_line(fmt::format("{} was not read for {} s: gave up writing it ({} records not written)",
                          opts_.output_path.empty() ? std::string("standard output") : opts_.output_path,
                          kOutputStall.count(), drained.unwritten.total()));
  fmt::memory_buffer summary;
  out_->end(stats_, summary);
  stats_.cost = nullptr;  // `cost` is a local: formatted above, not needed after
  bool end_written = false;
  if (drained.complete) {
    hand_over_output();
    end_written = writer_->drain(kOutputStall).complete;
  }
  out_->buffer().clear();
  output_ok();
  if (output_closed_) return;
  // The JSON end line did not get out: its counts go to stderr instead.
  if (opts_.json && !end_written && !output_failed_) append_end_summary(stats_, summary);
  if (summary.size()) std::fwrite(summary.data(), 1, summary.size(), stderr);
  if (opts_.verbose) {
    rusage self{};
    getrusage(RUSAGE_SELF, &self);
    std::fprintf(stderr, "cudatrace: read %llu call records\n", static_cast<unsigned long long>(records_));
    std::fprintf(stderr, "cudatrace: tracer used %.2f s CPU, peak RSS %.1f MiB\n",
                 double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                     double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
                 double(self.ru_maxrss) / 1024);
  }
  const StreamTracker::Forgotten& forgotten = streams_.forgotten();
  if (forgotten.streams || forgotten.events)
    warn_line(fmt::format("{} streams and {} events never destroyed were forgotten (over {} per process); a later use "
                          "of one got a new id",
                          forgotten.streams, forgotten.events, StreamTracker::kMaxHandles));
  if (forgotten.merged_segments)
    warn_line(fmt::format("{} times a stream held over {} pieces of queued work; waits on them say \"approximate\"",
                          forgotten.merged_segments, StreamTracker::kMaxSegments));
  if (opts_.json && end_written && stats_.lost())
    warn_line(std::to_string(stats_.lost()) + " call records lost; see the end line's lost_detail");
}

void Session::summary_report(bool final) {
  std::vector<ct_api_stats> run;
  if (!read_api_stats(bpf_map__fd(skel_->maps.api_stats), apis().size(), run)) {
    warn_line(std::string("cannot read the per-API statistics: ") + std::strerror(errno));
    return;
  }
  if (final) stats_.calls = reporter_->calls(run);
  // Copies of generations whose page-locked change is still unread wait for it.
  read_activity(final ? ~std::uint64_t(0) : page_locked_changes_ + 1);
  CostReport cost;
  if (!final && cost_measured_) cost = cost_so_far();
  reporter_->report(out_->buffer(), run, monotonic_ns(), final, !final && cost_measured_ ? &cost : nullptr);
  if (by_range_ && final) by_range_->report(out_->buffer(), opts_.json);
  next_report_ns_ += std::uint64_t(opts_.interval_s) * 1000000000ull;
}

int Session::run() {
  start_ns_ = monotonic_ns();
  names_.set_symbolizer(
      [this](std::uint32_t pid, std::uint64_t addr) { return symbolizer_.function_at(static_cast<pid_t>(pid), addr); });
  read_string_ = [this](std::uint32_t pid, std::uint64_t addr, std::string& out) {
    return symbolizer_.string_at(static_cast<pid_t>(pid), addr, CT_MAX_PAYLOAD, out);
  };
  out_ = opts_.json ? make_json_output() : make_text_output(start_ns_, opts_.full_names);
  if (opts_.summary) {
    // NVTX calls are not CUDA work: --by-range has them, the per-API tables do not.
    Selection reported = opts_.display;
    reported.layer[static_cast<int>(Layer::Nvtx)] = false;
    ReportOptions report{reported, opts_.summary_tables, opts_.hist, opts_.insights, opts_.json, start_ns_, {},
                          opts_.full_names};
    report.nccl = &nccl_;
    reporter_ = std::make_unique<Reporter>(report, &stacks_);
    next_report_ns_ = start_ns_ + std::uint64_t(opts_.interval_s) * 1000000000ull;
  }
  if (opts_.nvtx) nvtx_ = std::make_unique<NvtxTracker>();
  if (opts_.by_range) by_range_ = std::make_unique<RangeSummary>();
  if (!opts_.perfetto_path.empty()) {
    std::string error;
    perfetto_ = PerfettoWriter::open(opts_.perfetto_path, start_ns_, error);
    if (!perfetto_) {
      error_line(error);
      return kExitOutput;
    }
  }
  const std::uint64_t load_start_ns = monotonic_ns();
  decide_dlopen_stop();
  if (int rc = load()) return rc;
  // -p: before the loader probe can stop the target. Command mode: after
  // the command is forked (it waits to be released), so it is the first child.
  if (opts_.pid > 0) start_stop_watchdog();
  if (int rc = opts_.pid > 0 ? attach_pid_target() : start_command()) return rc;
  if (opts_.pid <= 0) start_stop_watchdog();
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: BPF loaded and %zu probes attached in %.1f ms (%s)\n", probes_->probe_count(),
                 double(monotonic_ns() - load_start_ns) / 1e6,
                 probes_->mode() == AttachMode::MultiSession ? "uprobe sessions" : "uprobe + uretprobe pairs");
  // Only now: a start that failed leaves no empty -o file behind.
  if (int rc = open_output()) return rc;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (waiting_for_cuda_)
    std::fprintf(stderr,
                 "cudatrace: process %d has no CUDA library loaded yet; waiting for it to load one (Ctrl-C to stop)\n",
                 opts_.pid);
  else if (opts_.pid > 0)
    std::fprintf(stderr, "cudatrace: tracing process %d (%zu probes); Ctrl-C to stop\n", opts_.pid,
                 probes_->probe_count());
  writer_ = std::make_unique<OutputWriter>(out_fd_, std::size_t(opts_.buffer_mb) << 20);
  out_->buffer().reserve(OutputWriter::kChunkCapacity);
  if (!reporter_) out_->header();
  // Written before the command starts: an output that cannot be written
  // (-o /dev/full) is found before anything runs.
  hand_over_output();
  writer_->wait_written(kOutputStall);
  if (!output_ok()) return output_closed_ ? kExitBrokenPipe : kExitOutput;
  if (release_fd_ >= 0) {
    const char go = 1;
    if (write(release_fd_, &go, 1) != 1) {
      error_line(std::string("cannot start the command: ") + std::strerror(errno));
      return kExitTarget;
    }
    close(release_fd_);
    release_fd_ = -1;
  }
  drain_loop();
  finish();
  if (output_closed_) return kExitBrokenPipe;
  if (output_failed_) return kExitOutput;
  if (child_ > 0) {
    if (!child_reaped_) return count_reached_ ? kExitOk : 128 + (g_stop ? g_stop : SIGINT);
    if (WIFEXITED(child_status_)) return WEXITSTATUS(child_status_);
    if (WIFSIGNALED(child_status_)) return 128 + WTERMSIG(child_status_);
  }
  return kExitOk;
}

}  // namespace

int run_tracer(const Options& opts) {
  Session session(opts);
  return session.run();
}

}  // namespace cudatrace
