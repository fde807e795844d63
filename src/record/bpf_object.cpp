// The BPF object: privileges and BTF, the configuration as read-only
// globals, loading, the tables it reads, the tracepoints, the probe-cost
// measurement and the counters and maps read while tracing.
#include "cudatrace/record/bpf_object.h"

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

#include "cudatrace.skel.h"
#include "cudatrace/clock.h"
#include "cudatrace/record/bpf_load.h"
#include "cudatrace/record/bpf_maps.h"
#include "cudatrace/record/cost.h"
#include "cudatrace/record/kernel_features.h"
#include "cudatrace/record/node_stats.h"
#include "cudatrace/terminal.h"

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

// Fills the array map `map` with `row(api)` for every API; false (said) on failure.
template <typename Row>
bool fill_api_table(bpf_map* map, Row (*row)(const Api&), const char* what) {
  for (const Api& a : apis()) {
    const __u32 id = a.id;
    const Row value = row(a);
    if (bpf_map__update_elem(map, &id, sizeof id, &value, sizeof value, BPF_ANY) != 0) {
      error_line(std::string("cannot fill the ") + what + " table: " + std::strerror(errno));
      return false;
    }
  }
  return true;
}

}  // namespace

BpfObject::~BpfObject() {
  detach();  // the probes go before their programs
  cudatrace_bpf__destroy(skel_);
}

int BpfObject::load(const Options& opts, const RecordsNeeded& needs, const TracedProcesses& traced) {
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
  g_verbose = opts.verbose;
  libbpf_set_print(libbpf_log);
  if (const std::string missing = missing_kernel_feature(); !missing.empty()) {
    error_line(missing);
    return kExitKernel;
  }
  const KernelFeatures kernel = probe_kernel_features();
  // CUDATRACE_NO_UPROBE_SESSIONS=1 forces pairs, as on kernels before 6.13
  // (tests and benchmarks compare the two; docs/benchmarks.md).
  const char* no_sessions = std::getenv("CUDATRACE_NO_UPROBE_SESSIONS");
  if (const std::string why =
          choose_attach_mode(opts.attach, kernel, !no_sessions || std::strcmp(no_sessions, "0") == 0, mode_);
      !why.empty()) {
    error_line(why);
    return kExitKernel;
  }
  if (mode_ == AttachMode::PerfPair && opts.max_overhead_pct > 0) {  // see main.cpp
    error_line("--max-overhead needs uprobe_multi links (Linux 6.6); this kernel has only perf-event uprobes");
    return kExitKernel;
  }
  skel_ = cudatrace_bpf__open();
  if (!skel_) {
    error_line(std::string("cannot open the BPF object: ") + std::strerror(errno));
    return kExitKernel;
  }
  using Calls = RecordsNeeded::Calls;
  ct_config* ro = const_cast<ct_config*>(&skel_->rodata->settings);
  ro->filter_tgid = static_cast<__u32>(traced.only);
  ro->use_tgid_set = traced.registered;
  ro->follow_forks = traced.registered;
  ro->report_execs = traced.every_exec_told;
  ro->stop_on_map_change = traced.stop_at_loads;
  ro->tracer_tgid = static_cast<__u32>(getpid());
  ro->empty_programs = opts.empty_probes;
  ro->filter_tid = static_cast<__u32>(opts.tid);
  ro->min_dur_ns = opts.min_us * 1000;
  ro->errors_only = opts.errors_only;
  ro->every_layer = opts.every_layer;
  ro->export_mode = needs.calls == Calls::Export;
  ro->export_counts = needs.node_counts;
  ro->span_records = needs.calls == Calls::Export && needs.span_records;
  ro->summary_mode = needs.calls == Calls::Summary;
  ro->summary_records_all = needs.every_record;
  ro->activity_in_bpf = needs.counted_activity;
  for (const Facet* f : call_facets()) (*ro).*f->capture().setting = needs.captures(*f);
  // Per-CPU statistics for the APIs probed (ids of the default groups come
  // first, api_table.cpp): of every call in summary mode, of the calls whose
  // record the ring could not take in a trace (their counts stay exact).
  std::size_t stats_entries = 1;
  for (const Api& a : apis())
    if (needs.calls != Calls::Export && opts.selection.wants(a)) stats_entries = a.id + std::size_t(1);
  bpf_map__set_max_entries(skel_->maps.api_stats, static_cast<__u32>(stats_entries));
  bpf_map__set_max_entries(skel_->maps.activity_apis, static_cast<__u32>(apis().size()));
  bpf_map__set_max_entries(skel_->maps.export_apis, static_cast<__u32>(apis().size()));
  const auto page = static_cast<__u32>(sysconf(_SC_PAGESIZE));
  bpf_map__set_max_entries(skel_->maps.tracer_exit, page);  // one record
  const std::uint64_t ring_bytes = std::uint64_t(opts.ring_mb) << 20;
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
    Probes::prepare(p, mode_);
  // Uprobe_multi links only: perf-event uprobes fire in every process.
  const bool driver_on_demand = traced.driver_on_demand && mode_ != AttachMode::PerfPair;
  for (bpf_program* p : {skel_->progs.ct_lookup_enter, skel_->progs.ct_lookup_exit}) {
    if (driver_on_demand)
      Probes::prepare(p, AttachMode::MultiPair);
    else
      bpf_program__set_autoload(p, false);
  }
  for (const Facet* f : call_facets()) {
    const char* name = f->capture().program;
    if (!name) continue;
    bpf_program* p = bpf_object__find_program_by_name(skel_->obj, name);
    if (!p) {
      error_line(std::string("the BPF object has no program ") + name);
      return kExitKernel;
    }
    if (needs.captures(*f))
      Probes::prepare(p, mode_);
    else
      bpf_program__set_autoload(p, false);
  }
  // The session program only where the kernel has sessions. ct_enter/ct_exit
  // are loaded in every mode: measure_cost() probes cudatrace's own functions
  // with them (an entry-only and a paired probe).
  if (mode_ == AttachMode::MultiSession) {
    Probes::prepare_session(skel_->progs.ct_session);
  } else {
    bpf_program__set_autoload(skel_->progs.ct_session, false);
  }
  BpfLoadFailure failure;
  if (int err = load_keeping_messages([this] { return cudatrace_bpf__load(skel_); }, failure)) {
    const LoadErrorReport report = report_load_error(err, failure, opts.verbose);
    for (const std::string& line : report.lines) error_line(line);
    return report.exit_status;
  }
  if (!fill_api_table(skel_->maps.activity_apis, activity_api, "activity")) return kExitKernel;
  if (needs.node_counts && !fill_api_table(skel_->maps.export_apis, export_api, "export"))
    return kExitKernel;
  for (bpf_program* p : {skel_->progs.ct_fork, skel_->progs.ct_exec, skel_->progs.ct_thread_exit}) {
    bpf_link* l = bpf_program__attach(p);
    if (!l) {
      error_line(std::string("cannot attach ") + bpf_program__name(p) + ": " + std::strerror(errno) +
                 " (BPF programs on BTF tracepoints need Linux 5.5)");
      return kExitKernel;
    }
    tracepoints_.push_back(l);
  }
  const auto note = [](const std::string& msg) { std::fprintf(stderr, "cudatrace: %s\n", terminal_safe(msg).c_str()); };
  probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                     opts.selection, warn_escaped, opts.verbose ? Probes::Warn(note) : nullptr);
  if (mode_ == AttachMode::MultiSession) probes_->use_session(skel_->progs.ct_session);
  if (mode_ == AttachMode::PerfPair) probes_->use_perf_events();
  // uprobe_multi links given a pid fired only in the thread of that id
  // before 6.9: there the BPF programs' own filter selects the process.
  probes_->limit_multi_to_pid(kernel.uprobe_multi_pid_filter);
  if (opts.max_overhead_pct > 0) probes_->split_hot();
  if (driver_on_demand) probes_->defer_driver(skel_->progs.ct_lookup_enter, skel_->progs.ct_lookup_exit);
  return kExitOk;
}

