// The recorder's records: each ring-buffer record is checked against its
// size, decoded, and its call handed on; calls still open at the end become
// unfinished records.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstring>

#include "cudatrace/bpf_abi.h"  // before the skeleton: its struct ct_config
#include "cudatrace.skel.h"
#include "cudatrace/record/recorder.h"

namespace cudatrace {

static_assert(sizeof(ct_call) == 176, "ct_call layout changed: check bpf/ and include/cudatrace/bpf_abi.h agree");

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
  ++records_;
  if (call_.pid != last_pid_ || call_.tid != last_tid_) {  // threads to look for at exit
    last_pid_ = call_.pid;
    last_tid_ = call_.tid;
    tracked_pids_.insert(call_.pid);
    tracked_tids_[call_.pid].insert(call_.tid);
  }
  if (needs_.counted_activity && call_.counted() && activity_api(*call_.api).kind == CT_ACT_PAGE_LOCK) {
    // This call bumped the page-locked generation: the copies counted
    // before it are judged by the page-locked memory before it.
    read_activity(++page_locked_changes_);
    decode_call(rec, &names_, call_, &read_string_);  // read_activity reused call_
  }
  if (call_.api->group() == Group::Module) names_.learn(call_);
  if (needs_.stacks == RecordsNeeded::Stacks::Frames) call_.stack = stacks_.frames(static_cast<pid_t>(call_.pid), call_.stack_addresses);
  consumer_->on_call(call_);
}

std::string Recorder::location(std::uint32_t pid, std::uint64_t addr) {
  if (!addr) return "an unknown call site";
  const Symbolizer::Location loc = symbolizer_.locate(static_cast<pid_t>(pid), addr);
  std::string site = fmt::format("{:#x}", addr);
  if (!loc.module.empty()) site = fmt::format("{}+{:#x}", loc.module.substr(loc.module.rfind('/') + 1), loc.module_offset);
  if (!loc.function.empty()) site += fmt::format(" ({}+{:#x})", loc.function, loc.function_offset);
  return site;
}

std::string Recorder::gpu_code(std::uint32_t pid, std::uint64_t addr) {
  return symbolizer_.gpu_code(static_cast<pid_t>(pid), addr);
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
      const ct_frame& f = st.frames[i];
      if (f.owner != CT_FRAME_RECORDED) continue;  // a forward (its owner is reported) or part of its parent
      rec = ct_call{};
      rec.type = CT_REC_UNFINISHED;
      rec.api = static_cast<__u16>(CT_COOKIE_API(f.cookie));
      rec.parent_api = f.parent_api;
      rec.pid = st.tgid;
      rec.tid = key;
      rec.ts_ns = f.ts_ns;
      std::memcpy(rec.args, f.args, sizeof rec.args);
      rec.depth = f.level;
      std::memcpy(rec.comm, st.comm, sizeof rec.comm);
      on_call(rec);
    }
  }
}

}  // namespace cudatrace
