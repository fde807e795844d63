// --all-processes: every process of the host; docs/prometheus.md.
//
// Probes belong to files, not processes: a uprobe attached to a file without
// a pid fires in every process that maps it, now or later. So each distinct
// CUDA file (by device and inode; container copies through /proc/PID/root
// or /proc/PID/map_files) is probed once. At start, the files processes map
// and those the host keeps where CUDA libraries are kept (probed ahead: a
// program that maps one later is seen from its first call). Files that
// appear later are found from the dynamic loader's probe (start-up and
// dlopen), the record every exec sends and, should both miss one (a lost
// record, the first process of a container whose own loader was not probed
// yet), a rescan of /proc every kNodeRescanNs. No process is ever stopped,
// and tracing goes on until a stop signal.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cudatrace/clock.h"
#include "cudatrace/record/stop_signals.h"
#include "cudatrace/record/tracee.h"
#include "cudatrace/target/library_locations.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

constexpr std::uint64_t kNodeRescanNs = 5000000000ull;

// With perf-event uprobes (kernels before 6.6) a link is held per probe of
// every CUDA file: thousands, past the usual 1024 descriptors.
void raise_file_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

class NodeTracee final : public Tracee {
 public:
  NodeTracee(const Options& opts, Symbolizer& symbolizer) : Tracee(opts, symbolizer, unasked()) {}

  TracedProcesses prepare() override {
    raise_file_limit();
    TracedProcesses traced;
    traced.every_exec_told = true;  // and none is stopped (docs/prometheus.md: what can be missed)
    return traced;
  }

  int attach(BpfObject& bpf, const RecordsNeeded&) override {
    use_bpf(bpf);
    if (int rc = attach_libs(-1)) return rc;
    refresh();  // the files of the processes running now first: they may be calling
    probe_ahead();
    return kExitOk;
  }

  int release(int /*stop_signal*/) override {
    std::fprintf(stderr, "cudatrace: tracing every process of this host (%zu files probed); Ctrl-C to stop\n",
                 probed_files());
    return kExitOk;
  }

  void refresh() override {
    const std::uint64_t now = monotonic_ns();
    if (now < next_rescan_ns_) return;
    next_rescan_ns_ = now + kNodeRescanNs;
    DIR* proc = opendir("/proc");
    if (!proc) return;
    const pid_t self = getpid();
    while (dirent* e = readdir(proc)) {
      if (stop_signal()) break;
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0 || pid == self) continue;
      attach_mappings(static_cast<pid_t>(pid));
    }
    closedir(proc);
  }

  bool keep_tracing(int stop_signal) override { return !stop_signal; }

 private:
  static AttachPolicy unasked() {
    AttachPolicy policy;
    policy.unasked_processes = true;
    return policy;
  }

  void probe_ahead() {
    const std::uint64_t start_ns = monotonic_ns();
    const std::vector<std::string> files = find_cuda_libraries(host_root());
    std::size_t probed = 0;
    for (const std::string& path : files) {
      if (stop_signal()) return;
      const std::uint64_t file_start_ns = monotonic_ns();
      Probes::FileResult r;
      std::string error;
      if (!probes().attach_file(path, -1, r, error)) {
        if (opts_.verbose) warn_line(error);
        continue;
      }
      if (!r.apis) continue;
      ++probed;
      note_probed_file(path);
      if (opts_.verbose)
        std::fprintf(stderr, "cudatrace: %s: %d APIs, probed ahead in %.1f ms\n", path.c_str(), r.apis,
                     double(monotonic_ns() - file_start_ns) / 1e6);
    }
    if (opts_.verbose)
      std::fprintf(stderr,
                   "cudatrace: probed ahead %zu of the %zu CUDA library files found on this host in %.1f ms\n",
                   probed, files.size(), double(monotonic_ns() - start_ns) / 1e6);
  }

  std::uint64_t next_rescan_ns_ = 0;
};

}  // namespace

std::unique_ptr<Tracee> make_node_tracee(const Options& opts, Symbolizer& symbolizer) {
  return std::make_unique<NodeTracee>(opts, symbolizer);
}

}  // namespace cudatrace
