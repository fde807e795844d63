// The recorder's BPF side: privileges and BTF, loading the object with the
// options as read-only globals, the probe-cost measurement, the counters and
// the maps read while tracing, the budget.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "cudatrace/record.h"  // before the skeleton: its struct ct_config
#include "cudatrace.skel.h"
#include "cudatrace/record/bpf_load.h"
#include "cudatrace/record/kernel_features.h"
#include "cudatrace/record/recorder.h"
#include "cudatrace/target/terminal.h"

namespace cudatrace {
namespace {

bool g_verbose = false;
int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG || !g_verbose) return 0;
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  std::string text(n > 0 ? static_cast<std::size_t>(n) + 1 : 1, '\0');
  if (n > 0) std::vsnprintf(text.data(), text.size(), fmt, again);
  va_end(again);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  // Its messages name the traced processes' files: each line escaped, as every name on stderr is.
  std::string out;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out += terminal_safe(std::string_view(text).substr(start, end - start));
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  std::fputs(out.c_str(), stderr);
  return n;
}

// Probes' warnings name files of the traced processes; their own words are
// printable ASCII, which escaping leaves as it is.
void warn_escaped(const std::string& msg) { warn_line(terminal_safe(msg)); }

// CAP_BPF and CAP_PERFMON in the effective set, also for root: a
// container's root may lack them, and the kernel then refuses with EPERM.
bool has_bpf_privileges() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("CapEff:", 0) == 0) return has_bpf_capabilities(std::stoull(line.substr(7), nullptr, 16));
  return geteuid() == 0;
}

// Threads with a call in progress, where the kernel cannot grow the map at
// run time (see KernelFeatures::run_time_alloc_in_uprobes).
constexpr __u32 kPreallocatedThreads = 8192;

// The API id of the start-up measurement's probe: no table row, so its
// records are ignored.
constexpr std::uint16_t kProbeCostApi = CT_COOKIE_API_MASK - 1;

static_assert(CT_MAX_APIS < kProbeCostApi, "the probe-cost API id must not be a table row");

}  // namespace

