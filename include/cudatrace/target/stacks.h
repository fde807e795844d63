// User stacks captured with --stack: reading them from a record and naming
// their frames (function containing each address, demangled; else the
// mapped file and offset), against each process's own mappings.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/stack_frame.h"

namespace cudatrace {

class Symbolizer;

// Names stack addresses, caching per process (at most kMaxCached frames:
// over it the cache starts afresh); forget() a process whose mappings
// changed.
class StackSymbolizer {
 public:
  explicit StackSymbolizer(Symbolizer& symbolizer) : symbolizer_(symbolizer) {}
  // Every frame is a return address, so the call instruction is the byte
  // before it: that byte is what is looked up.
  StackFrame frame(pid_t pid, std::uint64_t return_address);
  std::vector<StackFrame> frames(pid_t pid, const std::vector<std::uint64_t>& return_addresses);
  void forget(pid_t pid);
  static constexpr std::size_t kMaxCached = 65536;

 private:
  Symbolizer& symbolizer_;
  std::map<std::pair<pid_t, std::uint64_t>, StackFrame> cache_;
};


}  // namespace cudatrace
