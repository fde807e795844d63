#include "cudatrace/trace/probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "cudatrace/target/elf_file.h"
#include "cudatrace/trace/budget.h"
#include "cudatrace/target/static_runtime.h"

namespace cudatrace {
namespace {

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Libraries whose every table row is expected to be exported; a missing
// row there means a CUDA version we do not cover, worth a warning.
bool is_cuda_library(const std::string& path, Layer layer) {
  const std::string base = basename_of(path);
  // Indexed by Layer; nvtx: cudatrace's own injection library, never a CUDA one.
  static const char* const kPrefixes[kLayerCount] = {"libcudart.so", "libcuda.so", nullptr, "libnccl.so"};
  const char* prefix = kPrefixes[static_cast<int>(layer)];
  return prefix && base.rfind(prefix, 0) == 0;
}

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

}  // namespace

// uprobe_multi links (Linux 6.6), spelt out: Debian 12's headers predate them.
constexpr int kBpfLinkCreate = 28;
constexpr unsigned kTraceUprobeMulti = 48;  // BPF_TRACE_UPROBE_MULTI
constexpr unsigned kTraceUprobeSession = 57;  // BPF_TRACE_UPROBE_SESSION (Linux 6.13)
constexpr unsigned kUprobeMultiReturn = 1;  // BPF_F_UPROBE_MULTI_RETURN
struct UprobeMultiAttr {
  __u32 prog_fd, target_fd, attach_type, flags;
  __aligned_u64 path, offsets, ref_ctr_offsets, cookies;
  __u32 cnt, multi_flags, pid;
};

void Probes::prepare(bpf_program* prog) {
  bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(kTraceUprobeMulti));
}

void Probes::prepare_session(bpf_program* prog) {
  bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(kTraceUprobeSession));
}

AttachMode Probes::detect_mode() {
  // An empty session program on a scratch file that no process maps: the
  // kernel checks the program and the link, and installs nothing.
  const bpf_insn return_zero[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = static_cast<bpf_attach_type>(kTraceUprobeSession));
  const int prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "ct_session_test", "GPL", return_zero, 2, &opts);
  if (prog < 0) return AttachMode::MultiPair;
  AttachMode mode = AttachMode::MultiPair;
  const int file = static_cast<int>(syscall(SYS_memfd_create, "cudatrace-session-test", 0));
  const unsigned char nops[16] = {0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
                                  0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3};
  if (file >= 0 && write(file, nops, sizeof nops) == static_cast<ssize_t>(sizeof nops)) {
    const std::string path = "/proc/self/fd/" + std::to_string(file);
    const std::uint64_t offset = 0, cookie = 0;
    UprobeMultiAttr attr{};
    attr.prog_fd = static_cast<__u32>(prog);
    attr.attach_type = kTraceUprobeSession;
    attr.path = reinterpret_cast<std::uintptr_t>(path.c_str());
    attr.offsets = reinterpret_cast<std::uintptr_t>(&offset);
    attr.cookies = reinterpret_cast<std::uintptr_t>(&cookie);
    attr.cnt = 1;
    const int link = static_cast<int>(syscall(__NR_bpf, kBpfLinkCreate, &attr, sizeof attr));
    if (link >= 0) {
      mode = AttachMode::MultiSession;
      close(link);
    }
  }
  if (file >= 0) close(file);
  close(prog);
  return mode;
}

Probes::Probes(bpf_program* enter, bpf_program* exit, bpf_program* map_change, Selection selection, Warn warn)
    : enter_(enter), exit_(exit), map_change_(map_change), selection_(selection), warn_(std::move(warn)) {}

Probes::~Probes() {
  // Newest first: a file's entry link goes before its return link, so no
  // call is entered that could not be seen returning.
  for (HotGroup& g : hot_) {
    // No 5 ms wait as in detach_hot: tracing ends, and a call in progress
    // goes unfinished anyway. Each close waits for grace periods: a node's
    // many files would otherwise add up to seconds at exit.
    for (auto fd = g.links.rbegin(); fd != g.links.rend(); ++fd) close(*fd);
    close(g.file_fd);
  }
  for (auto fd = link_fds_.rbegin(); fd != link_fds_.rend(); ++fd) close(*fd);
}

