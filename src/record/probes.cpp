// Over 400 lines: both attach modes (uprobe_multi links, perf-event uprobes
// with their keeper) share the per-file bookkeeping here; the budget's hot
// groups are in probes_hot.cpp.
#include "cudatrace/record/probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <link.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/clock.h"
#include "cudatrace/decode/api_overrides.h"
#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/library_locations.h"
#include "cudatrace/record/budget.h"
#include "cudatrace/record/uprobe_multi.h"
#include "cudatrace/target/static_runtime.h"
#include "cudatrace/record/kernel_features.h"

namespace cudatrace {
namespace {

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Libraries whose every table row is expected to be exported; a missing
// row there means a CUDA version other than the table's, worth a note (-v).
// A wheel's renamed copy counts (torchvision's libcudart.faf08d9a.so.13).
bool is_cuda_library(const std::string& path, Layer layer) {
  // Indexed by Layer; nvtx: cudatrace's own injection library, never a CUDA one.
  static const char* const kStems[kLayerCount] = {"libcudart", "libcuda", nullptr, "libnccl"};
  const char* stem = kStems[static_cast<int>(layer)];
  return stem && is_library_of(basename_of(path), stem);
}

// Where the probe of the function at file `offset` goes: its first
// instructions decide (target/prologue.h).
ProbePlace place_at(const ElfFile& elf, std::uint64_t offset) {
  constexpr std::size_t kPrologueBytes = 64;
  const std::string_view bytes = elf.contents();
  const std::size_t n = offset < bytes.size() ? std::min(kPrologueBytes, bytes.size() - offset) : 0;
  return place_probe(reinterpret_cast<const std::uint8_t*>(bytes.data()) + offset, n);
}

}  // namespace

void Probes::prepare(bpf_program* prog, AttachMode mode) {
  // A perf-event uprobe takes a program of the default attach type.
  if (mode != AttachMode::PerfPair)
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

Probes::Probes(bpf_program* enter, bpf_program* exit, bpf_program* map_change, Selection selection, Warn warn,
               Warn note)
    : enter_(enter),
      exit_(exit),
      map_change_(map_change),
      selection_(selection),
      warn_(std::move(warn)),
      note_(std::move(note)) {}

// Closing a uprobe link waits for an RCU Tasks Trace grace period (Linux
// 6.12+; 25-35 ms each on the loaded build VM), outside any lock: closed from
// many threads at once, the links share grace periods (80 perf links: 2.6 s
// one by one, 70 ms from 80 threads). Whole-node mode with perf links holds
// about 2,000 (the files probed ahead): 1.3 s from 64 threads, 0.4 s from 256.
void Probes::close_all(const std::vector<int>& fds) {
  constexpr std::size_t kMaxThreads = 256;
  const std::size_t threads = std::min(fds.size(), kMaxThreads);
  if (threads <= 1) {
    for (int fd : fds) close(fd);
    return;
  }
  std::vector<std::thread> closers;
  for (std::size_t t = 0; t < threads; ++t)
    closers.emplace_back([&fds, t, threads] {
      for (std::size_t i = t; i < fds.size(); i += threads) close(fds[i]);
    });
  for (std::thread& c : closers) c.join();
}

Probes::~Probes() {
  // Entry links before return links, so no call is entered that could not
  // be seen returning. The hot links too, without detach_hot's 5 ms wait:
  // tracing ends, and a call in progress goes unfinished anyway.
  Links all = std::move(other_links_);
  const auto gather = [&all](const Links& links) {
    all.entry.insert(all.entry.end(), links.entry.begin(), links.entry.end());
    all.ret.insert(all.ret.end(), links.ret.begin(), links.ret.end());
  };
  for (const auto& [key, links] : file_links_) gather(links);
  for (const HotGroup& g : hot_) gather(g.links);
  close_all(all.entry);
  close_all(all.ret);
  for (const HotGroup& g : hot_) close(g.file_fd);
  keeper_.reset();  // after the links: the keeper destroys only events no link uses
}

void Probes::detach(Links& links) {
  close_all(links.entry);
  close_all(links.ret);
  probes_ -= links.probes;
  if (keeper_)
    for (const UprobeKey& key : links.events) keeper_->release(key);
  links = {};
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
    for (const Api& a : apis()) names.insert(probe_symbol(a));
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
  // (A static runtime is the implementation, not a forward.)
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
  for (const auto& [offset, api] : by_offset) syms.functions.push_back({api, offset, place_at(*elf, offset)});
  if (defers_driver()) {
    static const auto kDriverSymbols = [] {
      std::unordered_set<std::string_view> names;
      for (const Api& a : apis())
        if (deferrable(a)) names.insert(probe_symbol(a));
      return names;
    }();
    // The driver itself and runtime libraries call the driver as runtimes do.
    if (!is_cuda_library(path, Layer::Driver) && !is_cuda_library(path, Layer::Runtime))
      for (const std::string& name : elf->imported(kDriverSymbols))
        if (const Api* api = api_by_symbol(name)) syms.imports.push_back(api);
  }
  return &symbols_.emplace(key, std::move(syms)).first->second;
}

bool Probes::attach_multi(bpf_program* prog, const std::string& path, pid_t pid,
                          const std::vector<std::uint64_t>& offsets, const std::vector<std::uint64_t>& cookies,
                          MultiLink kind, Links& into, std::string& error) {
  UprobeMultiAttr attr{};
  attr.prog_fd = static_cast<__u32>(bpf_program__fd(prog));
  attr.attach_type = kind == MultiLink::Session ? kTraceUprobeSession : kTraceUprobeMulti;
  attr.path = reinterpret_cast<std::uintptr_t>(path.c_str());
  attr.offsets = reinterpret_cast<std::uintptr_t>(offsets.data());
  attr.cookies = reinterpret_cast<std::uintptr_t>(cookies.data());
  attr.cnt = static_cast<__u32>(offsets.size());
  attr.multi_flags = kind == MultiLink::Return ? kUprobeMultiReturn : 0;
  attr.pid = pid > 0 && multi_pid_filter_ ? static_cast<__u32>(pid) : 0;
  const int fd = static_cast<int>(syscall(__NR_bpf, kBpfLinkCreate, &attr, sizeof attr));
  if (fd < 0) {
    const int err = errno;
    error = path + ": attaching " + std::to_string(offsets.size()) + " uprobes: " + std::strerror(err);
    if (err == EINVAL || err == EOPNOTSUPP)
      error += " (uprobe_multi links need Linux 6.6; --attach perf does not)";
    return false;
  }
  (kind == MultiLink::Return ? into.ret : into.entry).push_back(fd);
  probes_ += offsets.size();
  into.probes += offsets.size();
  return true;
}

namespace {

// Open while it lives: the keeper destroys no event meanwhile. Holds the
// owner, which drops a keeper that stops answering midway.
class AttachWindow {
 public:
  explicit AttachWindow(const std::unique_ptr<UprobeKeeper>& keeper) : keeper_(keeper) {
    if (keeper_) keeper_->attaching(true);
  }
  ~AttachWindow() {
    if (keeper_) keeper_->attaching(false);
  }
  AttachWindow(const AttachWindow&) = delete;
  AttachWindow& operator=(const AttachWindow&) = delete;

 private:
  const std::unique_ptr<UprobeKeeper>& keeper_;
};

}  // namespace

bool Probes::attach_pairs(bpf_program* entry, bpf_program* ret, const std::string& path,
                          const std::tuple<dev_t, ino_t>& file, pid_t pid, const std::vector<std::uint64_t>& offsets,
                          const std::vector<std::uint64_t>& cookies, Links& into, std::string& error) {
  if (mode_ != AttachMode::PerfPair)
    return (!ret || attach_multi(ret, path, pid, offsets, cookies, MultiLink::Return, into, error)) &&
           attach_multi(entry, path, pid, offsets, cookies, MultiLink::Entry, into, error);
  if (!keeper_ && !keeper_failed_) {
    std::string why, notice;
    keeper_ = UprobeKeeper::connect(why, notice);
    keeper_failed_ = !keeper_;
    if (!notice.empty()) warn_(notice);
    if (!keeper_)
      warn_("cannot start the process that keeps perf-event uprobes (" + why +
            "); cudatrace will take longer to exit");
  }
  const AttachWindow window(keeper_);
  return (!ret || attach_perf(ret, path, file, offsets, cookies, true, into, error)) &&
         attach_perf(entry, path, file, offsets, cookies, false, into, error);
}

// One perf event of the uprobe PMU per probe, each with a BPF link carrying
// the cookie. The keeper holds a reference to the event (a reused one, or
// one made here), so that closing the link later costs no grace period.
// On a failure midway the links made so far are in `into` (attach_file
// detaches them).
bool Probes::attach_perf(bpf_program* prog, const std::string& path, const std::tuple<dev_t, ino_t>& file,
                         const std::vector<std::uint64_t>& offsets, const std::vector<std::uint64_t>& cookies,
                         bool retprobe, Links& into, std::string& error) {
  static int pmu_type = -1, retprobe_bit = 0;
  if (pmu_type < 0 && !uprobe_pmu(pmu_type, retprobe_bit)) {
    pmu_type = -1;
    error = "this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe; CONFIG_UPROBE_EVENTS)";
    return false;
  }
  const int prog_fd = bpf_program__fd(prog);
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    if (read_meanwhile_) read_meanwhile_();  // an empty ring costs next to nothing; an event, milliseconds
    UprobeKey key;
    key.dev = std::get<0>(file);
    key.ino = std::get<1>(file);
    key.offset = offsets[i];
    key.retprobe = retprobe;
    LIBBPF_OPTS(bpf_link_create_opts, opts, .perf_event = {.bpf_cookie = cookies[i]});
    int link = -1;
    int event = keeper_ ? keeper_->take(key) : -1;
    if (keeper_ && !keeper_->answering()) {
      warn_("the process that keeps perf-event uprobes stopped answering; attaching without it, so cudatrace "
            "will take longer to exit");
      keeper_failed_ = true;
      keeper_.reset();  // closing the socket gives back what it holds for this run
    }
    // Not linkable (EEXIST: the run that had it died a moment ago and its
    // link is not closed yet): make a new one.
    if (event >= 0 && (link = bpf_link_create(prog_fd, event, BPF_PERF_EVENT, &opts)) < 0) {
      close(event);
      event = -1;
    }
    if (event < 0) {
      perf_event_attr attr{};
      attr.size = sizeof attr;
      attr.type = static_cast<__u32>(pmu_type);
      attr.config = retprobe ? 1ull << retprobe_bit : 0;
      attr.config1 = reinterpret_cast<std::uintptr_t>(path.c_str());
      attr.config2 = offsets[i];
      // In every process, on any CPU: reusable by later runs whatever they
      // trace (uprobe_keeper.h); the BPF programs filter by process.
      event = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
      if (event >= 0 && (link = bpf_link_create(prog_fd, event, BPF_PERF_EVENT, &opts)) >= 0 && keeper_)
        keeper_->give(key, event);
    }
    if (link < 0) {
      error = path + ": attaching a uprobe at offset " + fmt::format("{:#x}", offsets[i]) + ": " +
              std::strerror(errno);
      if (event >= 0) close(event);
      return false;
    }
    close(event);  // the link (and the keeper) hold it
    (retprobe ? into.ret : into.entry).push_back(link);
    into.events.push_back(key);
    ++probes_;
    ++into.probes;
  }
  return true;
}

// A driver function left unprobed until other code than a runtime may call
// it: one that runtimes call at the rate of work (launches, copies, events,
// stream operations), inside the runtime call that makes it, where it has
// no record of its own (no out-parameters). Those called rarely, or outside
// the runtime's API calls (cuInit, contexts at start-up and teardown), or
// recorded inside them (allocations, creations, lookups) are probed as
// before: a trap now and then, and every count as CUPTI's.
bool Probes::deferrable(const Api& a) {
  if (a.layer() != Layer::Driver || a.out_index[0] >= 0) return false;
  switch (a.group()) {
    case Group::Launch:
    case Group::Xfer:
    case Group::Event:
    case Group::Stream:
      return true;
    default:
      return false;
  }
}

bool Probes::planned_cookie(const FileSymbols::Function& f, std::uint64_t& cookie) const {
  if (!selection_.wants(*f.api)) return false;
  cookie = f.api->cookie;
  if (!f.place.emulated) cookie |= CT_COOKIE_STEPPED;
  return true;
}

bool Probes::plan_file(const std::string& path, std::vector<PlannedProbe>& out, std::string& error) {
  std::tuple<dev_t, ino_t> file;
  const FileSymbols* syms = symbols_of(path, error, file);
  if (!syms) return false;
  out.clear();
  for (const FileSymbols::Function& f : syms->functions) {
    PlannedProbe p;
    p.api = f.api;
    p.entry = f.offset;
    p.place = f.place;
    std::uint64_t cookie = 0;
    p.attached = planned_cookie(f, cookie);
    out.push_back(std::move(p));
  }
  return true;
}

bool Probes::attach_file(const std::string& path, pid_t pid, FileResult& result, std::string& error) {
  if (read_meanwhile_) read_meanwhile_();
  std::tuple<dev_t, ino_t> file;
  const FileSymbols* syms = symbols_of(path, error, file);
  if (!syms) return false;
  const auto key = std::tuple_cat(file, std::make_tuple(pid));
  if (auto it = attached_.find(key); it != attached_.end()) {
    result = it->second;
    return true;
  }
  if (read_meanwhile_) read_meanwhile_();  // after reading a new file's symbols
  FileResult r;
  bool present[kLayerCount] = {};
  std::unordered_set<const Api*> found;
  std::vector<std::uint64_t> offsets, cookies;
  HotGroup hot;
  std::vector<std::uint64_t> lookup_offsets, lookup_kinds;
  r.imports = syms->imports;
  // The driver library's own functions; one named like them in another file
  // (a framework's forwarding stub) is called by that file's code.
  const bool defer_here = defers_driver() && is_cuda_library(path, Layer::Driver);
  for (const FileSymbols::Function& fn : syms->functions) {
    const Api* api = fn.api;
    present[static_cast<int>(api->layer())] = true;
    found.insert(api);
    const std::uint64_t offset = fn.offset + fn.place.offset;
    if (defers_driver()) {
      const std::string_view symbol = probe_symbol(*api);
      if (symbol == "cuGetProcAddress" || symbol == "cuGetProcAddress_v2") {
        lookup_offsets.push_back(offset);
        lookup_kinds.push_back(CT_LOOKUP_OUT_ARG2);
      } else if (symbol == "cudaGetDriverEntryPoint" || symbol == "cudaGetDriverEntryPointByVersion") {
        lookup_offsets.push_back(offset);
        lookup_kinds.push_back(CT_LOOKUP_OUT_ARG2_PROGRAM);
      }
    }
    std::uint64_t cookie = 0;
    if (!planned_cookie(fn, cookie)) continue;
    if (defer_here && deferrable(*api)) {
      r.deferred.push_back({api, fn.offset, offset, cookie});
      ++r.apis;
      r.driver = true;
      continue;
    }
    if (split_hot_ && is_hot_api(*api)) {
      hot.offsets.push_back(offset);
      hot.cookies.push_back(cookie);
      hot.apis.push_back(api);
    } else {
      offsets.push_back(offset);
      cookies.push_back(cookie);
    }
    ++r.apis;
    r.runtime |= api->layer() == Layer::Runtime;
    r.driver |= api->layer() == Layer::Driver;
  }
  if (!offsets.empty()) {
    Links& links = file_links_[key];
    // None or all: a later attach_file tries the whole file again.
    if (!attach_calls(path, file, pid, offsets, cookies, links, error)) {
      detach(links);
      file_links_.erase(key);
      return false;
    }
  }
  if (!lookup_offsets.empty() &&
      !attach_lookup_probes(path, pid, lookup_offsets, lookup_kinds, file_links_[key], error)) {
    if (const auto links = file_links_.find(key); links != file_links_.end()) {  // none or all, as above
      detach(links->second);
      file_links_.erase(links);
    }
    return false;
  }
  r.runtime_library = is_cuda_library(path, Layer::Runtime);
  if (!hot.offsets.empty()) {
    hot.file_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    hot.key = key;
    hot.name = path;
    hot.since_ns = monotonic_ns();
    if (hot.file_fd < 0) error = path + ": " + std::strerror(errno);
    if (hot.file_fd < 0 || (hot_attached_ && !attach_hot(hot, error))) {
      if (hot.file_fd >= 0) close(hot.file_fd);
      if (const auto links = file_links_.find(key); links != file_links_.end()) {  // none or all, as above
        detach(links->second);
        file_links_.erase(links);
      }
      return false;
    }
    hot_.push_back(std::move(hot));
  }
  // Nothing a user can do about it (their CUDA is older or newer than the
  // table): a note for -v.
  for (Layer layer : {Layer::Runtime, Layer::Driver, Layer::Nccl}) {
    if (!note_ || !present[static_cast<int>(layer)] || !is_cuda_library(path, layer)) continue;
    std::string missing;
    int n = 0;
    for (const Api& a : apis()) {
      if (a.variant || a.layer() != layer || !is_core_api(a) || !selection_.wants(a) || found.count(&a)) continue;
      if (n++ < 5) missing += (missing.empty() ? "" : ", ") + a.symbol;
    }
    if (n) note_(basename_of(path) + " does not export " + std::to_string(n) + " traced API(s) (" + missing +
                 (n > 5 ? ", ..." : "") + "); tracing the rest");
  }
  attached_.emplace(key, r);
  result = r;
  return true;
}

bool Probes::attach_calls(const std::string& path, const std::tuple<dev_t, ino_t>& file, pid_t pid,
                          const std::vector<std::uint64_t>& offsets, const std::vector<std::uint64_t>& cookies,
                          Links& into, std::string& error) {
  return mode_ == AttachMode::MultiSession
             ? attach_multi(session_, path, pid, offsets, cookies, MultiLink::Session, into, error)
             : attach_pairs(enter_, exit_, path, file, pid, offsets, cookies, into, error);
}

bool Probes::file_key(const std::string& path, pid_t pid, std::tuple<dev_t, ino_t, pid_t>& key, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  key = std::make_tuple(st.st_dev, st.st_ino, pid);
  return true;
}

bool Probes::attach_lookup_probes(const std::string& path, pid_t pid, const std::vector<std::uint64_t>& offsets,
                                  const std::vector<std::uint64_t>& kinds, Links& links, std::string& error) {
  // Entry and return as a pair in both uprobe_multi modes (the result is
  // read at the return).
  return attach_multi(lookup_exit_, path, pid, offsets, kinds, MultiLink::Return, links, error) &&
         attach_multi(lookup_enter_, path, pid, offsets, kinds, MultiLink::Entry, links, error);
}

bool Probes::attach_lookups(const std::string& path, pid_t pid, std::string& error) {
  if (!defers_driver()) return false;
  std::tuple<dev_t, ino_t, pid_t> key;
  if (!file_key(path, pid, key, error)) return false;
  if (lookups_.count(key)) return true;
  auto elf = ElfFile::open(path, error);
  if (!elf) return false;
  std::vector<std::uint64_t> offsets, kinds;
  for (const auto& [name, vaddr] : elf->find_functions({"dlsym", "dlvsym"})) {
    std::uint64_t offset = 0;
    if (!elf->vaddr_to_offset(vaddr, offset)) continue;
    offsets.push_back(offset + place_at(*elf, offset).offset);
    kinds.push_back(CT_LOOKUP_RESULT);
  }
  if (offsets.empty()) return false;
  if (!attach_lookup_probes(path, pid, offsets, kinds, file_links_[key], error)) return false;
  lookups_.insert(key);
  return true;
}

bool Probes::attach_deferred(const std::string& path, pid_t pid, const std::vector<Deferred>& functions,
                             std::string& error) {
  std::tuple<dev_t, ino_t> file;
  if (!symbols_of(path, error, file)) return false;
  std::vector<std::uint64_t> offsets, cookies;
  for (const Deferred& d : functions)
    if (!deferred_probed_.count(std::make_tuple(std::get<0>(file), std::get<1>(file), pid, d.probe)) &&
        std::find(offsets.begin(), offsets.end(), d.probe) == offsets.end()) {
      offsets.push_back(d.probe);
      cookies.push_back(d.cookie);
    }
  if (offsets.empty()) return true;
  Links links;
  const bool attached = attach_calls(path, file, pid, offsets, cookies, links, error);
  Links& kept = file_links_[std::tuple_cat(file, std::make_tuple(pid))];
  kept.entry.insert(kept.entry.end(), links.entry.begin(), links.entry.end());
  kept.ret.insert(kept.ret.end(), links.ret.begin(), links.ret.end());
  kept.events.insert(kept.events.end(), links.events.begin(), links.events.end());
  kept.probes += links.probes;
  if (!attached) return false;
  for (std::uint64_t offset : offsets)
    deferred_probed_.emplace(std::get<0>(file), std::get<1>(file), pid, offset);
  return true;
}

bool Probes::attach_loader(const std::string& path, pid_t pid, std::string& error) {
  std::tuple<dev_t, ino_t, pid_t> key;
  if (!file_key(path, pid, key, error)) return false;
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
  const std::tuple<dev_t, ino_t> file{std::get<0>(key), std::get<1>(key)};
  if (!attach_pairs(map_change_, nullptr, path, file, pid, {offset}, {to_r_state}, other_links_, error))
    return false;
  loaders_.insert(key);
  return true;
}

bool Probes::attach_function(const std::string& path, pid_t pid, std::uint64_t offset, std::uint64_t cookie,
                             bool with_return, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  return attach_pairs(enter_, with_return ? exit_ : nullptr, path, {st.st_dev, st.st_ino}, pid, {offset}, {cookie},
                      other_links_, error);
}

bool Probes::attach_program(bpf_program* prog, const std::string& path, pid_t pid, std::uint64_t offset,
                            std::string& error) {
  std::tuple<dev_t, ino_t, pid_t> key;
  if (!file_key(path, pid, key, error)) return false;
  const auto [dev, ino, _] = key;
  if (programs_.count({prog, dev, ino, pid, offset})) return true;
  if (!attach_pairs(prog, nullptr, path, {dev, ino}, pid, {offset}, {0}, other_links_, error)) return false;
  programs_.emplace(prog, dev, ino, pid, offset);
  return true;
}

std::string probe_summary(const std::string& path, const std::vector<PlannedProbe>& planned) {
  std::size_t probes = 0, emulated = 0;
  std::string stepped;
  int listed = 0;
  for (const PlannedProbe& p : planned) {
    if (!p.attached) continue;
    ++probes;
    if (p.place.emulated) {
      ++emulated;
    } else if (listed++ < 4) {
      stepped += fmt::format("{}{} {}", stepped.empty() ? "" : ", ", p.api->symbol, describe(p.place));
    }
  }
  const std::size_t steps = probes - emulated;
  return fmt::format("{}: {} probes, {} on instructions the kernel emulates, {} single-stepped{}",
                     path.substr(path.rfind('/') + 1), probes, emulated, steps,
                     steps ? " (" + stepped + (steps > 4 ? ", ..." : "") + ")" : "");
}

}  // namespace cudatrace
