// Loading a BPF object and saying what the kernel said when it refused:
// which program, and the verifier's own words for a program it rejected,
// read back from libbpf's messages (libbpf keeps the verifier's log only in
// them). A refusal is a permission problem only when the capabilities are
// missing; anything else is the kernel's (exit status 5).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cudatrace {

// CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, which implies both) in an
// effective capability set, as /proc/self/status's CapEff shows it.
bool has_bpf_capabilities(unsigned long long effective);

// What libbpf said while an object failed to load.
struct BpfLoadFailure {
  std::string program;       // the program the kernel refused; empty when it was no program (a map, BTF)
  std::string verifier_log;  // the verifier's log of that program; empty when the kernel gave none
};

// Reads libbpf's messages (libbpf 1.x wording) back into a failure.
BpfLoadFailure parse_libbpf_messages(const std::string& messages);

// Runs `load` (a skeleton's load, returning 0 or a negative errno) with
// libbpf's messages kept for `failure`; they still reach libbpf's printer.
int load_keeping_messages(const std::function<int()>& load, BpfLoadFailure& failure);

// The lines (without "cudatrace: ") that report load error `err` (negative
// errno) and its exit status. `verbose`: libbpf has printed the whole log.
struct LoadErrorReport {
  std::vector<std::string> lines;
  int exit_status = 0;
};
LoadErrorReport report_load_error(int err, const BpfLoadFailure& failure, bool verbose);

}  // namespace cudatrace