const Probes::FileSymbols* Probes::symbols_of(const std::string& path, std::string& error,
                                              std::tuple<dev_t, ino_t>& key) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  key = {st.st_dev, st.st_ino};
  if (auto it = symbols_.find(key); it != symbols_.end()) return &it->second;
  auto elf = ElfFile::open(path, error);
  if (!elf) return nullptr;
  static const auto kWanted = [] {
    std::unordered_set<std::string_view> names;
    for (const Api& a : apis()) names.insert(a.symbol);
    return names;
  }();
  // One probe per address: aliases (a variant exported at its base
  // function's address) would otherwise report each call twice.
  std::map<std::uint64_t, const Api*> by_offset;
  for (const auto& [name, vaddr] : elf->find_functions(kWanted)) {
    std::uint64_t offset = 0;
    if (!elf->vaddr_to_offset(vaddr, offset)) continue;
    const Api* api = api_by_symbol(name);
    auto [it, inserted] = by_offset.emplace(offset, api);
    if (!inserted && it->second->variant && !api->variant) it->second = api;
  }
  // No runtime symbols: maybe a statically linked runtime stripped of them.
  const auto is_runtime = [](const auto& entry) { return entry.second->layer() == Layer::Runtime; };
  if (std::none_of(by_offset.begin(), by_offset.end(), is_runtime)) {
    const auto found = find_static_runtime(*elf, static_runtime_fingerprints());
    for (const auto& [api, offset] : found) by_offset.emplace(offset, api);
    const std::size_t known = fingerprinted_api_count(static_runtime_fingerprints());
    if (!found.empty() && found.size() < known)
      warn_(basename_of(path) + ": " + std::to_string(found.size()) + " of " + std::to_string(known) +
            " fingerprinted runtime APIs found in its own CUDA runtime (built with another CUDA version than "
            "cudatrace?); calls to the others are seen at the driver layer only");
  }
  FileSymbols syms;
  for (const auto& [offset, api] : by_offset) syms.offsets.emplace_back(api, offset);
  return &symbols_.emplace(key, std::move(syms)).first->second;
}

bool Probes::attach_multi(bpf_program* prog, const std::string& path, pid_t pid,
                          const std::vector<std::uint64_t>& offsets, const std::vector<std::uint64_t>& cookies,
                          MultiLink kind, std::string& error, std::vector<int>* links) {
  UprobeMultiAttr attr{};
  attr.prog_fd = static_cast<__u32>(bpf_program__fd(prog));
  attr.attach_type = kind == MultiLink::Session ? kTraceUprobeSession : kTraceUprobeMulti;
  attr.path = reinterpret_cast<std::uintptr_t>(path.c_str());
  attr.offsets = reinterpret_cast<std::uintptr_t>(offsets.data());
  attr.cookies = reinterpret_cast<std::uintptr_t>(cookies.data());
  attr.cnt = static_cast<__u32>(offsets.size());
  attr.multi_flags = kind == MultiLink::Return ? kUprobeMultiReturn : 0;
  attr.pid = pid > 0 ? static_cast<__u32>(pid) : 0;
  const int fd = static_cast<int>(syscall(__NR_bpf, kBpfLinkCreate, &attr, sizeof attr));
  if (fd < 0) {
    const int err = errno;
    error = path + ": attaching " + std::to_string(offsets.size()) + " uprobes: " + std::strerror(err);
    if (err == EINVAL || err == EOPNOTSUPP)
      error += " (cudatrace needs uprobe_multi links: Linux 6.6 or later)";
    return false;
  }
  (links ? *links : link_fds_).push_back(fd);
  probes_ += offsets.size();
  return true;
}

