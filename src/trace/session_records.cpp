// The session's records: each ring-buffer record is checked against its
// size, decoded, and its call passed to the trackers and the outputs; calls
// still open at the end become unfinished records.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstring>

#include "cudatrace.skel.h"
#include "cudatrace/render/format.h"
#include "cudatrace/trace/session.h"

namespace cudatrace {

static_assert(sizeof(ct_call) == 176, "ct_call layout changed: check bpf/ and include/cudatrace/record.h agree");

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
  if (exporter_) {  // exporter mode: only allocations and frees send records
    exporter_->on_call(call_);
    return;
  }
  if (activity_in_bpf_ && call_.counted() && activity_api(*call_.api).kind == CT_ACT_PAGE_LOCK) {
    // This call bumped the page-locked generation: the copies counted
    // before it are judged by the page-locked memory before it.
    read_activity(++page_locked_changes_);
    decode_call(rec, &names_, call_, &read_string_);  // read_activity reused call_
  }
  if (call_.api->group() == Group::Module) names_.learn(call_);
  const CallAnalysis& analysis = pipeline_->on_call(call_);
  if (analysis.streams->pageable_host_ptr) warn_pageable_copy(*analysis.streams->pageable_host_ptr);
  if (analysis.closed_range)
    for (const auto& sink : sinks_) sink->on_nvtx_range(*analysis.closed_range);
  if (!analysis.displayed) return;
  if (opts_.stack && !reporter_) call_.stack = stacks_.frames(static_cast<pid_t>(call_.pid), call_.stack_addresses);
  for (const auto& sink : sinks_) sink->on_call(call_, analysis);
  if (!reporter_ && out_->buffer().size() >= OutputWriter::kChunkBytes) hand_over_output();
}

// -p: the naming window ends once every kernel launched lately has a name:
// a second after attaching, and half a second after the last launch that
// needed its runtime launch's host stub. A launch of a kernel looked up
// before then and first launched after shows "?".
void Session::end_naming_window_when_done() {
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

// A driver copy that a runtime made: its call site becomes the program's,
// the first word above the return address on the stack that is a return
// address (code right after a call) outside CUDA and the C and C++ runtime
// libraries (the runtime's own frames lie between, and may hold stale
// return addresses of the calls it made into those).
static bool system_library(const Symbolizer::Location& loc) {
  const std::string base = loc.module.substr(loc.module.rfind('/') + 1);
  for (const char* lib : {"libc.so", "libc-", "ld-linux", "libstdc++.so", "libgcc_s.so", "libm.so", "libpthread"})
    if (base.rfind(lib, 0) == 0) return true;
  return false;
}

void Session::find_program_caller() {
  if (call_.caller_chain.empty() || !call_.caller) return;
  const auto pid = static_cast<pid_t>(call_.pid);
  if (!inside_cuda(symbolizer_.locate(pid, call_.caller))) return;
  for (std::uint64_t word : call_.caller_chain) {
    if (!word) continue;
    const Symbolizer::Location loc = symbolizer_.locate(pid, word);
    if (!loc.after_call || inside_cuda(loc) || system_library(loc)) continue;
    call_.caller = word;
    return;
  }
}

void Session::warn_pageable_copy(std::uint64_t host_ptr) {
  const std::uint64_t caller = call_.caller;
  Symbolizer::Location loc;
  if (caller) loc = symbolizer_.locate(static_cast<pid_t>(call_.pid), caller);
  std::string site = caller ? fmt::format("{:#x}", caller) : std::string("an unknown call site");
  if (caller) {
    if (!loc.module.empty())
      site = fmt::format("{}+{:#x}", loc.module.substr(loc.module.rfind('/') + 1), loc.module_offset);
    if (!loc.function.empty()) site += fmt::format(" ({}+{:#x})", loc.function, loc.function_offset);
  }
  const bool to_device = arg_value(call_, ArgType::Ptr, 1) == host_ptr;
  Warning w{"pageable_async_copy", host_ptr, site,
            fmt::format("{} {} pageable host memory {:#x} at {}: the copy is synchronous", call_.api->symbol,
                        to_device ? "from" : "to", host_ptr, site)};
  warn_line(terminal_safe(w.message));  // module and function names come from the traced program
  for (const auto& sink : sinks_) sink->on_warning(call_, w);
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

}  // namespace cudatrace