// Before anything is traced: the ring then holds only the measurement's
// records, and the counters only what it caused.
std::optional<ProbeCost> BpfObject::measure_cost(bool verbose) {
  const Api* launch = api_by_symbol("cudaLaunchKernel");
  const std::uint64_t cookie = (launch->cookie & ~std::uint64_t(CT_COOKIE_API_MASK)) | kProbeCostApi;
  std::string error;
  const std::uint64_t start_ns = monotonic_ns();
  cost_probes_ = std::make_unique<Probes>(skel_->progs.ct_enter, skel_->progs.ct_exit, skel_->progs.ct_map_change,
                                         Selection{}, warn_line);
  if (mode_ == AttachMode::PerfPair) cost_probes_->use_perf_events();
  ProbeCost cost;
  begin_tracing(true);  // priced as a traced call costs, records and all
  const bool measured = measure_probe_cost(*cost_probes_, threads_fd(), cookie, cost, error);
  begin_tracing(false);
  clear_counters();
  if (!measured) {
    warn_line("cannot measure what a probe costs (" + error + "); the tracing cost will not be reported");
    return std::nullopt;
  }
  if (verbose)
    std::fprintf(stderr,
                 "cudatrace: a probe hit costs %.2f us of CPU time at entry, %.2f us at return, %.2f us on a "
                 "single-stepped instruction (wall-clock: %.2f, %.2f and %.2f us; measured in %.1f ms); priced at "
                 "%gx that in a program\n",
                 cost.entry_ns / 1e3, cost.return_ns / 1e3, cost.stepped_ns / 1e3, cost.entry_wall_ns / 1e3,
                 cost.return_wall_ns / 1e3, cost.stepped_wall_ns / 1e3, double(monotonic_ns() - start_ns) / 1e6,
                 kWorkloadFactor);
  return cost;
}

void BpfObject::detach() {
  probes_.reset();
  cost_probes_.reset();
  for (bpf_link* l : tracepoints_) bpf_link__destroy(l);
  tracepoints_.clear();
}

bool BpfObject::trace_process(pid_t pid) {
  const __u32 tgid = static_cast<__u32>(pid);
  const __u8 one = 1;
  return bpf_map__update_elem(skel_->maps.traced_tgids, &tgid, sizeof tgid, &one, sizeof one, BPF_ANY) == 0;
}