bool Probes::attach_pair(const std::string& path, pid_t pid, const std::vector<std::uint64_t>& offsets,
                         const std::vector<std::uint64_t>& cookies, std::string& error, std::vector<int>* links,
                         bool session) {
  return session && mode_ == AttachMode::MultiSession
             ? attach_multi(session_, path, pid, offsets, cookies, MultiLink::Session, error, links)
             : attach_multi(exit_, path, pid, offsets, cookies, MultiLink::Return, error, links) &&
                   attach_multi(enter_, path, pid, offsets, cookies, MultiLink::Entry, error, links);
}

bool Probes::attach_hot(HotGroup& g, std::string& error) {
  // Entry and return links even where the kernel has sessions: a session
  // link attached again at the same offsets was seen (Linux 6.18) to lose
  // the return of every outermost call from then on.
  if (attach_pair("/proc/self/fd/" + std::to_string(g.file_fd), g.pid, g.offsets, g.cookies, error, &g.links,
                  false)) {
    g.attached_at_ns = monotonic_ns();
    return true;
  }
  detach_hot(g);  // a return link without its entry link
  error = g.name + error.substr(error.find(':'));
  return false;
}

void Probes::detach_hot(HotGroup& g) {
  if (g.attached_at_ns) {
    g.attached_ns += monotonic_ns() - g.attached_at_ns;
    g.attached_at_ns = 0;
  }
  // Entry link first (see ~Probes). A return link traps at the function's
  // entry too (to take over its return address), so it goes soon after:
  // closing a link removes its breakpoints at once, then waits for RCU grace
  // periods (tens of ms), and the calls entered before the entry link went
  // (launches: microseconds) have returned 5 ms later. The waits overlap.
  if (g.links.size() == 2) {
    std::thread entry([fd = g.links[1]] { close(fd); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    close(g.links[0]);
    entry.join();
  } else {
    for (int fd : g.links) close(fd);
  }
  probes_ -= g.offsets.size() * g.links.size();
  g.links.clear();
}

std::uint64_t Probes::set_hot_attached(bool attached) {
  if (attached == hot_attached_) return 0;
  hot_attached_ = attached;
  // One thread per file: detaching a link waits for RCU grace periods (tens
  // of milliseconds each); in parallel the waits overlap, and every file's
  // probes come and go at about the same time.
  std::vector<std::string> errors(hot_.size());
  std::vector<std::uint64_t> cpu_ns(hot_.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < hot_.size(); ++i)
    threads.emplace_back([this, i, attached, &errors, &cpu_ns] {
      timespec start{}, end{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
      if (attached)
        attach_hot(hot_[i], errors[i]);
      else
        detach_hot(hot_[i]);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
      cpu_ns[i] = std::uint64_t(end.tv_sec - start.tv_sec) * 1000000000ull + end.tv_nsec - start.tv_nsec;
    });
  for (std::thread& t : threads) t.join();
  std::uint64_t total_cpu_ns = 0;
  for (std::uint64_t ns : cpu_ns) total_cpu_ns += ns;
  for (std::size_t i = hot_.size(); i-- > 0;) {
    if (errors[i].empty()) continue;
    warn_(errors[i] + "; its launches are no longer traced");
    close(hot_[i].file_fd);
    hot_.erase(hot_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return total_cpu_ns;
}

std::map<std::uint16_t, double> Probes::hot_shares(std::uint64_t now_ns) const {
  std::map<std::uint16_t, std::pair<double, int>> sums;
  for (const HotGroup& g : hot_) {
    if (now_ns <= g.since_ns) continue;
    const std::uint64_t in = g.attached_ns + (g.attached_at_ns ? now_ns - std::min(now_ns, g.attached_at_ns) : 0);
    const double share = std::min(1.0, double(in) / double(now_ns - g.since_ns));
    for (const Api* a : g.apis) {
      auto& [sum, n] = sums[a->id];
      sum += share;
      ++n;
    }
  }
  std::map<std::uint16_t, double> shares;
  for (const auto& [id, sum_n] : sums) shares[id] = sum_n.first / sum_n.second;
  return shares;
}

bool Probes::attach_file(const std::string& path, pid_t pid, FileResult& result, std::string& error) {
  std::tuple<dev_t, ino_t> file;
  const FileSymbols* syms = symbols_of(path, error, file);
  if (!syms) return false;
  const auto key = std::tuple_cat(file, std::make_tuple(pid));
  if (auto it = attached_.find(key); it != attached_.end()) {
    result = it->second;
    return true;
  }
  FileResult r;
  bool present[kLayerCount] = {};
  std::unordered_set<const Api*> found;
  std::vector<std::uint64_t> offsets, cookies;
  HotGroup hot;
  for (const auto& [api, offset] : syms->offsets) {
    present[static_cast<int>(api->layer())] = true;
    found.insert(api);
    if (!selection_.wants(*api)) continue;
    if (split_hot_ && is_hot_api(*api)) {
      hot.offsets.push_back(offset);
      hot.cookies.push_back(api->cookie);
      hot.apis.push_back(api);
    } else {
      offsets.push_back(offset);
      cookies.push_back(api->cookie);
    }
    ++r.apis;
    r.runtime |= api->layer() == Layer::Runtime;
    r.driver |= api->layer() == Layer::Driver;
  }
  // Pairs: the return probes first, so that a call entered between the two
  // attaches has neither half, rather than an entry whose return never comes.
  if (!offsets.empty() && !attach_pair(path, pid, offsets, cookies, error)) return false;
  if (!hot.offsets.empty()) {
    hot.file_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (hot.file_fd < 0) {
      error = path + ": " + std::strerror(errno);
      return false;
    }
    hot.pid = pid;
    hot.name = path;
    hot.since_ns = monotonic_ns();
    if (hot_attached_ && !attach_hot(hot, error)) {
      close(hot.file_fd);
      return false;
    }
    hot_.push_back(std::move(hot));
  }
  for (Layer layer : {Layer::Runtime, Layer::Driver, Layer::Nccl}) {
    if (!present[static_cast<int>(layer)] || !is_cuda_library(path, layer)) continue;
    std::string missing;
    int n = 0;
    for (const Api& a : apis()) {
      if (a.variant || a.layer() != layer || !selection_.wants(a) || found.count(&a)) continue;
      if (n++ < 5) missing += (missing.empty() ? "" : ", ") + a.symbol;
    }
    if (n) warn_(basename_of(path) + " does not export " + std::to_string(n) + " traced API(s) (" + missing +
                 (n > 5 ? ", ..." : "") + "); tracing the rest");
  }
  attached_.emplace(key, r);
  result = r;
  return true;
}

bool Probes::attach_loader(const std::string& path, pid_t pid, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  const auto key = std::make_tuple(st.st_dev, st.st_ino, pid);
  if (loaders_.count(key)) return true;
  auto elf = ElfFile::open(path, error);
  if (!elf) return false;
  const auto found = elf->find_functions({"_dl_debug_state"});
  std::uint64_t offset = 0;
  if (found.empty() || !elf->vaddr_to_offset(found.begin()->second, offset)) {
    error = path + ": no _dl_debug_state symbol; libraries loaded later will not be traced";
    return false;
  }
  // The map-change program reads the loader's state (r_state) at this
  // distance from the probed address; 0 when the loader exports no _r_debug.
  std::uint64_t to_r_state = 0;
  if (const std::uint64_t debug = elf->exported_object("_r_debug"))
    to_r_state = debug + offsetof(struct r_debug, r_state) - found.begin()->second;
  if (!attach_multi(map_change_, path, pid, {offset}, {to_r_state}, MultiLink::Entry, error)) return false;
  loaders_.insert(key);
  return true;
}

bool Probes::attach_function(const std::string& path, pid_t pid, std::uint64_t offset, std::uint64_t cookie,
                             bool with_return, std::string& error) {
  return (!with_return || attach_multi(exit_, path, pid, {offset}, {cookie}, MultiLink::Return, error)) &&
         attach_multi(enter_, path, pid, {offset}, {cookie}, MultiLink::Entry, error);
}

}  // namespace cudatrace
