// The recorder's records: each ring-buffer record is checked against its
// size, decoded, and its call handed on; calls still open at the end become
// unfinished records.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstring>

#include "cudatrace/record.h"  // before the skeleton: its struct ct_config
#include "cudatrace.skel.h"
#include "cudatrace/record/recorder.h"

namespace cudatrace {

static_assert(sizeof(ct_call) == 176, "ct_call layout changed: check bpf/ and include/cudatrace/record.h agree");

bool Recorder::on_record(void* ctx, const void* data, std::size_t size) {
  auto* self = static_cast<Recorder*>(ctx);
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

void Recorder::on_call(const ct_call& rec) {
  if (!decode_call(rec, &names_, call_, &read_string_)) return;
  // -p's naming window: a runtime operation recorded at the driver is here
  // only to name the driver launch made inside it, which is the record.
  if (naming_since_ns_) {  // (probes_ is gone by the last drain)
    if (recorded_at_driver(*call_.api)) return;
    if (call_.parent && recorded_at_driver(*call_.parent)) {
      call_.parent = nullptr;
      call_.depth = 0;
    }
    if (call_.named_by_parent) last_named_ns_ = monotonic_ns();
  }
  find_program_caller();
  ++records_;
  if (call_.pid != last_pid_ || call_.tid != last_tid_) {  // threads to look for at exit
    last_pid_ = call_.pid;
    last_tid_ = call_.tid;
    tracked_pids_.insert(call_.pid);
    tracked_tids_[call_.pid].insert(call_.tid);
  }
  if (activity_in_bpf_ && call_.counted() && activity_api(*call_.api).kind == CT_ACT_PAGE_LOCK) {
    // This call bumped the page-locked generation: the copies counted
    // before it are judged by the page-locked memory before it.
    read_activity(++page_locked_changes_);
    decode_call(rec, &names_, call_, &read_string_);  // read_activity reused call_
    find_program_caller();
  }
  if (call_.api->group() == Group::Module) names_.learn(call_);
  if (opts_.stack && !opts_.summary) call_.stack = stacks_.frames(static_cast<pid_t>(call_.pid), call_.stack_addresses);
  consumer_->on_call(call_);
}

// -p: the naming window ends once every kernel launched lately has a name:
// a second after attaching, and half a second after the last launch that
// needed its runtime launch's host stub. A launch of a kernel looked up
// before then and first launched after shows "?".
void Recorder::end_naming_window_when_done() {
  if (!probes_ || !probes_->naming_window()) return;
  constexpr std::uint64_t kAtLeastNs = 1000000000, kQuietNs = 500000000;
  const std::uint64_t now = monotonic_ns();
  if (now - naming_since_ns_ < kAtLeastNs || (last_named_ns_ && now - last_named_ns_ < kQuietNs)) return;
  // A runtime launch in progress when its return probe goes is never seen
  // returning: BPF drops its frame (drop_stale_frames), as the budget's.
  for (const Api& a : apis())
    if (recorded_at_driver(a)) skel_->bss->hot_apis[a.id] = 1;
  probes_->end_naming_window();
  skel_->bss->hot_stale_before_ns = monotonic_ns();
  if (opts_.verbose)
    std::fprintf(stderr, "cudatrace: kernel naming window closed after %.1f s: runtime launches are no longer probed\n",
                 double(monotonic_ns() - naming_since_ns_) / 1e9);
}

// Where the program made the copy: the record's call site, or, for a driver
// copy that a runtime made, the first return address up the chain outside
// the runtime (a CUDA library, a statically linked runtime's functions).
static bool inside_cuda(const Symbolizer::Location& loc) {
  const std::string base = loc.module.substr(loc.module.rfind('/') + 1);
  return base.rfind("libcudart", 0) == 0 || base.rfind("libcuda.so", 0) == 0 ||
         loc.function.rfind("libcudart_static", 0) == 0 || api_by_symbol(loc.function) != nullptr;
}

// The C and C++ runtime libraries, whose frames lie between a program and CUDA.
static bool system_library(const Symbolizer::Location& loc) {
  const std::string base = loc.module.substr(loc.module.rfind('/') + 1);
  for (const char* lib : {"libc.so", "libc-", "ld-linux", "libstdc++.so", "libgcc_s.so", "libm.so", "libpthread"})
    if (base.rfind(lib, 0) == 0) return true;
  return false;
}

// A driver copy that a runtime made: its call site becomes the program's,
// found among the stack words above the return address (the runtime keeps
// no frame pointers). A word is the program's call site when it is a return
// address outside CUDA and the C runtime whose call went to a runtime copy
// function (cudaMemcpyAsync, ...), as the file says. Stale return addresses
// lie between: the program's error check after its previous CUDA call
// (PyTorch's c10_cuda_check_implementation calling cudaGetLastError) left
// its own there. A call whose callee cannot be told (through a register) is
// taken when no word is confirmed.
void Recorder::find_program_caller() {
  if (call_.caller_chain.empty() || !call_.caller) return;
  const auto pid = static_cast<pid_t>(call_.pid);
  if (!inside_cuda(symbolizer_.locate(pid, call_.caller))) return;
  std::uint64_t unconfirmed = 0;
  for (std::uint64_t word : call_.caller_chain) {
    if (!word) continue;
    const Symbolizer::Location loc = symbolizer_.locate(pid, word);
    if (!loc.after_call || inside_cuda(loc) || system_library(loc)) continue;
    const std::string callee = symbolizer_.callee_name(pid, word);
    const Api* api = api_by_symbol(callee);
    if (api && api->effect() == Effect::Copy) {
      call_.caller = word;
      return;
    }
    if (callee.empty() && !unconfirmed) unconfirmed = word;  // a known call to anything else is stale
  }
  if (unconfirmed) call_.caller = unconfirmed;
}

std::string Recorder::location(std::uint32_t pid, std::uint64_t addr) {
  if (!addr) return "an unknown call site";
  const Symbolizer::Location loc = symbolizer_.locate(static_cast<pid_t>(pid), addr);
  std::string site = fmt::format("{:#x}", addr);
  if (!loc.module.empty()) site = fmt::format("{}+{:#x}", loc.module.substr(loc.module.rfind('/') + 1), loc.module_offset);
  if (!loc.function.empty()) site += fmt::format(" ({}+{:#x})", loc.function, loc.function_offset);
  return site;
}

SiteNames Recorder::site_names() {
  return {[this](std::uint32_t pid, std::uint64_t addr) { return frame_text(stacks_.frame(static_cast<pid_t>(pid), addr)); },
          [this](std::uint32_t pid, const std::vector<std::uint64_t>& addrs) {
            return stacks_.frames(static_cast<pid_t>(pid), addrs);
          }};
}

// Calls still in progress when tracing stops are reported as unfinished.
void Recorder::report_open_calls() {
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

}  // namespace cudatrace
