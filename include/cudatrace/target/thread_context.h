// Finding a process's OpenTelemetry context (docs/correlation.md): where its
// thread-local otel_thread_ctx_v1 lives, for BPF to read each thread's span
// at every call (bpf_abi.h ct_tls_target), and its published process
// context (the OTEL_CTX mapping, decode/otel.h).
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/otel.h"
#include "cudatrace/node_counts.h"
#include "cudatrace/target/process.h"

namespace cudatrace {

inline constexpr const char* kThreadContextSymbol = "otel_thread_ctx_v1";

// Reads `len` bytes of `pid`'s memory at `addr` (/proc/PID/mem).
bool read_process_memory(pid_t pid, std::uint64_t addr, void* out, std::size_t len);

// The module that defines otel_thread_ctx_v1 in `pid`, found by walking the
// dynamic loader's link map (_r_debug.r_map) and looking in each module's
// symbols; with glibc's layout of struct link_map and the dtv from its
// _thread_db_* descriptors. Files are looked at once each (`cache`: path ->
// the variable's offset, or none). False with `why` when there is none, or it
// cannot be found (no glibc loader, the link map unreadable).
class ThreadContextFinder {
 public:
  bool find(pid_t pid, const std::vector<Mapping>& maps, ct_tls_target& out, std::string& why);

 private:
  std::map<std::string, std::optional<std::uint64_t>> symbol_cache_;  // by file identity
  struct Layout {
    bool ok = false;
    std::uint32_t lm_tls_offset = 0, lm_tls_modid = 0, dtv_in_tcb = 0, dtv_slot_size = 0, dtv_val = 0;
  };
  std::map<std::string, Layout> layouts_;  // by libc file identity
};

// Where a process context was read from: its header's address and bytes.
// The header changes when the process publishes again (OTEP 4719 updates
// published_at_ns; a new mapping is elsewhere).
struct ProcessContextHeaderCopy {
  std::uint64_t address = 0;
  std::array<char, kProcessContextHeader> bytes{};
};

// Reads `pid`'s OTEL_CTX mapping and decodes its payload. False if it has
// none, or none readable and whole yet (an update in progress). `header`,
// if given, is where it was found.
bool read_process_context(pid_t pid, const std::vector<Mapping>& maps, ProcessContext& out,
                          ProcessContextHeaderCopy* header = nullptr);

// The service `pid` says it is in its process context (OpenTelemetry's
// resource conventions: service.name, service.namespace,
// deployment.environment.name or the older deployment.environment), into
// `label`'s; nothing when it published none.
void read_service_labels(pid_t pid, ProcessLabel& label);

}  // namespace cudatrace
