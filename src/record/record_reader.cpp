#include "cudatrace/record/record_reader.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "cudatrace/clock.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/record/bpf_object.h"
#include "cudatrace/record/budget.h"
#include "cudatrace/record/probes.h"
#include "cudatrace/record/tracee.h"
#include "cudatrace/target/process.h"
#include "cudatrace/terminal.h"

namespace cudatrace {

static_assert(sizeof(ct_call) == 176, "ct_call layout changed: check bpf/ and include/cudatrace/bpf_abi.h agree");

void ExitWatch::saw(std::uint32_t pid, std::uint32_t tid) {
  if (pid == last_pid_ && tid == last_tid_) return;
  last_pid_ = pid;
  last_tid_ = tid;
  pids_.insert(pid);
  tids_[pid].insert(tid);
}

std::optional<ExitWatch::Gone> ExitWatch::take_due(std::uint64_t now_ns) {
  if (now_ns < next_look_ns_) return std::nullopt;
  next_look_ns_ = now_ns + 1000000000ull;
  for (pid_t pid : gone_.processes) {
    pids_.erase(static_cast<std::uint32_t>(pid));
    tids_.erase(static_cast<std::uint32_t>(pid));
  }
  for (auto [pid, tid] : gone_.threads) tids_[pid].erase(tid);
  last_pid_ = last_tid_ = 0;  // a reused pid or tid is tracked afresh
  return std::exchange(gone_, {});
}

void ExitWatch::look(const std::vector<pid_t>& mapped) {
  std::set<pid_t> known(mapped.begin(), mapped.end());
  for (std::uint32_t pid : pids_) known.insert(static_cast<pid_t>(pid));
  for (pid_t pid : known) {
    if (!process_exists(pid)) {
      gone_.processes.push_back(pid);
      continue;
    }
    const auto threads = tids_.find(static_cast<std::uint32_t>(pid));
    if (threads == tids_.end()) continue;
    for (std::uint32_t tid : threads->second)
      if (access(fmt::format("/proc/{}/task/{}", pid, tid).c_str(), F_OK) != 0)
        gone_.threads.emplace_back(static_cast<std::uint32_t>(pid), tid);
  }
}

RecordReader::RecordReader(BpfObject& bpf, Tracee& target, Symbolizer& symbolizer, const RecordsNeeded& needs)
    : bpf_(bpf),
      target_(target),
      symbolizer_(symbolizer),
      counted_activity_(needs.counted_activity) {
  names_.set_symbolizer([this](std::uint32_t pid, std::uint64_t addr) {
    std::string name = symbolizer_.function_at(static_cast<pid_t>(pid), addr);
    // Reading the stubs' handle variables may have taught the symbolizer to
    // name handles made before attach: those it could not name are tried again.
    if (symbolizer_.handle_layouts_learnt() != handle_layouts_seen_) {
      handle_layouts_seen_ = symbolizer_.handle_layouts_learnt();
      names_.forget_unknown();
    }
    return name;
  });
  names_.set_handle_learner([this](std::uint32_t pid, std::uint64_t handle, std::string_view mangled) {
    if (!symbolizer_.learn_handle(static_cast<pid_t>(pid), handle, mangled)) return false;
    handle_layouts_seen_ = symbolizer_.handle_layouts_learnt();
    return true;  // KernelNames tries its unnamed handles again
  });
  read_string_ = [this](std::uint32_t pid, std::uint64_t addr, std::string& out) {
    return symbolizer_.string_at(static_cast<pid_t>(pid), addr, CT_MAX_PAYLOAD, out);
  };
  // Facets are named as they are decoded; stacks only when an output shows them.
  if (needs.stacks == RecordsNeeded::Stacks::Frames)
    target_.facet_names().set(stack_facet(),
                              StackNamer([this](std::uint32_t pid, const std::vector<std::uint64_t>& addrs) {
                                return stacks_.frames(static_cast<pid_t>(pid), addrs);
                              }));
}

int RecordReader::open() {
  std::string error;
  ring_ = RingReader::open(bpf_.events_fd(), on_record, this, error);
  if (!ring_) {
    error_line("cannot open the ring buffer: " + error);
    return kExitKernel;
  }
  // Once a consumer takes the calls (feed): before, tracing has not begun.
  if (Probes* p = bpf_.probes()) p->read_while_attaching([this] {
    if (consumer_) ring_->drain();
  });
  control_ring_ = RingReader::open(bpf_.control_fd(), on_record, this, error);
  if (!control_ring_ || !ring_->wake_on(bpf_.control_fd())) {
    error_line("cannot open the control ring buffer: " + (control_ring_ ? std::string(std::strerror(errno)) : error));
    return kExitKernel;
  }
  return kExitOk;
}

void RecordReader::drain_control() { control_ring_->drain(); }

int RecordReader::wait_ms(int wait_ms) {
  if (!symbolizer_.python().any()) return wait_ms;
  const bool coming = python_records_ != python_records_before_wait_;
  python_records_before_wait_ = python_records_;
  if (coming) return std::min(wait_ms, 1);
  bpf_.wake_on_python_frames();
  // Records sent before the flag was set woke no one.
  return ring_->pending() ? std::min(wait_ms, 1) : wait_ms;
}

bool RecordReader::poll(int timeout_ms) {
  // Most records are submitted without a wake-up: the timeout collects them.
  if (ring_->poll(timeout_ms)) return true;
  error_line(std::string("reading the ring buffer: ") + std::strerror(errno));
  return false;
}

void RecordReader::drain() { ring_->drain(); }

bool RecordReader::on_record(void* ctx, const void* data, std::size_t size) {
  auto* self = static_cast<RecordReader*>(ctx);
  if (size < sizeof(__u32)) return false;
  switch (*static_cast<const __u32*>(data)) {
    case CT_REC_CALL:
    case CT_REC_UNFINISHED: {
      const auto* rec = static_cast<const ct_call*>(data);
      if (size < sizeof(ct_call)) break;
      const std::size_t room = size - sizeof(ct_call);
      if (record_fits(*rec, room)) self->on_call(*rec);
      break;
    }
    case CT_REC_MAP_CHANGE:
      // Published at once: the stop watchdog reads what is left unread.
      if (size >= sizeof(ct_map_change)) self->on_map_change(*static_cast<const ct_map_change*>(data));
      return true;
  }
  return false;
}

void RecordReader::on_call(const ct_call& rec) {
  if (!decode_call(rec, &names_, call_, &read_string_, &target_.facet_names())) return;
  ++records_;
  exits_.saw(call_.pid, call_.tid);
  if (counted_activity_ && call_.counted() && activity_api(*call_.api).kind == CT_ACT_PAGE_LOCK) {
    // This call bumped the page-locked generation: the copies counted
    // before it are judged by the page-locked memory before it.
    read_activity(++page_locked_changes_);
    decode_call(rec, &names_, call_, &read_string_, &target_.facet_names());  // read_activity reused call_
  }
  if (call_.api->group() == Group::Module) names_.learn(call_);
  if (record_section(rec, CT_SECTION_PY_FRAMES).bytes) ++python_records_;  // the reader waits less for more (wait_ms)
  consumer_->on_call(call_);
}

// The process waits (--dlopen-stop) until its new files are probed.
void RecordReader::on_map_change(const ct_map_change& m) {
  target_.on_map_change(static_cast<pid_t>(m.pid), m.wanted, m.wanted_by);
  if (!m.wanted) stacks_.forget(static_cast<pid_t>(m.pid));
  if (m.stopped) kill(static_cast<pid_t>(m.pid), SIGCONT);
}

// Hands on what BPF counted in the activity map, as calls rebuilt from the
// keys (summary.h: activity_record).
void RecordReader::read_activity(std::uint64_t below_gen, bool for_report) {
  if (!counted_activity_) return;
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
  const bool ok = activity_.read(bpf_.activity_fd(), bpf_.activity_counts_fd(), below_gen, add);
  if (!ok) warn_line(std::string("cannot read the activity map: ") + std::strerror(errno));
  if (budget_ && for_report) budget_->pass_activity(pass);
}

void RecordReader::pass_counted(bool final) {
  // Copies of generations whose page-locked change is still unread wait for it.
  read_activity(final ? ~std::uint64_t(0) : page_locked_changes_ + 1, true);
}

void RecordReader::forget_exited() {
  const std::optional<ExitWatch::Gone> gone = exits_.take_due(monotonic_ns());
  if (!gone) return;
  for (pid_t pid : gone->processes) {
    const auto id = static_cast<std::uint32_t>(pid);
    symbolizer_.forget(pid);
    names_.forget(id);
    stacks_.forget(pid);
    target_.forget_process(pid);
    consumer_->forget_process(id);
  }
  for (auto [pid, tid] : gone->threads) consumer_->forget_thread(pid, tid);
  exits_.look(symbolizer_.processes());
}

// Calls still in progress when tracing stops are reported as unfinished.
void RecordReader::report_open_calls() {
  const int fd = bpf_.threads_fd();
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

SiteNames RecordReader::site_names() {
  return {[this](std::uint32_t pid, std::uint64_t addr) { return frame_text(stacks_.frame(static_cast<pid_t>(pid), addr)); },
          [this](std::uint32_t pid, const std::vector<std::uint64_t>& addrs) {
            return stacks_.frames(static_cast<pid_t>(pid), addrs);
          }};
}

}  // namespace cudatrace