std::vector<__u64> BpfObject::counters() {
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<__u64> per_cpu(ncpu > 0 ? ncpu : 1), totals(CT_CNT_NR);
  for (__u32 i = 0; i < CT_CNT_NR; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (__u64 v : per_cpu) totals[i] += v;
  }
  return totals;
}

void BpfObject::clear_counters() {
  const int fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  const std::vector<__u64> zeroes(ncpu > 0 ? ncpu : 1);
  for (__u32 i = 0; i < CT_CNT_NR; ++i) bpf_map_update_elem(fd, &i, zeroes.data(), BPF_ANY);
}

LossCounts BpfObject::losses() {
  const std::vector<__u64> totals = counters();
  LossCounts lost;
  lost.ring_buffer = totals[CT_CNT_LOST_RINGBUF];
  lost.thread_table = totals[CT_CNT_LOST_THREADS];
  lost.depth_overflow = totals[CT_CNT_DEPTH_OVERFLOW];
  lost.unmatched = totals[CT_CNT_UNMATCHED];
  lost.control = totals[CT_CNT_LOST_CONTROL];
  return lost;
}

std::vector<ct_api_stats> BpfObject::api_stats() {
  std::vector<ct_api_stats> run;
  if (!read_api_stats(bpf_map__fd(skel_->maps.api_stats), apis().size(), run)) {
    warn_line(std::string("cannot read the per-API statistics: ") + std::strerror(errno));
    run.assign(apis().size(), ct_api_stats{});
  }
  return run;
}

void BpfObject::mark_hot_apis() {
  for (const Api& a : apis()) skel_->bss->hot_apis[a.id] = is_hot_api(a);
}

void BpfObject::drop_hot_frames_before(std::uint64_t ns) { skel_->bss->hot_stale_before_ns = ns; }

int BpfObject::events_fd() const { return bpf_map__fd(skel_->maps.events); }
const ct_config& BpfObject::settings() const { return skel_->rodata->settings; }
int BpfObject::control_fd() const { return bpf_map__fd(skel_->maps.control); }
int BpfObject::tracer_exit_fd() const { return bpf_map__fd(skel_->maps.tracer_exit); }
int BpfObject::threads_fd() const { return bpf_map__fd(skel_->maps.threads); }
int BpfObject::map_fd(const char* name) const {
  const bpf_map* m = skel_ ? bpf_object__find_map_by_name(skel_->obj, name) : nullptr;
  return m ? bpf_map__fd(m) : -1;
}
bool BpfObject::attach_program(const char* name, const std::string& path, pid_t pid, std::uint64_t offset,
                               std::string& error) {
  bpf_program* p = skel_ && probes_ ? bpf_object__find_program_by_name(skel_->obj, name) : nullptr;
  if (!p) {
    error = std::string("the BPF object has no program ") + name + " to attach";
    return false;
  }
  return probes_->attach_program(p, path, pid, offset, error);
}
void BpfObject::begin_tracing(bool begun) { skel_->bss->tracing_begun = begun; }

void BpfObject::wake_on_python_frames() { skel_->bss->py_reader_waiting = 1; }
int BpfObject::process_cost_fd() const { return bpf_map__fd(skel_->maps.process_cost); }
int BpfObject::activity_fd() const { return bpf_map__fd(skel_->maps.activity); }
int BpfObject::activity_counts_fd() const { return bpf_map__fd(skel_->maps.activity_counts); }
int BpfObject::export_stats_fd() const { return bpf_map__fd(skel_->maps.export_stats); }

bool BpfObject::set_driver_fn(std::uint32_t pid, std::uint64_t addr, bool probed) {
  const ct_driver_fn_key key{pid, 0, addr};
  const __u8 state = probed ? CT_DRIVER_FN_PROBED : CT_DRIVER_FN_UNPROBED;
  return bpf_map__update_elem(skel_->maps.driver_fns, &key, sizeof key, &state, sizeof state, BPF_ANY) == 0;
}

bool BpfObject::set_runtime_range(std::uint32_t pid, std::uint32_t index, std::uint64_t start, std::uint64_t end,
                                  bool runtime_library) {
  const ct_runtime_range_key key{pid, index};
  const ct_runtime_range range{start, end, runtime_library};
  return bpf_map__update_elem(skel_->maps.runtime_code, &key, sizeof key, &range, sizeof range, BPF_ANY) == 0;
}

void BpfObject::forget_driver_fns(std::uint32_t pid, const std::vector<std::uint64_t>& addrs, std::uint32_t ranges) {
  for (std::uint64_t addr : addrs) {
    const ct_driver_fn_key key{pid, 0, addr};
    bpf_map__delete_elem(skel_->maps.driver_fns, &key, sizeof key, 0);
  }
  for (std::uint32_t i = 0; i < ranges; ++i) {
    const ct_runtime_range_key key{pid, i};
    bpf_map__delete_elem(skel_->maps.runtime_code, &key, sizeof key, 0);
  }
}

}  // namespace cudatrace
