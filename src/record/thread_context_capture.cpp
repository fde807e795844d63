// The OpenTelemetry thread context in each process (docs/correlation.md):
// where it keeps it, told to BPF, which then reads each call's span.
#include <bpf/bpf.h>

#include <cstdio>
#include <string>

#include "cudatrace/record/process_capture.h"
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
  }

 private:
  CaptureSetup s_;
  int fd_;  // "otel_tls": where each process keeps its thread context
  ThreadContextFinder finder_;
};

}  // namespace

std::unique_ptr<ProcessCapture> make_thread_context_capture(const CaptureSetup& setup) {
  if (!setup.settings.thread_ctx) return nullptr;
  return std::make_unique<ThreadContextCapture>(setup);
}

}  // namespace cudatrace