int Recorder::load() {
  if (!has_bpf_privileges()) {
    error_line(geteuid() == 0 ? "runs as root without CAP_BPF and CAP_PERFMON (a container or a capability "
                                "bounding set took them): grant CAP_BPF and CAP_PERFMON"
                              : "needs root: run with sudo, or grant CAP_BPF and CAP_PERFMON");
    return kExitPermission;
  }
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    error_line("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing); cudatrace needs CONFIG_DEBUG_INFO_BTF=y");
    return kExitKernel;
  }
  g_verbose = opts_.verbose;
  libbpf_set_print(libbpf_log);
  if (const std::string missing = missing_kernel_feature(); !missing.empty()) {
    error_line(missing);
    return kExitKernel;
  }
  const KernelFeatures kernel = probe_kernel_features();
  // CUDATRACE_NO_UPROBE_SESSIONS=1 forces pairs, as on kernels before 6.13
  // (tests and benchmarks compare the two; docs/benchmarks.md).
  const char* no_sessions = std::getenv("CUDATRACE_NO_UPROBE_SESSIONS");
  AttachMode& mode = attach_mode_;
  if (const std::string why =
          choose_attach_mode(opts_.attach, kernel, !no_sessions || std::strcmp(no_sessions, "0") == 0, mode);
      !why.empty()) {
    error_line(why);
    return kExitKernel;
  }
  if (mode == AttachMode::PerfPair && opts_.max_overhead_pct > 0) {  // see main.cpp
    error_line("--max-overhead needs uprobe_multi links (Linux 6.6); this kernel has only perf-event uprobes");
    return kExitKernel;
  }
  skel_ = cudatrace_bpf__open();
  if (!skel_) {
    error_line(std::string("cannot open the BPF object: ") + std::strerror(errno));
    return kExitKernel;
  }
  ct_config* ro = const_cast<ct_config*>(&skel_->rodata->settings);
  ro->filter_tgid = opts_.pid > 0 ? static_cast<__u32>(opts_.pid) : 0;
  ro->use_tgid_set = opts_.pid <= 0 && !opts_.all_processes;
  ro->follow_forks = ro->use_tgid_set;
  ro->report_execs = opts_.all_processes;
  ro->tracer_tgid = static_cast<__u32>(getpid());
  ro->empty_programs = opts_.empty_probes;
  ro->export_mode = !opts_.prometheus_address.empty();
  ro->filter_tid = static_cast<__u32>(opts_.tid);
  ro->min_dur_ns = opts_.min_us * 1000;
  ro->errors_only = opts_.errors_only;
  ro->stop_on_map_change = stop_at_loads_;
  ro->summary_mode = opts_.summary;
  // --gpu-time needs every launch's time and every synchronisation, as --by-range does.
  ro->summary_records_all = opts_.by_range || opts_.gpu_time;
  ro->capture_stack = opts_.stack;
  ro->every_layer = opts_.every_layer;
  // A timeline needs every call's record.
  activity_in_bpf_ = opts_.summary && opts_.perfetto_path.empty() && !opts_.by_range && !opts_.gpu_time;
  ro->activity_in_bpf = activity_in_bpf_;
  // Per-CPU statistics for the APIs probed (ids of the default groups come
  // first, api_table.cpp), only where they are kept: --summary.
  std::size_t stats_entries = 1;
  for (const Api& a : apis())
    if (opts_.summary && opts_.selection.wants(a)) stats_entries = a.id + std::size_t(1);
  bpf_map__set_max_entries(skel_->maps.api_stats, static_cast<__u32>(stats_entries));
  bpf_map__set_max_entries(skel_->maps.activity_apis, static_cast<__u32>(apis().size()));
  bpf_map__set_max_entries(skel_->maps.export_apis, static_cast<__u32>(apis().size()));
  if (!opts_.all_processes)  // unused: the smallest ring
    bpf_map__set_max_entries(skel_->maps.control, static_cast<__u32>(sysconf(_SC_PAGESIZE)));
  const std::uint64_t ring_bytes = std::uint64_t(opts_.ring_mb) << 20;
  // Each CPU wakes the reader every wakeup_every records, so at most an
  // eighth of the ring waits unannounced; otherwise the reader polls.
  const int cpus = std::max(1, libbpf_num_possible_cpus());
  ro->wakeup_every =
      static_cast<__u32>(std::clamp<std::uint64_t>(ring_bytes / 8 / (cpus * sizeof(ct_call)), 16, 4096));
  bpf_map__set_max_entries(skel_->maps.events, static_cast<__u32>(ring_bytes));
  if (!kernel.run_time_alloc_in_uprobes) {
    // Preallocated, so smaller: each thread's state is about 0.9 KiB.
    bpf_map__set_map_flags(skel_->maps.threads, 0);
    bpf_map__set_max_entries(skel_->maps.threads, kPreallocatedThreads);
  }
  for (bpf_program* p : {skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change})
    Probes::prepare(p, mode);
  // The session program only where the kernel has sessions. ct_enter/ct_exit
  // are loaded in every mode: measure_cost() probes cudatrace's own functions
  // with them (an entry-only and a paired probe).
  if (mode == AttachMode::MultiSession) {
    Probes::prepare_session(skel_->progs.ct_session);
  } else {
    bpf_program__set_autoload(skel_->progs.ct_session, false);
  }
  BpfLoadFailure failure;
  if (int err = load_keeping_messages([this] { return cudatrace_bpf__load(skel_); }, failure)) {
    const LoadErrorReport report = report_load_error(err, failure, opts_.verbose);
    for (const std::string& line : report.lines) error_line(line);
    return report.exit_status;
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
      error_line(std::string("cannot attach ") + bpf_program__name(p) + ": " + std::strerror(errno) +
                 " (BPF programs on BTF tracepoints need Linux 5.5)");
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
  if (opts_.all_processes) {
    const int control_fd = bpf_map__fd(skel_->maps.control);
    control_ring_ = RingReader::open(control_fd, on_record, this, ring_error);
    if (!control_ring_ || !ring_->wake_on(control_fd)) {
      error_line("cannot open the control ring buffer: " + (control_ring_ ? std::string(std::strerror(errno)) : ring_error));
      return kExitKernel;
    }
  }
  measure_cost();
  if (!opts_.prometheus_address.empty()) {
    for (const Api& a : apis()) {
      const __u32 id = a.id;
      const ct_export_api row = export_api(a);
      if (bpf_map__update_elem(skel_->maps.export_apis, &id, sizeof id, &row, sizeof row, BPF_ANY) != 0) {
        error_line(std::string("cannot fill the export table: ") + std::strerror(errno));
        return kExitKernel;
      }
    }
    node_stats_ = std::make_unique<NodeStats>(bpf_map__fd(skel_->maps.export_stats),
                                              bpf_map__fd(skel_->maps.process_cost), bpf_map__fd(skel_->maps.threads));
  }
  const auto note = [](const std::string& msg) { std::fprintf(stderr, "cudatrace: %s\n", terminal_safe(msg).c_str()); };
  probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                     opts_.selection, warn_escaped, opts_.verbose ? Probes::Warn(note) : nullptr);
  if (mode == AttachMode::MultiSession) probes_->use_session(skel_->progs.ct_session);
  if (mode == AttachMode::PerfPair) probes_->use_perf_events();
  // uprobe_multi links given a pid fired only in the thread of that id
  // before 6.9: there the BPF programs' own filter selects the process.
  probes_->limit_multi_to_pid(kernel.uprobe_multi_pid_filter);
  if (opts_.max_overhead_pct > 0) probes_->split_hot();
  return kExitOk;
}

