// The OpenTelemetry context in each process (docs/correlation.md): where it
// keeps its thread context, told to BPF, which then reads each call's span;
// and the process context it published, read for the span facet's naming.
#include <bpf/bpf.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "cudatrace/clock.h"
#include "cudatrace/decode/otel.h"
#include "cudatrace/record/process_capture.h"
#include "cudatrace/target/process.h"
#include "cudatrace/target/thread_context.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

class ThreadContextCapture final : public ProcessCapture {
 public:
  explicit ThreadContextCapture(const CaptureSetup& setup) : s_(setup), fd_(setup.bpf.map_fd("otel_tls")) {}

  void look(pid_t pid, const std::vector<Mapping>& maps) override {
    const auto key = static_cast<std::uint32_t>(pid);
    ct_tls_target t{};
    std::string why;
    if (finder_.find(pid, maps, t, why)) {
      ct_tls_target old{};
      // Kept as it is when BPF already found the offsets (a later library load).
      if (bpf_map_lookup_elem(fd_, &key, &old) == 0 && old.link_map == t.link_map && old.st_value == t.st_value) return;
      if (bpf_map_update_elem(fd_, &key, &t, BPF_ANY) != 0 && s_.opts.verbose)
        warn_line("pid " + std::to_string(pid) + ": cannot tell BPF of its thread context");
      else if (s_.opts.verbose)
        std::fprintf(stderr, "cudatrace: pid %d: OpenTelemetry thread context found\n", pid);
    } else {
      bpf_map_delete_elem(fd_, &key);  // after an exec
    }
  }

  void forget(pid_t pid) override {
    const auto key = static_cast<std::uint32_t>(pid);
    bpf_map_delete_elem(fd_, &key);
    processes_.erase(key);
    last_ = nullptr;
  }

  // Each call's span is named by its process's context.
  void name_facet(FacetNames& names) override {
    names.set(span_facet(), ProcessContextFinder([this](std::uint32_t pid, std::uint64_t call_ns) {
      return process_context(pid, call_ns);
    }));
  }

  // A process stopped at a library load waits while its process context is
  // read: one that exits before the reader reaches its first call is still found.
  void library_loaded(pid_t pid) override { process_context(static_cast<std::uint32_t>(pid), 0, true); }

 private:
  // The process context `pid` published (OTEP 4719) for its call that began
  // at `call_ns`: the one it published last when the
  // call was read, or one published after the call. Until one is found, it
  // is looked for at the process's calls 10 ms after the first look, then
  // twice as long after each look, up to each second. Once found, a call
  // made after its header was last read reads the header (32 bytes) again,
  // at most each 10 ms: a process that publishes again is seen at its first
  // call after that, and the new context is carried by the calls that began
  // after it was read (those before carry the one it replaced). nullptr while
  // it has none. Valid until the next call.
  // `now_anyway`: look now, however recently it was looked for (a library load).
  const ProcessContext* process_context(std::uint32_t pid, std::uint64_t call_ns, bool now_anyway = false) {
    constexpr std::uint64_t kFirstLookWaitNs = 10000000, kLongestLookWaitNs = 1000000000;
    constexpr std::uint64_t kHeaderReadWaitNs = 10000000;  // a read opens /proc/PID/mem
    // Asked for every record: the process of the record before is kept at hand.
    if (!last_ || last_pid_ != pid) {
      last_ = &processes_[pid];
      last_pid_ = pid;
    }
    ProcessContextState& p = *last_;
    // A context read again applies from when it was read: a call that began
    // before (read late, the reader behind) carries the one before it.
    const auto for_the_call = [&] { return p.previous && call_ns < p.since_ns ? p.previous.get() : p.context.get(); };
    // Read after the call began: what the call ran under, or newer.
    if (call_ns < p.read_ns && !now_anyway) return for_the_call();
    // The waits are counted in the program's time, the call's start: no
    // clock is read per record (and a reader behind looks less often).
    if (p.header.address && call_ns < p.read_ns + kHeaderReadWaitNs && !now_anyway) return for_the_call();
    // Not yet time to look for one.
    if (!p.header.address && call_ns < p.next_look_ns && !now_anyway) return for_the_call();
    const std::uint64_t now = monotonic_ns();
    if (p.header.address) {
      std::array<char, kProcessContextHeader> header;
      if (read_process_memory(static_cast<pid_t>(pid), p.header.address, header.data(), header.size()) &&
          header == p.header.bytes) {
        p.read_ns = now;
        return for_the_call();
      }
      p.header.address = 0;  // published again, or unmapped: the maps say
      p.next_look_ns = 0;
      p.look_wait_ns = 0;
    }
    if (now < p.next_look_ns && !now_anyway) return for_the_call();
    p.read_ns = now;
    p.look_wait_ns = std::clamp(p.look_wait_ns * 2, kFirstLookWaitNs, kLongestLookWaitNs);
    p.next_look_ns = now + p.look_wait_ns;
    std::vector<Mapping> maps;
    ProcessContext ctx;
    ProcessContextHeaderCopy header;
    // Not found (none yet, an update in progress): the last one found stays.
    if (!read_maps(static_cast<pid_t>(pid), maps) ||
        !read_process_context(static_cast<pid_t>(pid), maps, ctx, &header))
      return for_the_call();
    const bool same = p.context && header.bytes == p.header.bytes;  // mapped again elsewhere, say
    p.header = header;
    if (!same) {
      ctx.generation = next_context_generation();
      // The first one found is the process's from its start (-p: published long before).
      if (p.context) {
        p.previous = std::move(p.context);
        p.since_ns = now;
      }
      p.context = std::make_unique<ProcessContext>(std::move(ctx));
    }
    return for_the_call();
  }

  CaptureSetup s_;
  int fd_;  // "otel_tls": where each process keeps its thread context
  ThreadContextFinder finder_;
  // The process context of each process.
  struct ProcessContextState {
    std::unique_ptr<ProcessContext> context;  // the last one found
    std::unique_ptr<ProcessContext> previous;  // the one it replaced, for calls that began before since_ns
    std::uint64_t since_ns = 0;
    ProcessContextHeaderCopy header;          // where it was found (address 0: no mapping known)
    std::uint64_t read_ns = 0;                // when the header or the maps were last read
    std::uint64_t next_look_ns = 0, look_wait_ns = 0;  // no mapping known: when the maps are read again
  };
  std::map<std::uint32_t, ProcessContextState> processes_;
  ProcessContextState* last_ = nullptr;  // processes_[last_pid_]
  std::uint32_t last_pid_ = 0;
};

}  // namespace

std::unique_ptr<ProcessCapture> make_thread_context_capture(const CaptureSetup& setup) {
  if (!setup.settings.thread_ctx) return nullptr;
  return std::make_unique<ThreadContextCapture>(setup);
}

}  // namespace cudatrace
