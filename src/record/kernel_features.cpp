#include "cudatrace/record/kernel_features.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "cudatrace/record/uprobe_multi.h"

namespace cudatrace {
namespace {

constexpr bpf_insn kReturnZero[] = {
    {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
    {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

int load_return_zero(bpf_prog_type type, unsigned expected_attach_type) {
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = static_cast<bpf_attach_type>(expected_attach_type));
  return bpf_prog_load(type, nullptr, "GPL", kReturnZero, 2, &opts);
}

// errno from creating a uprobe_multi link on "/" (a directory: EBADF where
// uprobe_multi exists) with the given pid.
int uprobe_multi_error(int prog_fd, __u32 pid) {
  const std::uint64_t offset = 0;
  UprobeMultiAttr attr{};
  attr.prog_fd = static_cast<__u32>(prog_fd);
  attr.attach_type = kTraceUprobeMulti;
  attr.path = reinterpret_cast<std::uintptr_t>("/");
  attr.offsets = reinterpret_cast<std::uintptr_t>(&offset);
  attr.cnt = 1;
  attr.pid = pid;
  const Fd link(static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof attr)));
  return link.ok() ? 0 : errno;
}

// BPF links on perf events carry a cookie since they exist (5.15): creating
// one on a descriptor that is no perf event fails with EBADF there, with
// EINVAL before.
bool has_perf_link_cookies() {
  const Fd prog(load_return_zero(BPF_PROG_TYPE_KPROBE, 0));
  if (!prog.ok()) return false;
  LIBBPF_OPTS(bpf_link_create_opts, opts, .perf_event = {.bpf_cookie = 1});
  const Fd link(bpf_link_create(prog.get(), -1, BPF_PERF_EVENT, &opts));
  return !link.ok() && errno == EBADF;
}

// A perf-event program may look up a hash map allocated at run time only
// where uprobe programs may too without a warning (6.1: both limits went
// with the BPF memory allocator); perf-event programs were refused outright.
bool has_run_time_alloc_in_tracing() {
  LIBBPF_OPTS(bpf_map_create_opts, map_opts, .map_flags = BPF_F_NO_PREALLOC);
  const Fd map(bpf_map_create(BPF_MAP_TYPE_HASH, nullptr, 4, 4, 1, &map_opts));
  if (!map.ok()) return false;
  const bpf_insn lookup[] = {
      {BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map.get()},
      {0, 0, 0, 0, 0},
      {BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, -4, 0},
      {BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0},
      {BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -4},
      {BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem},
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  const Fd prog(bpf_prog_load(BPF_PROG_TYPE_PERF_EVENT, nullptr, "GPL", lookup, sizeof lookup / sizeof *lookup,
                              nullptr));
  return prog.ok();
}

struct Requirement {
  const char* what;
  const char* since;
  bool (*present)();
};

bool uprobe_helper(bpf_func_id id) { return libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, id, nullptr) == 1; }

// Newest first: on an old kernel the line names what makes it too old.
const Requirement kRequirements[] = {
    {"BPF cookies on uprobes (bpf_get_attach_cookie)", "5.15",
     [] { return uprobe_helper(BPF_FUNC_get_attach_cookie); }},
    {"bpf_get_func_ip in uprobe programs", "5.15", [] { return uprobe_helper(BPF_FUNC_get_func_ip); }},
    {"the BPF ring buffer", "5.8", [] { return libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 1; }},
    {"bpf_probe_read_user in uprobe programs", "5.5",
     [] { return uprobe_helper(BPF_FUNC_probe_read_user) && uprobe_helper(BPF_FUNC_probe_read_user_str); }},
    {"bpf_send_signal in uprobe programs", "5.3", [] { return uprobe_helper(BPF_FUNC_send_signal); }},
    {"bpf_get_stack in uprobe programs", "4.18", [] { return uprobe_helper(BPF_FUNC_get_stack); }},
};

}  // namespace

bool uprobe_pmu(int& type, int& retprobe_bit) {
  std::ifstream type_file("/sys/bus/event_source/devices/uprobe/type");
  std::ifstream format_file("/sys/bus/event_source/devices/uprobe/format/retprobe");
  std::string format;  // "config:0"
  if (!(type_file >> type) || !(format_file >> format) || format.rfind("config:", 0) != 0) return false;
  retprobe_bit = std::atoi(format.c_str() + 7);
  return retprobe_bit >= 0 && retprobe_bit < 64;
}

KernelFeatures probe_kernel_features() {
  KernelFeatures f;
  int type = 0, bit = 0;
  f.uprobe_pmu = uprobe_pmu(type, bit);
  f.perf_links = has_perf_link_cookies();
  f.run_time_alloc_in_uprobes = has_run_time_alloc_in_tracing();
  const Fd multi(load_return_zero(BPF_PROG_TYPE_KPROBE, kTraceUprobeMulti));
  if (multi.ok()) {
    f.uprobe_multi = uprobe_multi_error(multi.get(), 0) == EBADF;
    // The fix refuses a negative pid before looking at the path (libbpf
    // probes it the same way).
    f.uprobe_multi_pid_filter = f.uprobe_multi && uprobe_multi_error(multi.get(), ~0u) == EINVAL;
  }
  return f;
}

std::string missing_kernel_feature() {
  for (const Requirement& r : kRequirements)
    if (!r.present())
      return std::string("this kernel lacks ") + r.what + " (Linux " + r.since +
             "); cudatrace needs Linux 5.15 or later";
  return {};
}

}  // namespace cudatrace

namespace cudatrace {

std::string choose_attach_mode(AttachRequest request, const KernelFeatures& kernel, bool sessions, AttachMode& mode) {
  if (request == AttachRequest::Multi && !kernel.uprobe_multi)
    return "--attach multi: this kernel has no uprobe_multi links (Linux 6.6); --attach perf works from 5.15";
  if (request == AttachRequest::Perf || (request == AttachRequest::Auto && !kernel.uprobe_multi)) {
    if (!kernel.perf_links) return "this kernel lacks BPF links on perf events (Linux 5.15)";
    if (!kernel.uprobe_pmu)
      return request == AttachRequest::Perf
                 ? "--attach perf: this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe, "
                   "CONFIG_UPROBE_EVENTS)"
                 : "this kernel has neither uprobe_multi links (Linux 6.6) nor the uprobe PMU "
                   "(/sys/bus/event_source/devices/uprobe, CONFIG_UPROBE_EVENTS)";
    mode = AttachMode::PerfPair;
    return {};
  }
  mode = sessions ? Probes::detect_mode() : AttachMode::MultiPair;
  return {};
}

}  // namespace cudatrace