// Measures what one probe hit costs here (overhead.h), before anything is
// traced: the ring then holds only the measurement's records, which name no
// API, and the counters only what it caused.
void Recorder::measure_cost() {
  const Api* launch = api_by_symbol("cudaLaunchKernel");
  const std::uint64_t cookie = (launch->cookie & ~std::uint64_t(CT_COOKIE_API_MASK)) | kProbeCostApi;
  std::string error;
  const std::uint64_t start_ns = monotonic_ns();
  cost_probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                         Selection{}, warn_line);
  if (attach_mode_ == AttachMode::PerfPair) cost_probes_->use_perf_events();
  cost_measured_ = measure_probe_cost(*cost_probes_, bpf_map__fd(skel_->maps.threads), cookie, probe_cost_, error);
  ring_->drain();
  clear_counters();
  if (!cost_measured_)
    warn_line("cannot measure what a probe costs (" + error + "); the tracing cost will not be reported");
  else if (opts_.verbose)
    std::fprintf(stderr,
                 "cudatrace: a probe hit costs %.2f us of CPU time at entry, %.2f us at return, %.2f us on a "
                 "single-stepped instruction (wall-clock: %.2f, %.2f and %.2f us; measured in %.1f ms); priced at "
                 "%gx that in a program\n",
                 probe_cost_.entry_ns / 1e3, probe_cost_.return_ns / 1e3, probe_cost_.stepped_ns / 1e3,
                 probe_cost_.entry_wall_ns / 1e3, probe_cost_.return_wall_ns / 1e3, probe_cost_.stepped_wall_ns / 1e3,
                 double(monotonic_ns() - start_ns) / 1e6, kWorkloadFactor);
}

std::vector<__u64> Recorder::read_counters() {
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<__u64> per_cpu(ncpu > 0 ? ncpu : 1), totals(CT_CNT_NR);
  for (__u32 i = 0; i < CT_CNT_NR; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (__u64 v : per_cpu) totals[i] += v;
  }
  return totals;
}

void Recorder::clear_counters() {
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  const std::vector<__u64> zeroes(ncpu > 0 ? ncpu : 1);
  for (__u32 i = 0; i < CT_CNT_NR; ++i) bpf_map_update_elem(fd, &i, zeroes.data(), BPF_ANY);
}

std::optional<CostReport> Recorder::cost() {
  if (!cost_measured_ && !budget_) return std::nullopt;
  std::vector<HitCount> counts;
  read_hit_counts(bpf_map__fd(skel_->maps.process_cost), bpf_map__fd(skel_->maps.threads), counts);
  CostReport r =
      price_hits(counts, probe_cost_, cpu_at_start_, [](std::uint32_t pid) { return process_cpu_ns(pid); });
  if (budget_) r.budget = budget_->report();
  return r;
}

LossCounts Recorder::losses() {
  const std::vector<__u64> totals = read_counters();
  LossCounts lost;
  lost.ring_buffer = totals[CT_CNT_LOST_RINGBUF];
  lost.thread_table = totals[CT_CNT_LOST_THREADS];
  lost.depth_overflow = totals[CT_CNT_DEPTH_OVERFLOW];
  lost.unmatched = totals[CT_CNT_UNMATCHED];
  lost.control = totals[CT_CNT_LOST_CONTROL];
  return lost;
}

std::vector<ct_api_stats> Recorder::api_stats() {
  std::vector<ct_api_stats> run;
  if (!read_api_stats(bpf_map__fd(skel_->maps.api_stats), apis().size(), run)) {
    warn_line(std::string("cannot read the per-API statistics: ") + std::strerror(errno));
    run.assign(apis().size(), ct_api_stats{});
  }
  if (budget_) budget_->extrapolate(run);
  return run;
}

void Recorder::start_budget() {
  BudgetConfig config;
  config.max_fraction = opts_.max_overhead_pct / 100;
  for (const Api& a : apis()) skel_->bss->hot_apis[a.id] = is_hot_api(a);
  budget_ = std::make_unique<BudgetControl>(
      config, *probes_, cost_measured_ ? &probe_cost_ : nullptr, bpf_map__fd(skel_->maps.process_cost),
      bpf_map__fd(skel_->maps.threads), monotonic_ns(),
      [this](std::uint64_t ns) { skel_->bss->hot_stale_before_ns = ns; });
}

// Hands on what BPF counted in the activity map, as calls rebuilt from the
// keys (summary.h: activity_record).
void Recorder::read_activity(std::uint64_t below_gen, bool for_report) {
  if (!activity_in_bpf_) return;
  auto pass = [&](const ct_activity_key& key, const ct_activity& n) {
    ActivityRecord rec;
    activity_record(key, n, rec);
    if (decode_call(rec.call(), &names_, call_, &read_string_)) consumer_->on_counted(call_, n);
  };
  // --max-overhead: launches wait in budget_ until a report, then come scaled.
  auto add = [&](const ct_activity_key& key, const ct_activity& n) {
    const ct_activity counted = budget_ ? budget_->extrapolate(key, n) : n;
    if (counted.calls) pass(key, counted);
  };
  const bool ok = activity_.read(bpf_map__fd(skel_->maps.activity), below_gen, add);
  if (!ok) warn_line(std::string("cannot read the activity map: ") + std::strerror(errno));
  if (budget_ && for_report) budget_->pass_activity(pass);
}

void Recorder::pass_counted(CallConsumer& to, bool final) {
  consumer_ = &to;
  // Copies of generations whose page-locked change is still unread wait for it.
  read_activity(final ? ~std::uint64_t(0) : page_locked_changes_ + 1, true);
}

}  // namespace cudatrace
