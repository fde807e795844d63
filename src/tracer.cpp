#include "cudatrace/tracer.h"

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
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "cudatrace.skel.h"
#include "cudatrace/decode.h"
#include "cudatrace/elf_file.h"
#include "cudatrace/kernel_names.h"
#include "cudatrace/output.h"
#include "cudatrace/perfetto.h"
#include "cudatrace/process.h"
#include "cudatrace/report.h"
#include "cudatrace/ring_reader.h"
#include "cudatrace/stacks.h"
#include "cudatrace/nccl.h"
#include "cudatrace/streams.h"
#include "cudatrace/symbolizer.h"
#include "cudatrace/watchdog.h"

namespace cudatrace {
namespace {

static_assert(sizeof(ct_call) == 176, "ct_call layout changed: check bpf/ and include/cudatrace/record.h agree");

volatile sig_atomic_t g_stop = 0;  // the signal that asked us to stop
void on_signal(int sig) { g_stop = sig; }

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

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

class Session {
 public:
  explicit Session(const Options& opts) : opts_(opts) {}
  ~Session() {
    probes_.reset();  // detach before the programs go away
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
  void start_stop_watchdog();
  int start_command();
  void attach_mappings(pid_t pid);
  bool target_gone();
  void drain_loop();
  void report_open_calls();
  void finish();
  bool flush();

  static bool on_record(void* ctx, const void* data, std::size_t size);
  void on_call(const ct_call& rec);
  void warn_pageable_copy(std::uint64_t host_ptr);
  void on_map_change(const ct_map_change& m);
  void summary_report(bool final);

  const Options& opts_;
  int out_fd_ = STDOUT_FILENO;
  std::unique_ptr<Output> out_;
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
  StringReader read_string_;
  Call call_;
  EndStats stats_;
  std::uint64_t start_ns_ = 0;
  pid_t child_ = -1;
  int child_status_ = 0;
  bool child_reaped_ = false;
  int release_fd_ = -1;  // the command waits for a byte on this pipe before exec
  int target_fd_ = -1;   // pidfd of the -p target
  bool output_failed_ = false;
  std::set<std::tuple<pid_t, std::uint64_t, std::uint64_t>> seen_mappings_;  // pid, inode, start
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
  ro->stop_on_map_change = opts_.stop_on_dlopen;
  ro->summary_mode = opts_.summary;
  ro->capture_stack = opts_.stack;
  bpf_map__set_max_entries(skel_->maps.api_stats, static_cast<__u32>(apis().size()));
  const std::uint64_t ring_bytes = std::uint64_t(opts_.ring_mb) << 20;
  // Each CPU wakes the reader every wakeup_every records, so at most an
  // eighth of the ring waits unannounced; otherwise the reader polls.
  const int cpus = std::max(1, libbpf_num_possible_cpus());
  ro->wakeup_every =
      static_cast<__u32>(std::clamp<std::uint64_t>(ring_bytes / 8 / (cpus * sizeof(ct_call)), 16, 4096));
  bpf_map__set_max_entries(skel_->maps.events, static_cast<__u32>(ring_bytes));
  for (bpf_program* p : {skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change}) Probes::prepare(p);
  if (int err = cudatrace_bpf__load(skel_)) {
    if (err == -EPERM || err == -EACCES)
      error_line("permission denied loading BPF programs: run as root, or grant CAP_BPF and CAP_PERFMON");
    else
      error_line(std::string("cannot load the BPF programs: ") + std::strerror(-err) + " (run with -v for details)");
    return err == -EPERM || err == -EACCES ? kExitPermission : kExitKernel;
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
  probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                     opts_.selection, warn_line);
  return kExitOk;
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
      if (!probes_->attach_loader(path, probe_pid, error)) warn_line(error);
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
  if (int rc = attach_libs(opts_.pid)) return rc;
  attach_mappings(opts_.pid);
  if (probes_->probe_count() <= 1 && opts_.libs.empty()) {
    // Only the loader probe (or nothing) was attached.
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
               ") via /proc/" + std::to_string(opts_.pid) + "/maps; name the library with --lib PATH");
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
    char go = 0;
    // EOF instead of a byte: the tracer gave up; do not run untraced.
    if (read(pipefd[0], &go, 1) != 1) _exit(127);
    std::vector<char*> argv;
    for (const std::string& a : opts_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
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

void Session::start_stop_watchdog() {
  if (opts_.stop_on_dlopen && start_watchdog(bpf_map__fd(skel_->maps.events)) < 0)
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
  if (call_.api->group() == Group::Module) names_.learn(call_);
  const StreamActivity& activity = streams_.on_call(call_);
  if (activity.pageable_host_ptr) warn_pageable_copy(*activity.pageable_host_ptr);
  call_.nccl = nccl_.on_call(call_);
  if (!opts_.display.wants(*call_.api)) return;
  if (perfetto_) perfetto_->call(call_, activity);
  if (reporter_) {
    // Summary mode: BPF counts every call; records come only for what the tables need.
    reporter_->on_call(call_);
    stats_.unfinished += call_.unfinished;
    return;
  }
  if (opts_.stack) call_.stack = stacks_.frames(static_cast<pid_t>(rec.pid), record_stack(rec));
  if (call_.unfinished) {
    ++stats_.unfinished;
    out_->unfinished(call_);
  } else {
    ++stats_.calls;
    out_->call(call_);
  }
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

bool Session::flush() {
  if (output_failed_) return false;
  std::string error;
  if (!write_all(out_fd_, out_->buffer(), error)) {
    error_line("writing " + (opts_.output_path.empty() ? std::string("standard output") : opts_.output_path) + ": " +
               error);
    output_failed_ = true;
    return false;
  }
  return true;
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
  for (bpf_link* l : tp_links_) bpf_link__destroy(l);
  tp_links_.clear();
  ring_->drain();
  report_open_calls();
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<__u64> per_cpu(ncpu > 0 ? ncpu : 1);
  __u64 totals[CT_CNT_NR] = {};
  for (__u32 i = 0; i < CT_CNT_NR; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (__u64 v : per_cpu) totals[i] += v;
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
  fmt::memory_buffer summary;
  out_->end(stats_, summary);
  flush();
  if (summary.size()) std::fwrite(summary.data(), 1, summary.size(), stderr);
  if (opts_.verbose) {
    rusage self{};
    getrusage(RUSAGE_SELF, &self);
    std::fprintf(stderr, "cudatrace: tracer used %.2f s CPU, peak RSS %.1f MiB\n",
                 double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                     double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
                 double(self.ru_maxrss) / 1024);
  }
  if (opts_.json && stats_.lost())
    warn_line(std::to_string(stats_.lost()) + " call records lost; see the end line's lost_detail");
}

void Session::summary_report(bool final) {
  std::vector<ct_api_stats> run;
  if (!read_api_stats(bpf_map__fd(skel_->maps.api_stats), apis().size(), run)) {
    warn_line(std::string("cannot read the per-API statistics: ") + std::strerror(errno));
    return;
  }
  if (final) stats_.calls = reporter_->calls(run);
  reporter_->report(out_->buffer(), run, monotonic_ns(), final);
  next_report_ns_ += std::uint64_t(opts_.interval_s) * 1000000000ull;
}

int Session::run() {
  start_ns_ = monotonic_ns();
  names_.set_symbolizer(
      [this](std::uint32_t pid, std::uint64_t addr) { return symbolizer_.function_at(static_cast<pid_t>(pid), addr); });
  read_string_ = [this](std::uint32_t pid, std::uint64_t addr, std::string& out) {
    return symbolizer_.string_at(static_cast<pid_t>(pid), addr, CT_MAX_PAYLOAD, out);
  };
  out_ = opts_.json ? make_json_output() : make_text_output(start_ns_);
  if (opts_.summary) {
    ReportOptions report{opts_.display, opts_.summary_tables, opts_.hist, opts_.insights, opts_.json, start_ns_, {}};
    report.nccl = &nccl_;
    reporter_ = std::make_unique<Reporter>(report, &stacks_);
    next_report_ns_ = start_ns_ + std::uint64_t(opts_.interval_s) * 1000000000ull;
  }
  if (!opts_.perfetto_path.empty()) {
    std::string error;
    perfetto_ = PerfettoWriter::open(opts_.perfetto_path, start_ns_, error);
    if (!perfetto_) {
      error_line(error);
      return kExitOutput;
    }
  }
  const std::uint64_t load_start_ns = monotonic_ns();
  if (int rc = load()) return rc;
  // -p: before the loader probe can stop the target. Command mode: after
  // the command is forked (it waits to be released), so it is the first child.
  if (opts_.pid > 0) start_stop_watchdog();
  if (int rc = opts_.pid > 0 ? attach_pid_target() : start_command()) return rc;
  if (opts_.pid <= 0) start_stop_watchdog();
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: BPF loaded and %zu probes attached in %.1f ms\n", probes_->probe_count(),
                 double(monotonic_ns() - load_start_ns) / 1e6);
  // Only now: a start that failed leaves no empty -o file behind.
  if (int rc = open_output()) return rc;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (opts_.pid > 0)
    std::fprintf(stderr, "cudatrace: tracing process %d (%zu probes); Ctrl-C to stop\n", opts_.pid,
                 probes_->probe_count());
  if (!reporter_) out_->header();
  if (!flush()) return kExitOutput;
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
